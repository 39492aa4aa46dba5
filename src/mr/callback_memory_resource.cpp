// callback_memory_resource (callback_memory_resource.hpp): the application's functions, with the contract
// of device_memory_resource checked on what they return.
#include <gpumem/error.hpp>
#include <gpumem/mr/callback_memory_resource.hpp>
#include <gpumem/mr/detail/align.hpp>

#include <string>
#include <utility>

namespace gpumem::mr {

callback_memory_resource::callback_memory_resource(allocate_callback_t allocate_callback,
                                                   deallocate_callback_t deallocate_callback,
                                                   void* allocate_callback_arg, void* deallocate_callback_arg)
  : allocate_callback_{std::move(allocate_callback)},
    deallocate_callback_{std::move(deallocate_callback)},
    allocate_callback_arg_{allocate_callback_arg},
    deallocate_callback_arg_{deallocate_callback_arg}
{
  expects(static_cast<bool>(allocate_callback_), "the allocate callback must not be empty");
  expects(static_cast<bool>(deallocate_callback_), "the deallocate callback must not be empty");
}

void* callback_memory_resource::do_allocate(std::size_t bytes, cuda_stream_view stream)
{
  void* const ptr = allocate_callback_(bytes, stream, allocate_callback_arg_);
  if (ptr == nullptr) {
    throw bad_alloc("gpumem::mr::callback_memory_resource::allocate: the allocate callback returned null for " +
                    format_bytes(bytes));
  }
  if (!detail::is_aligned(ptr, detail::allocation_alignment)) {
    deallocate_callback_(ptr, bytes, stream, deallocate_callback_arg_);
    throw logic_error("gpumem::mr::callback_memory_resource::allocate: the allocate callback returned " +
                      format_pointer(ptr) + " for " + format_bytes(bytes) + ", which is not aligned to " +
                      std::to_string(detail::allocation_alignment) + " bytes (given back)");
  }
  return ptr;
}

void callback_memory_resource::do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept
{
  deallocate_callback_(ptr, bytes, stream, deallocate_callback_arg_);
}

}  // namespace gpumem::mr
