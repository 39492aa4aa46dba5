// The common checks of device_memory_resource (device_memory_resource.hpp): request size and alignment,
// done once here so that every resource rejects the same requests with the same messages; and the
// reports of misuse found in deallocate(), which checked_deallocate() turns into exceptions.
#include <gpumem/debug_log.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/detail/align.hpp>
#include <gpumem/mr/device_memory_resource.hpp>

#include <optional>
#include <utility>
#include <string>

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
