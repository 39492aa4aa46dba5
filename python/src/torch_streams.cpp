// Tensor.record_stream (torch_hooks.hpp). Placeholder: refused.
#include "torch_hooks.hpp"

namespace gpumem::python::torch_hooks {

gpumem_status record_stream(void*, void*) noexcept
{
  return fail(GPUMEM_ERROR_INVALID_VALUE, "record_stream: not supported");
}

bool free_after_recorded_streams(void*, void*, gpumem_status*) noexcept { return false; }

}  // namespace gpumem::python::torch_hooks
