// fail: see host_error.hpp.
#include "host_error.hpp"

#include <gpumem/error.hpp>

namespace gpumem::detail::host {

void fail(cudaError_t code, std::string const& what)
{
  throw cuda_error(code, "host backend: " + what + ": " + cudaGetErrorName(code) + " (" + cudaGetErrorString(code) +
                           ")");
}

}  // namespace gpumem::detail::host
