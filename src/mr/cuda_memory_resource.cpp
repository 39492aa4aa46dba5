// cuda_memory_resource (cuda_memory_resource.hpp): cudaMalloc / cudaFree through the backend.

#include <gpumem/backend/backend.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/cuda_memory_resource.hpp>

namespace gpumem::mr {

void* cuda_memory_resource::do_allocate(std::size_t bytes, cuda_stream_view /*stream*/)
{
  detail::backend& backend = detail::get_backend();
  void* const ptr = backend.malloc_device(bytes);
  if (ptr == nullptr) { throw_out_of_memory("cuda_memory_resource", bytes, backend.current_device()); }
  return ptr;
}

void cuda_memory_resource::do_deallocate(void* ptr, std::size_t /*bytes*/, cuda_stream_view /*stream*/) noexcept
{
  detail::backend& backend = detail::get_backend();
  backend.free_device(ptr);
}

bool cuda_memory_resource::do_is_equal(device_memory_resource const& other) const noexcept
{
  return dynamic_cast<cuda_memory_resource const*>(&other) != nullptr;
}

}  // namespace gpumem::mr
