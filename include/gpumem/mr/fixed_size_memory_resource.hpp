/**
 * @file fixed_size_memory_resource.hpp
 * A stream-ordered resource that hands out blocks of one size, refilled from an upstream in batches: the
 * building block of binning_memory_resource, and a fast path for workloads dominated by one size.
 *
 * Cost of the fast path (blocks up to 16 MiB freed by the same thread on the same stream): the thread's
 * cache, one uncontended atomic lock, no event (measured in docs/PERFORMANCE.md). A miss takes up to half a cache slot of the stream's blocks under one lock. Blocks
 * leaving a thread cache: one lock, a vector push and a chunk lookup each, one event record per batch.
 * Unlike RMM's fixed_size_memory_resource, release() returns only batches whose every block is free (RMM
 * frees every upstream block, also those still in use), and an exhausted upstream leads to smaller batches
 * and then to reclaiming free batches before the resource fails.
 */
#pragma once

#include <gpumem/export.hpp>
#include <gpumem/mr/detail/fixed_size_free_list.hpp>
#include <gpumem/mr/stream_ordered_memory_resource.hpp>
#include <gpumem/mr/device_memory_resource.hpp>

#include <cstddef>
#include <string>

namespace gpumem::mr {

/**
 * @brief Blocks of one size (block_size(), a multiple of 256), obtained from the upstream in batches of
 * blocks_per_batch() blocks; every request of at most block_size() bytes gets one whole block.
 *
 * Requests above block_size() throw gpumem::out_of_memory naming both sizes at once, without touching the
 * upstream (as RMM's "maximum allocation size exceeded"): the resource can never serve them, and callers
 * such as the binning resource or a fallback adaptor treat every "cannot serve" alike.
 * When the upstream refuses a batch the resource asks for half as many blocks, down to one; then it
 * returns its wholly free batches to the upstream and tries once more; then it throws out_of_memory.
 *
 * Thread-safety: all members may be called concurrently (one mutex for the shared lists, not held during
 * upstream calls; one small lock per thread cache).
 * Stream-ordering: as device_memory_resource.hpp says, through the same per-stream free lists and events as
 * pool_memory_resource (stream_ordered_memory_resource.hpp, which also states the rule for
 * destroyed streams). Use the resource with the device that was current at its construction.
 * Double frees: refused while the block is in the freeing thread's cache, and in debug builds also while it
 * is in a shared list (logged; checked_deallocate() throws); otherwise undefined, as in RMM.
 *
 * Destruction returns every batch to the upstream (outstanding allocations are the caller's bug).
 * Equality: a resource equals only itself.
 */
class GPUMEM_EXPORT fixed_size_memory_resource final
  : public detail::stream_ordered_memory_resource<detail::fixed_size_free_list> {
 public:
  /** @brief RMM's default block size: 1 MiB. */
  static constexpr std::size_t default_block_size = std::size_t{1} << 20;
  /** @brief RMM's default batch: 128 blocks. */
  static constexpr std::size_t default_blocks_per_batch = 128;

  /**
   * @brief A fixed-size resource over `upstream`.
   * @param upstream         where batches come from; must outlive this resource.
   * @param block_size       bytes per block, rounded up to a multiple of 256.
   * @param blocks_per_batch blocks obtained per upstream request.
   * @param initial_batches  batches obtained at once (RMM preallocates one); 0 fills on first use.
   * @throws gpumem::logic_error if upstream is null, block_size or blocks_per_batch is 0, or a batch's size
   *         overflows (the message names the values).
   * @throws gpumem::out_of_memory (from the upstream) if the initial batches cannot be allocated.
   */
  explicit fixed_size_memory_resource(device_memory_resource* upstream, std::size_t block_size = default_block_size,
                                      std::size_t blocks_per_batch = default_blocks_per_batch,
                                      std::size_t initial_batches = 1);
  ~fixed_size_memory_resource() override = default;
  fixed_size_memory_resource(fixed_size_memory_resource const&) = delete;
  fixed_size_memory_resource(fixed_size_memory_resource&&) = delete;
  fixed_size_memory_resource& operator=(fixed_size_memory_resource const&) = delete;
  fixed_size_memory_resource& operator=(fixed_size_memory_resource&&) = delete;

  /** @return the size of every block (the requested size rounded up to 256). */
  [[nodiscard]] std::size_t block_size() const noexcept { return block_size_; }
  /** @return how many blocks one upstream request obtains. */
  [[nodiscard]] std::size_t blocks_per_batch() const noexcept { return blocks_per_batch_; }

 private:
  [[nodiscard]] std::size_t block_size_for(std::size_t bytes) const noexcept override;
  [[nodiscard]] std::size_t maximum_allocation_size() const noexcept override;
  [[nodiscard]] std::size_t growth_size(std::size_t block_bytes, std::size_t pool_bytes) const noexcept override;
  [[nodiscard]] std::size_t smaller_growth_size(std::size_t block_bytes,
                                                std::size_t failed_bytes) const noexcept override;
  [[nodiscard]] std::string describe_policy() const override;

  std::size_t const block_size_;
  std::size_t const blocks_per_batch_;
};

}  // namespace gpumem::mr
