// prefetch (prefetch.hpp): the contract checks, the backend's word on whether the memory can migrate, then
// one backend call.
#include <gpumem/backend/backend.hpp>
#include <gpumem/device.hpp>
#include <gpumem/error.hpp>
#include <gpumem/prefetch.hpp>

#include <cuda_runtime_api.h>

#include <string>

namespace gpumem {

void prefetch(void const* ptr, std::size_t bytes, cuda_device_id device, cuda_stream_view stream)
{
  if (bytes == 0) { return; }
  if (ptr == nullptr) { throw logic_error("prefetch: a null pointer for " + std::to_string(bytes) + " bytes"); }
  if (device.value() != cudaCpuDeviceId) { check_device_id(device); }
  detail::backend& backend = detail::get_backend();
  if (!backend.is_migratable(ptr, device.value())) { return; }  // RMM's no-op for memory that cannot move
  backend.mem_prefetch_async(ptr, bytes, device.value(), stream.value());
}

void mem_advise(void const* ptr, std::size_t bytes, int advice, int device)
{
  detail::get_backend().mem_advise(ptr, bytes, advice, device);
}

}  // namespace gpumem
