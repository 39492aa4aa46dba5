// backend_memory_resource (backend_memory_resource.hpp): one backend allocation and free call per request,
// chosen by the memory kind in the one table below.

#include <gpumem/backend/backend.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/backend_memory_resource.hpp>

#include <string>
#include <string_view>

namespace gpumem::mr {
namespace {

/// What differs between the kinds: the backend's calls, and the names an out-of-memory message gives.
struct kind_calls {
  std::string_view resource_name;
  void* (detail::backend::*allocate)(std::size_t);
  void (detail::backend::*free)(void*) noexcept;
  std::string_view out_of_memory_note;  // appended to the message; empty for none
};

kind_calls const& calls_of(memory_kind kind) noexcept
{
  static constexpr kind_calls device{"cuda_memory_resource", &detail::backend::malloc_device,
                                     &detail::backend::free_device, {}};
  static constexpr kind_calls managed{"managed_memory_resource", &detail::backend::malloc_managed,
                                      &detail::backend::free_managed, {}};
  static constexpr kind_calls pinned_host{
    "pinned_host_memory_resource", &detail::backend::malloc_pinned, &detail::backend::free_pinned,
    "pinned host memory is limited by the host's physical memory, not by the device's"};
  switch (kind) {
    case memory_kind::managed: return managed;
    case memory_kind::pinned_host: return pinned_host;
    case memory_kind::device: break;
  }
  return device;
}

}  // namespace

void* backend_memory_resource::do_allocate(std::size_t bytes, cuda_stream_view /*stream*/)
{
  kind_calls const& calls = calls_of(kind_);
  detail::backend& backend = detail::get_backend();
  void* const ptr = (backend.*calls.allocate)(bytes);
  if (ptr == nullptr) {
    throw_out_of_memory(calls.resource_name, bytes, backend.current_device(), calls.out_of_memory_note);
  }
  return ptr;
}

void backend_memory_resource::do_deallocate(void* ptr, std::size_t /*bytes*/, cuda_stream_view /*stream*/) noexcept
{
  detail::backend& backend = detail::get_backend();
  (backend.*calls_of(kind_).free)(ptr);
}

shareable_memory backend_memory_resource::do_shareable(void const* ptr, std::size_t bytes) const
{
  expects(kind_ == memory_kind::device, std::string{calls_of(kind_).resource_name} +
                                          " cannot share its memory with another process (CUDA IPC shares cudaMalloc "
                                          "memory only; asked for " + std::to_string(bytes) + " bytes at " +
                                          format_pointer(ptr) + ")");
  detail::backend& be = detail::get_backend();
  ipc_memory_handle const found = be.ipc_get_mem_handle(ptr, bytes);
  shareable_memory result;
  result.how = shareable_memory::mechanism::cuda_ipc;
  result.device = be.pointer_get_attributes(ptr).device;
  result.bytes = bytes;
  result.offset = found.offset;
  result.cuda_data = found.handle;
  return result;
}

bool backend_memory_resource::do_is_equal(device_memory_resource const& other) const noexcept
{
  auto const* const same = dynamic_cast<backend_memory_resource const*>(&other);
  return same != nullptr && same->kind_ == kind_;
}

}  // namespace gpumem::mr
