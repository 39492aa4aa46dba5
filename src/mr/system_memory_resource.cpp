// system_memory_resource (system_memory_resource.hpp): the system allocator, for devices that can access
// pageable memory.
#include <gpumem/backend/backend.hpp>
#include <gpumem/debug_log.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/detail/align.hpp>
#include <gpumem/mr/system_memory_resource.hpp>

#include <unistd.h>

#include <new>
#include <string>

namespace gpumem::mr {
namespace {

constexpr std::align_val_t alignment{detail::allocation_alignment};

/// Bytes of `pages` pages of sysconf's `name` (_SC_PHYS_PAGES, _SC_AVPHYS_PAGES); 0 where sysconf cannot say.
std::size_t system_pages_bytes(int name)
{
  long const page = ::sysconf(_SC_PAGESIZE);
  long const pages = ::sysconf(name);
  return page > 0 && pages > 0 ? static_cast<std::size_t>(pages) * static_cast<std::size_t>(page) : std::size_t{0};
}

/// "X free of Y total": the system's physical memory, as sysconf reports it (0 where it cannot).
std::string system_memory_text()
{
  return format_bytes(system_pages_bytes(_SC_AVPHYS_PAGES)) + " free of " +
         format_bytes(system_pages_bytes(_SC_PHYS_PAGES)) + " total";
}

[[noreturn]] void throw_out_of_memory(std::size_t bytes, cuda_device_id device, char const* why)
{
  throw out_of_memory("gpumem::mr::system_memory_resource: the system allocator could not allocate " +
                      format_bytes(bytes) + " of host memory for device " + std::to_string(device.value()) + why +
                      " (system memory: " + system_memory_text() + ")");
}

cuda_device_id supported_current_device()
{
  cuda_device_id const device = get_current_cuda_device();
  if (!is_system_memory_supported(device)) {
    throw cuda_error(cudaErrorNotSupported,
                     "gpumem::mr::system_memory_resource: device " + std::to_string(device.value()) + " (" +
                       detail::get_backend().properties(device.value()).name +
                       ") cannot access pageable host memory (cudaDevAttrPageableMemoryAccess is 0: the system "
                       "has neither HMM nor ATS), so it cannot use system memory");
  }
  return device;
}

}  // namespace

bool is_system_memory_supported(cuda_device_id device)
{
  return detail::get_backend().properties(device.value()).pageable_memory_access;
}

system_memory_resource::system_memory_resource() : device_{supported_current_device()} {}

void* system_memory_resource::do_allocate(std::size_t bytes, cuda_stream_view /*stream*/)
{
  // A request larger than the system's physical memory is refused before the system allocator sees it: with
  // overcommit it might "succeed" only to fail at first touch, and sanitizers abort on such sizes.
  std::size_t const physical = system_pages_bytes(_SC_PHYS_PAGES);
  if (physical != 0 && bytes > physical) {
    throw_out_of_memory(bytes, device_, ": more than the system's physical memory");
  }
  void* const ptr = ::operator new(bytes, alignment, std::nothrow);
  if (ptr == nullptr) { throw_out_of_memory(bytes, device_, ""); }
  return ptr;
}

void system_memory_resource::do_deallocate(void* ptr, std::size_t /*bytes*/, cuda_stream_view stream) noexcept
{
  if (!stream.synchronize_no_throw()) {
    detail::log(log_level::error, [&] {
      return "system_memory_resource::deallocate(" + format_pointer(ptr) +
             "): waiting for its stream failed, so the memory is not freed";
    });
    return;
  }
  ::operator delete(ptr, alignment);
}

bool system_memory_resource::do_is_equal(device_memory_resource const& other) const noexcept
{
  return dynamic_cast<system_memory_resource const*>(&other) != nullptr;
}

}  // namespace gpumem::mr
