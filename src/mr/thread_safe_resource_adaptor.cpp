// thread_safe_resource_adaptor (thread_safe_resource_adaptor.hpp): one mutex around every upstream call.

#include <gpumem/error.hpp>
#include <gpumem/mr/thread_safe_resource_adaptor.hpp>

namespace gpumem::mr {

thread_safe_resource_adaptor::thread_safe_resource_adaptor(device_memory_resource* upstream) : upstream_{upstream}
{
  expects(upstream != nullptr, "upstream must not be null");
}

void* thread_safe_resource_adaptor::do_allocate(std::size_t bytes, cuda_stream_view stream)
{
  std::lock_guard const lock{mutex_};
  return upstream_->allocate(bytes, stream);
}

void thread_safe_resource_adaptor::do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept
{
  std::lock_guard const lock{mutex_};
  upstream_->deallocate(ptr, bytes, stream);
}

bool thread_safe_resource_adaptor::do_is_equal(device_memory_resource const& other) const noexcept
{
  auto const* const same = dynamic_cast<thread_safe_resource_adaptor const*>(&other);
  return same != nullptr && upstream_->is_equal(*same->upstream_);
}

}  // namespace gpumem::mr
