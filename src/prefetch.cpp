// prefetch (prefetch.hpp): one backend call after the contract checks.
#include <gpumem/backend/backend.hpp>
#include <gpumem/device.hpp>
#include <gpumem/error.hpp>
#include <gpumem/prefetch.hpp>

#include <string>

namespace gpumem {

void prefetch(void const* ptr, std::size_t bytes, cuda_device_id device, cuda_stream_view stream)
{
  if (bytes == 0) { return; }
  if (ptr == nullptr) { throw logic_error("prefetch: a null pointer for " + std::to_string(bytes) + " bytes"); }
  check_device_id(device);
  detail::get_backend().mem_prefetch_async(ptr, bytes, device.value(), stream.value());
}

}  // namespace gpumem
