// resource_adaptor_base (resource_adaptor_base.hpp): the upstream check, the forwarding and the equality
// that every adaptor shares.

#include <gpumem/error.hpp>
#include <gpumem/mr/resource_adaptor_base.hpp>

#include <typeinfo>

namespace gpumem::mr {

resource_adaptor_base::resource_adaptor_base(device_memory_resource* upstream) : upstream_{upstream}
{
  expects(upstream != nullptr, "upstream must not be null");
}

void* resource_adaptor_base::do_allocate(std::size_t bytes, cuda_stream_view stream)
{
  return upstream_->allocate(bytes, stream);
}

void resource_adaptor_base::do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept
{
  upstream_->deallocate(ptr, bytes, stream);
}

shareable_memory resource_adaptor_base::do_shareable(void const* ptr, std::size_t bytes) const
{
  return upstream_->shareable(ptr, bytes);
}

bool resource_adaptor_base::do_is_equal(device_memory_resource const& other) const noexcept
{
  // The same dynamic type: two kinds of adaptor over one upstream hand out memory differently.
  if (typeid(*this) != typeid(other)) { return false; }
  return upstream_->is_equal(*static_cast<resource_adaptor_base const&>(other).upstream_);
}

}  // namespace gpumem::mr
