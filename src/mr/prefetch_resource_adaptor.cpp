// prefetch_resource_adaptor (prefetch_resource_adaptor.hpp): allocate, then prefetch on the same stream.

#include <gpumem/backend/backend.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/prefetch_resource_adaptor.hpp>

namespace gpumem::mr {

prefetch_resource_adaptor::prefetch_resource_adaptor(device_memory_resource* upstream) : upstream_{upstream}
{
  expects(upstream != nullptr, "upstream must not be null");
}

void* prefetch_resource_adaptor::do_allocate(std::size_t bytes, cuda_stream_view stream)
{
  void* const ptr = upstream_->allocate(bytes, stream);
  try {
    detail::backend& backend = detail::get_backend();
    backend.mem_prefetch_async(ptr, bytes, backend.current_device(), stream.value());
  } catch (...) {
    upstream_->deallocate(ptr, bytes, stream);
    throw;
  }
  return ptr;
}

void prefetch_resource_adaptor::do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept
{
  upstream_->deallocate(ptr, bytes, stream);
}

bool prefetch_resource_adaptor::do_is_equal(device_memory_resource const& other) const noexcept
{
  auto const* const same = dynamic_cast<prefetch_resource_adaptor const*>(&other);
  return same != nullptr && upstream_->is_equal(*same->upstream_);
}

}  // namespace gpumem::mr
