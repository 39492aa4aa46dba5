// failure_callback_resource_adaptor (failure_callback_resource_adaptor.hpp): retry on out_of_memory while the
// application's callback asks for it.

#include <gpumem/error.hpp>
#include <gpumem/mr/failure_callback_resource_adaptor.hpp>

#include <utility>

namespace gpumem::mr {

failure_callback_resource_adaptor::failure_callback_resource_adaptor(device_memory_resource* upstream,
                                                                     failure_callback_t callback, void* arg)
  : upstream_{upstream}, callback_{std::move(callback)}, arg_{arg}
{
  expects(upstream != nullptr, "upstream must not be null");
  expects(static_cast<bool>(callback_), "the failure callback must not be empty");
}

void* failure_callback_resource_adaptor::do_allocate(std::size_t bytes, cuda_stream_view stream)
{
  while (true) {
    try {
      return upstream_->allocate(bytes, stream);
    } catch (out_of_memory const&) {
      if (!callback_(bytes, arg_)) { throw; }
    }
  }
}

void failure_callback_resource_adaptor::do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept
{
  upstream_->deallocate(ptr, bytes, stream);
}

bool failure_callback_resource_adaptor::do_is_equal(device_memory_resource const& other) const noexcept
{
  auto const* const same = dynamic_cast<failure_callback_resource_adaptor const*>(&other);
  return same != nullptr && upstream_->is_equal(*same->upstream_);
}

}  // namespace gpumem::mr
