// The common checks of device_memory_resource (device_memory_resource.hpp): request size and alignment,
// done once here so that every resource rejects the same requests with the same messages; and the
// reports of misuse found in deallocate(), which checked_deallocate() turns into exceptions.
#include <gpumem/debug_log.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/detail/align.hpp>
#include <gpumem/mr/device_memory_resource.hpp>

#include <cxxabi.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <typeinfo>
#include <utility>

namespace gpumem::detail {
namespace {

/// The first misuse reported during the innermost checked_deallocate() of this thread, if any is running.
thread_local std::optional<std::string>* tls_misuse = nullptr;

}  // namespace

void report_deallocation_misuse(std::string const& message, bool log) noexcept
{
  if (log) { detail::log(log_level::error, message); }
  if (tls_misuse != nullptr && !tls_misuse->has_value()) {
    try {
      *tls_misuse = message;
    } catch (...) {  // NOLINT(bugprone-empty-catch): std::bad_alloc; the misuse was logged
    }
  }
}

bool deallocation_is_checked() noexcept { return tls_misuse != nullptr; }

}  // namespace gpumem::detail

namespace gpumem::mr {

void device_memory_resource::checked_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream)
{
  std::optional<std::string> misuse;
  std::optional<std::string>* const outer = std::exchange(detail::tls_misuse, &misuse);
  deallocate(ptr, bytes, stream);
  detail::tls_misuse = outer;
  if (misuse) { throw logic_error(*misuse); }
}

void owned_fd::reset(int fd) noexcept
{
  if (fd_ >= 0) { ::close(fd_); }
  fd_ = fd;
}

void device_memory_resource::expects_shareable_range(void const* ptr, std::size_t bytes)
{
  expects(ptr != nullptr, "shareable: the pointer is null");
  expects(bytes > 0, "shareable: the size is 0 (nothing to share at " + format_pointer(ptr) + ")");
  expects(reinterpret_cast<std::uintptr_t>(ptr) <= UINTPTR_MAX - bytes,
          "shareable: " + format_pointer(ptr) + " + " + std::to_string(bytes) + " bytes overflows the address space");
}

shareable_memory device_memory_resource::do_shareable(void const* ptr, std::size_t bytes) const
{
  char const* const mangled = typeid(*this).name();
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> const readable{abi::__cxa_demangle(mangled, nullptr, nullptr, &status),
                                                        std::free};
  throw logic_error(std::string{status == 0 && readable ? readable.get() : mangled} +
                    " cannot share its memory with another process (asked for " + std::to_string(bytes) + " bytes at " +
                    format_pointer(ptr) +
                    "): allocate the memory from vmm_pool_memory_resource, or from cuda_memory_resource or a pool over "
                    "it on the cuda backend");
}

void device_memory_resource::check_size(std::size_t bytes)
{
  if (!detail::checked_align_up(bytes, detail::allocation_alignment).has_value()) [[unlikely]] {
    throw bad_alloc("gpumem::mr::device_memory_resource::allocate: a request of " + std::to_string(bytes) +
                    " bytes cannot be served: rounding it up to the " +
                    std::to_string(detail::allocation_alignment) + "-byte allocation alignment overflows size_t");
  }
}

void device_memory_resource::check_alignment(std::size_t alignment)
{
  if (!detail::is_pow2(alignment)) [[unlikely]] {
    throw logic_error("gpumem::mr::device_memory_resource::allocate: alignment " + std::to_string(alignment) +
                      " is not a power of two");
  }
  if (alignment > detail::allocation_alignment) [[unlikely]] {
    throw logic_error("gpumem::mr::device_memory_resource::allocate: alignment " + std::to_string(alignment) +
                      " exceeds the " + std::to_string(detail::allocation_alignment) +
                      "-byte alignment that device resources guarantee; wrap the resource in an "
                      "aligned_resource_adaptor for larger alignments");
  }
}

}  // namespace gpumem::mr
