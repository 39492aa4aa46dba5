// thread_safe_resource_adaptor (thread_safe_resource_adaptor.hpp): one mutex around every upstream call.

#include <gpumem/mr/thread_safe_resource_adaptor.hpp>

namespace gpumem::mr {

thread_safe_resource_adaptor::thread_safe_resource_adaptor(device_memory_resource* upstream)
  : resource_adaptor_base{upstream}
{
}

void* thread_safe_resource_adaptor::do_allocate(std::size_t bytes, cuda_stream_view stream)
{
  std::lock_guard const lock{mutex_};
  return upstream_resource()->allocate(bytes, stream);
}

void thread_safe_resource_adaptor::do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept
{
  std::lock_guard const lock{mutex_};
  upstream_resource()->deallocate(ptr, bytes, stream);
}

}  // namespace gpumem::mr
