// Chooses the process's backend once (backend.hpp): GPUMEM_BACKEND if set, else cuda when a device is
// present, else host.
#include <gpumem/backend/backend.hpp>
#include <gpumem/error.hpp>

#include <cuda_runtime_api.h>

#include <cstdlib>
#include <string>
#include <string_view>

namespace gpumem {

std::string_view to_string(backend_kind kind) noexcept
{
  return kind == backend_kind::cuda ? "cuda" : "host";
}

namespace detail {

std::string describe_cuda_error(cudaError_t code)
{
  return std::string{cudaGetErrorName(code)} + " (" + std::to_string(static_cast<int>(code)) + ": " +
         cudaGetErrorString(code) + ")";
}

namespace {

/// @return the number of usable CUDA devices, and the error that explains why there are none.
std::pair<int, cudaError_t> probe_cuda_devices() noexcept
{
  int count = 0;
  cudaError_t const status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky error so later calls start clean
    return {0, status};
  }
  return {count, cudaSuccess};
}

backend& choose_backend()
{
  char const* requested = std::getenv("GPUMEM_BACKEND");
  std::string_view const choice = requested != nullptr ? std::string_view{requested} : std::string_view{};
  if (choice == "host") { return host_backend_instance(); }
  if (!choice.empty() && choice != "cuda") {
    throw logic_error("GPUMEM_BACKEND must be \"cuda\" or \"host\", not \"" + std::string{choice} + "\"");
  }
  auto const [count, status] = probe_cuda_devices();
  if (count > 0) { return cuda_backend_instance(); }
  if (choice == "cuda") {
    cudaError_t const code = status != cudaSuccess ? status : cudaErrorNoDevice;
    throw cuda_error(code, std::string{"GPUMEM_BACKEND=cuda but no CUDA device is usable: "} +
                             cudaGetErrorName(code) + ": " + cudaGetErrorString(code));
  }
  return host_backend_instance();
}

}  // namespace

backend& get_backend()
{
  static backend& chosen = choose_backend();
  return chosen;
}

}  // namespace detail

backend_kind current_backend_kind() { return detail::get_backend().kind(); }

}  // namespace gpumem
