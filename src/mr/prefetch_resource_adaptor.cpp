// prefetch_resource_adaptor (prefetch_resource_adaptor.hpp): allocate, then prefetch on the same stream what
// can migrate.

#include <gpumem/backend/backend.hpp>
#include <gpumem/mr/prefetch_resource_adaptor.hpp>

namespace gpumem::mr {

prefetch_resource_adaptor::prefetch_resource_adaptor(device_memory_resource* upstream)
  : resource_adaptor_base{upstream}
{
}

void* prefetch_resource_adaptor::do_allocate(std::size_t bytes, cuda_stream_view stream)
{
  void* const ptr = upstream_resource()->allocate(bytes, stream);
  try {
    detail::backend& backend = detail::get_backend();
    int const device = backend.current_device();
    // Memory that cannot migrate (a pool over device memory) is served unprefetched, as RMM does.
    if (backend.is_migratable(ptr, device)) { backend.mem_prefetch_async(ptr, bytes, device, stream.value()); }
  } catch (...) {
    upstream_resource()->deallocate(ptr, bytes, stream);
    throw;
  }
  return ptr;
}

}  // namespace gpumem::mr
