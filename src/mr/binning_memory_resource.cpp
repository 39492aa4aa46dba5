// binning_memory_resource (binning_memory_resource.hpp): a size-ordered map from bin size to resource;
// lower_bound finds the smallest bin that holds a request.
#include <gpumem/error.hpp>
#include <gpumem/mr/binning_memory_resource.hpp>
#include <gpumem/mr/detail/align.hpp>

#include <string>

namespace gpumem::mr {

binning_memory_resource::binning_memory_resource(device_memory_resource* upstream) : upstream_{upstream}
{
  if (upstream_ == nullptr) {
    throw logic_error("gpumem::mr::binning_memory_resource: the upstream resource must not be null");
  }
}

binning_memory_resource::binning_memory_resource(device_memory_resource* upstream, int min_size_exponent,
                                                 int max_size_exponent)
  : binning_memory_resource{upstream}
{
  add_power_of_two_bins(min_size_exponent, max_size_exponent);
}

void binning_memory_resource::add_bin(std::size_t allocation_size, device_memory_resource* bin_resource)
{
  std::string const where = "gpumem::mr::binning_memory_resource::add_bin(" + std::to_string(allocation_size) + ")";
  if (serving_.load(std::memory_order_acquire)) {
    throw logic_error(where + ": bins cannot change once the resource has served a request");
  }
  auto const size = detail::checked_align_up(allocation_size, detail::allocation_alignment);
  if (allocation_size == 0 || !size) { throw logic_error(where + ": the bin size must be positive and fit size_t"); }
  if (bins_.contains(*size)) { return; }  // as RMM: the bin that exists stays, whichever resource was given
  if (bin_resource == nullptr) {
    try {
      owned_bins_.push_back(std::make_unique<fixed_size_memory_resource>(
        upstream_, *size, fixed_size_memory_resource::default_blocks_per_batch, 0));
    } catch (logic_error const& e) {  // its batch overflows: say which bin asked for it
      throw logic_error(where + ": " + e.what());
    }
    bin_resource = owned_bins_.back().get();
  }
  bins_.emplace(*size, bin_resource);
}

void binning_memory_resource::add_power_of_two_bins(int min_exponent, int max_exponent)
{
  if (min_exponent < 0 || min_exponent > max_exponent || max_exponent > binning_memory_resource::largest_size_exponent) {
    throw logic_error("gpumem::mr::binning_memory_resource: size exponents " + std::to_string(min_exponent) +
                      " .. " + std::to_string(max_exponent) + " must satisfy 0 <= min <= max <= " +
                      std::to_string(binning_memory_resource::largest_size_exponent));
  }
  for (int e = min_exponent; e <= max_exponent; ++e) {
    std::size_t const size = detail::align_up(std::size_t{1} << e, detail::allocation_alignment);
    if (!bins_.contains(size)) { add_bin(size); }  // 2^0 .. 2^8 all round to 256: one bin
  }
}

device_memory_resource* binning_memory_resource::resource_for(std::size_t bytes) const noexcept
{
  auto const bin = bins_.lower_bound(bytes);
  return bin == bins_.end() ? upstream_ : bin->second;
}

std::vector<std::size_t> binning_memory_resource::bin_sizes() const
{
  std::vector<std::size_t> sizes;
  for (auto const& [size, resource] : bins_) { sizes.push_back(size); }
  return sizes;
}

void* binning_memory_resource::do_allocate(std::size_t bytes, cuda_stream_view stream)
{
  if (!serving_.load(std::memory_order_relaxed)) { serving_.store(true, std::memory_order_release); }
  device_memory_resource* const target = resource_for(bytes);
  try {
    return target->allocate(bytes, stream);
  } catch (out_of_memory const& e) {
    auto const bin = bins_.lower_bound(bytes);
    std::string const source =
      bin == bins_.end() ? std::string{"its upstream (no bin holds the request)"}
                         : "its bin of " + std::to_string(bin->first) + " bytes";
    throw out_of_memory("binning_memory_resource could not allocate " + format_bytes(bytes) + " from " + source +
                        ": " + e.what());
  }
}

void binning_memory_resource::do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept
{
  resource_for(bytes)->deallocate(ptr, bytes, stream);
}

}  // namespace gpumem::mr
