// new_delete_resource (new_delete_resource.hpp): aligned global operator new / delete, checked.
#include <gpumem/error.hpp>
#include <gpumem/mr/detail/align.hpp>
#include <gpumem/mr/new_delete_resource.hpp>

#include <algorithm>
#include <new>
#include <string>

namespace gpumem::mr {
namespace {

// pmr requires a valid, unique pointer for a zero-byte request, so such a request takes one byte; the
// deallocation must pass the same size to the sized delete.
constexpr std::size_t allocated_size(std::size_t bytes) noexcept { return std::max<std::size_t>(bytes, 1); }

}  // namespace

void* new_delete_resource::do_allocate(std::size_t bytes, std::size_t alignment)
{
  if (!detail::is_pow2(alignment)) [[unlikely]] {
    throw logic_error("gpumem::mr::new_delete_resource::allocate: alignment " + std::to_string(alignment) +
                      " is not a power of two");
  }
  try {
    return ::operator new(allocated_size(bytes), std::align_val_t{alignment});
  } catch (std::bad_alloc const&) {
    throw bad_alloc("gpumem::mr::new_delete_resource::allocate: ::operator new could not allocate " +
                    format_bytes(bytes) + " aligned to " + std::to_string(alignment) + " bytes");
  }
}

void new_delete_resource::do_deallocate(void* ptr, std::size_t bytes, std::size_t alignment) noexcept
{
  ::operator delete(ptr, allocated_size(bytes), std::align_val_t{alignment});
}

bool new_delete_resource::do_is_equal(host_memory_resource const& other) const noexcept
{
  return this == &other || dynamic_cast<new_delete_resource const*>(&other) != nullptr;
}

}  // namespace gpumem::mr
