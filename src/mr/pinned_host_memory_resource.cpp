// pinned_host_memory_resource (pinned_host_memory_resource.hpp): cudaMallocHost / cudaFreeHost through the
// backend.

#include <gpumem/backend/backend.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/pinned_host_memory_resource.hpp>

namespace gpumem::mr {

void* pinned_host_memory_resource::do_allocate(std::size_t bytes, cuda_stream_view /*stream*/)
{
  detail::backend& backend = detail::get_backend();
  void* const ptr = backend.malloc_pinned(bytes);
  if (ptr == nullptr) {
    throw_out_of_memory("pinned_host_memory_resource", bytes, backend.current_device(),
                        "pinned host memory is limited by the host's physical memory, not by the device's");
  }
  return ptr;
}

void pinned_host_memory_resource::do_deallocate(void* ptr, std::size_t /*bytes*/, cuda_stream_view /*stream*/) noexcept
{
  detail::backend& backend = detail::get_backend();
  backend.free_pinned(ptr);
}

bool pinned_host_memory_resource::do_is_equal(device_memory_resource const& other) const noexcept
{
  return dynamic_cast<pinned_host_memory_resource const*>(&other) != nullptr;
}

}  // namespace gpumem::mr
