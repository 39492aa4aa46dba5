// Private pools of CUDA graphs (torch_hooks.hpp). Placeholder: no private pool can be made.
#include "torch_hooks.hpp"

namespace gpumem::python::torch_hooks {

gpumem_status pool_allocate(int, pool_id, std::size_t, void*, void** out) noexcept
{
  *out = nullptr;
  return fail(GPUMEM_ERROR_INVALID_VALUE, "private pools: not supported");
}

bool pool_deallocate(void*, std::size_t, void*, gpumem_status*) noexcept { return false; }

gpumem_status pool_begin(int, pool_id) noexcept
{
  return fail(GPUMEM_ERROR_INVALID_VALUE, "private pools: not supported");
}
gpumem_status pool_end(int, pool_id) noexcept { return fail(GPUMEM_ERROR_INVALID_VALUE, "private pools: not supported"); }
gpumem_status pool_release(int, pool_id) noexcept
{
  return fail(GPUMEM_ERROR_INVALID_VALUE, "private pools: not supported");
}

std::size_t release_idle_pools(int) noexcept { return 0; }

}  // namespace gpumem::python::torch_hooks
