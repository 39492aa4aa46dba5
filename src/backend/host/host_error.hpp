// How the host backend reports a failed call: a gpumem::cuda_error with the CUDA error code that the CUDA
// runtime would give, and a message that names the call.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

namespace gpumem::detail::host {

/// @throws cuda_error with `code` and the message "host backend: <what>: <code's name> (<code's text>)".
[[noreturn]] void fail(cudaError_t code, std::string const& what);

}  // namespace gpumem::detail::host
