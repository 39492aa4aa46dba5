// cuda_async_managed_memory_resource (cuda_async_managed_memory_resource.hpp): a view of the device's default
// managed pool, which the backend provides (or refuses with the reason).
#include <gpumem/backend/backend.hpp>
#include <gpumem/device.hpp>
#include <gpumem/mr/cuda_async_managed_memory_resource.hpp>

namespace gpumem::mr {

cudaMemPool_t default_managed_memory_pool(cuda_device_id device)
{
  check_device_id(device);
  return detail::get_backend().mempool_default_managed(device.value());
}

cuda_async_managed_memory_resource::cuda_async_managed_memory_resource()
  : cuda_async_view_memory_resource{default_managed_memory_pool(get_current_cuda_device()), get_current_cuda_device()}
{
}

}  // namespace gpumem::mr
