// The common checks of device_memory_resource (device_memory_resource.hpp): request size and alignment,
// done once here so that every resource rejects the same requests with the same messages.
#include <gpumem/error.hpp>
#include <gpumem/mr/detail/align.hpp>
#include <gpumem/mr/device_memory_resource.hpp>

#include <string>

namespace gpumem::mr {

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
