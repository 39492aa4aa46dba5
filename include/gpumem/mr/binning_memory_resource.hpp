/**
 * @file binning_memory_resource.hpp
 * Routes each request by size: to the smallest bin whose size holds it (a fixed-size resource, owned or
 * the caller's), or to the upstream (fallback) resource when it is larger than every bin. RMM's
 * binning_memory_resource, with two fixes: a bin cannot be added twice for one size (RMM silently keeps
 * the first), and bins cannot change once the resource has served a request (a new bin would claim sizes
 * whose live allocations came from elsewhere, and their deallocation would go to the wrong resource).
 */
#pragma once

#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/export.hpp>
#include <gpumem/mr/device_memory_resource.hpp>
#include <gpumem/mr/fixed_size_memory_resource.hpp>

#include <atomic>
#include <cstddef>
#include <map>
#include <memory>
#include <vector>

namespace gpumem::mr {

/**
 * @brief A device resource that serves each size from a bin (sizes up to the bin's, rounded up to 256) or,
 * above the largest bin, from its upstream.
 *
 * Owned bins are fixed_size_memory_resource objects over the upstream, made by add_bin(size); they fill on
 * first use (RMM preallocates 128 blocks in every bin). A bin may also be any resource the caller owns.
 * Deallocation goes where the allocation came from, by size: the same rule, on the same bins.
 *
 * Thread-safety: allocate and deallocate may be called concurrently. add_bin and add_power_of_two_bins
 * configure the resource and must not run concurrently with anything else; they are refused once the
 * resource has served a request.
 * Stream-ordering: as device_memory_resource.hpp says; each bin and the upstream keep their own.
 * Equality: a binning resource equals only itself.
 */
class GPUMEM_EXPORT binning_memory_resource final : public device_memory_resource {
 public:
  /**
   * @brief No bins yet: every request goes to `upstream` until bins are added.
   * @throws gpumem::logic_error if upstream is null.
   */
  explicit binning_memory_resource(device_memory_resource* upstream);

  /**
   * @brief Owned bins of 2^min_size_exponent .. 2^max_size_exponent bytes (add_power_of_two_bins).
   * @throws gpumem::logic_error if upstream is null or the exponents are out of range (see add_power_of_two_bins).
   */
  binning_memory_resource(device_memory_resource* upstream, int min_size_exponent, int max_size_exponent);

  ~binning_memory_resource() override = default;
  binning_memory_resource(binning_memory_resource const&) = delete;
  binning_memory_resource(binning_memory_resource&&) = delete;
  binning_memory_resource& operator=(binning_memory_resource const&) = delete;
  binning_memory_resource& operator=(binning_memory_resource&&) = delete;

  /** @brief The largest exponent add_power_of_two_bins accepts (bins of 2^40 bytes = 1 TiB). */
  static constexpr int largest_size_exponent = 40;

  /**
   * @brief Adds a bin for requests of up to `allocation_size` bytes (rounded up to 256).
   * @param bin_resource serves the bin; null makes an owned fixed_size_memory_resource over the upstream
   *        (blocks of the bin's size, default batches, nothing preallocated). A caller's resource must
   *        outlive this one.
   * When a bin of that (rounded) size exists, nothing changes (as RMM documents): the existing bin keeps
   * serving, and `bin_resource` is not used.
   * @throws gpumem::logic_error if allocation_size is 0 or overflows when rounded up to 256, an owned bin's
   *         batch of blocks would overflow size_t, or the resource has already served a request (each message
   *         names the size).
   */
  void add_bin(std::size_t allocation_size, device_memory_resource* bin_resource = nullptr);

  /**
   * @brief Adds owned bins of 2^e bytes for e in [min_exponent, max_exponent] (sizes below 256 round up to
   * 256 and are added once).
   * @throws gpumem::logic_error if 0 <= min_exponent <= max_exponent <= largest_size_exponent does not hold
   *         (naming both), or as add_bin.
   */
  void add_power_of_two_bins(int min_exponent, int max_exponent);

  /** @return the resource that serves requests of `bytes` bytes: a bin, or the upstream. */
  [[nodiscard]] device_memory_resource* resource_for(std::size_t bytes) const noexcept;
  /** @return the bins' sizes, ascending. */
  [[nodiscard]] std::vector<std::size_t> bin_sizes() const;
  /** @return the upstream (fallback) resource. */
  [[nodiscard]] device_memory_resource* upstream_resource() const noexcept { return upstream_; }

 private:
  /**
   * @throws gpumem::out_of_memory naming this resource and the one that could not serve the request (the
   *         bin's or the upstream's message is kept); other exceptions of the bin or upstream pass through.
   */
  void* do_allocate(std::size_t bytes, cuda_stream_view stream) override;
  void do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept override;
  /// The answer of the resource that serves `bytes` (a bin or the upstream): export whole allocations.
  [[nodiscard]] shareable_memory do_shareable(void const* ptr, std::size_t bytes) const override
  {
    return resource_for(bytes)->shareable(ptr, bytes);
  }

  device_memory_resource* const upstream_;
  std::map<std::size_t, device_memory_resource*> bins_;  // bin size -> resource; fixed once serving_
  std::vector<std::unique_ptr<fixed_size_memory_resource>> owned_bins_;
  std::atomic<bool> serving_{false};  // set by the first allocation; add_bin is refused afterwards
};

}  // namespace gpumem::mr
