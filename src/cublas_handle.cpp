// cuBLAS handles (cublas_handle.hpp): the device check, then the backend, which loads libcublas.
#include <gpumem/backend/backend.hpp>
#include <gpumem/cublas_handle.hpp>
#include <gpumem/device.hpp>

namespace gpumem {

void* create_cublas_handle(cuda_device_id device)
{
  check_device_id(device);
  return detail::get_backend().cublas_create(device.value());
}

void destroy_cublas_handle(void* handle, cuda_device_id device) noexcept
{
  if (handle != nullptr) { detail::get_backend().cublas_destroy(handle, device.value()); }
}

}  // namespace gpumem
