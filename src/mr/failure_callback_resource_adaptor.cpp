// failure_callback_resource_adaptor (failure_callback_resource_adaptor.hpp): retry on out_of_memory while the
// application's callback asks for it.

#include <gpumem/error.hpp>
#include <gpumem/mr/failure_callback_resource_adaptor.hpp>

#include <utility>

namespace gpumem::mr {

failure_callback_resource_adaptor::failure_callback_resource_adaptor(device_memory_resource* upstream,
                                                                     failure_callback_t callback, void* arg)
  : resource_adaptor_base{upstream}, callback_{std::move(callback)}, arg_{arg}
{
  expects(static_cast<bool>(callback_), "the failure callback must not be empty");
}

void* failure_callback_resource_adaptor::do_allocate(std::size_t bytes, cuda_stream_view stream)
{
  while (true) {
    try {
      return upstream_resource()->allocate(bytes, stream);
    } catch (out_of_memory const&) {
      if (!callback_(bytes, arg_)) { throw; }
    }
  }
}

}  // namespace gpumem::mr
