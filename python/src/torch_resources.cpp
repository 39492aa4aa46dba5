// The device's PyTorch resource (torch_hooks.hpp). Placeholder: the device's current gpumem resource, nothing to
// prepare, no room to make, nothing to empty, no memory fraction.
#include "torch_hooks.hpp"

namespace gpumem::python::torch_hooks {

gpumem_status prepare_device(int) noexcept { return GPUMEM_SUCCESS; }

bool make_room(int, std::size_t) noexcept { return false; }

gpumem_status empty_cache(int, std::size_t* released) noexcept
{
  if (released != nullptr) { *released = 0; }
  return GPUMEM_SUCCESS;
}

gpumem_status set_memory_fraction(double, int) noexcept
{
  return fail(GPUMEM_ERROR_INVALID_VALUE, "set_memory_fraction: not supported");
}

}  // namespace gpumem::python::torch_hooks
