/**
 * @file pool_memory_resource.hpp
 * A coalescing, best-fit, stream-ordered pool over an upstream resource: RMM's pool_memory_resource,
 * with an O(log n) best fit (RMM scans a list), no device synchronisation, and free chunks that go back to
 * the upstream before the pool gives up (stream_ordered_memory_resource.hpp has the algorithm).
 *
 * Cost of the fast path (a block of the same size freed by the same thread on the same stream, up to
 * 16 MiB): the thread's cache, one uncontended atomic lock, no event (measured in docs/PERFORMANCE.md).
 * Otherwise one lock, one std::map lookup for the stream, one
 * std::set::lower_bound for the best fit and one insertion for the remainder, O(log n). Blocks leaving a
 * thread cache: one lock, one coalescing insertion O(log n) each, one event record per batch.
 */
#pragma once

#include <gpumem/export.hpp>
#include <gpumem/mr/detail/coalescing_free_list.hpp>
#include <gpumem/mr/stream_ordered_memory_resource.hpp>
#include <gpumem/mr/device_memory_resource.hpp>

#include <cstddef>
#include <optional>
#include <string>

namespace gpumem::mr {

/**
 * @brief A pool of device memory obtained from an upstream resource in chunks, handed out as best-fit
 * blocks that are split on allocation and coalesced on deallocation (never across chunks).
 *
 * Growth policy: when nothing fits, the pool asks the upstream for max(request, current pool size)
 * bytes (it doubles), capped by what is left under the maximum pool size; if the upstream refuses, it
 * asks for half as much, down to the request itself; then it returns its wholly free chunks to the
 * upstream and tries once more; then it throws gpumem::out_of_memory.
 *
 * Thread-safety: all members may be called concurrently (one mutex for the shared lists, not held during
 * upstream calls; one small lock per thread cache).
 * Stream-ordering: as device_memory_resource.hpp says; blocks freed on one stream reach another stream
 * through an event wait, never a host synchronisation. The pool uses a stream only during the call that
 * passed it, except the default streams and gpumem's own streams (before_stream_destroy.hpp), so a
 * program may destroy its streams whenever it likes; blocks freed on a stream gpumem did not create skip the
 * thread caches (stream_ordered_memory_resource.hpp). Use the pool with the device that was current at its
 * construction.
 * Double frees: refused while the block is free in the pool (logged; checked_deallocate() throws when the
 * block is in the freeing thread's cache or the cache is bypassed): stream_ordered_memory_resource.hpp.
 *
 * Destruction returns every chunk to the upstream. Allocations still outstanding then are the caller's
 * bug: their memory is returned too.
 *
 * Equality: a pool equals only itself.
 */
class GPUMEM_EXPORT pool_memory_resource final
  : public detail::stream_ordered_memory_resource<detail::coalescing_free_list> {
 public:
  /**
   * @brief A pool over `upstream`.
   * @param upstream          where chunks come from; must outlive the pool.
   * @param initial_pool_size bytes to obtain at once (rounded up to 256); 0 grows on the first request.
   * @param maximum_pool_size the most the pool may hold from the upstream (at least 256); none by default.
   * @throws gpumem::logic_error if upstream is null, initial_pool_size overflows when rounded up to 256,
   *         maximum_pool_size < 256, or initial_pool_size > maximum_pool_size (each naming the option and value).
   * @throws gpumem::out_of_memory (from the upstream) if the initial pool cannot be allocated.
   */
  explicit pool_memory_resource(device_memory_resource* upstream, std::size_t initial_pool_size = 0,
                                std::optional<std::size_t> maximum_pool_size = std::nullopt);
  ~pool_memory_resource() override = default;
  pool_memory_resource(pool_memory_resource const&) = delete;
  pool_memory_resource(pool_memory_resource&&) = delete;
  pool_memory_resource& operator=(pool_memory_resource const&) = delete;
  pool_memory_resource& operator=(pool_memory_resource&&) = delete;

  /** @return the maximum pool size given at construction, if any. */
  [[nodiscard]] std::optional<std::size_t> maximum_pool_size() const noexcept { return maximum_pool_size_; }
  /** @return bytes handed out and not yet returned (RMM's name for bytes_in_use()). */
  [[nodiscard]] std::size_t used_bytes() const noexcept { return bytes_in_use(); }

 private:
  [[nodiscard]] std::size_t block_size_for(std::size_t bytes) const noexcept override;
  [[nodiscard]] std::size_t maximum_allocation_size() const noexcept override;
  [[nodiscard]] std::size_t growth_size(std::size_t block_bytes, std::size_t pool_bytes) const noexcept override;
  [[nodiscard]] std::size_t smaller_growth_size(std::size_t block_bytes,
                                                std::size_t failed_bytes) const noexcept override;
  [[nodiscard]] std::string describe_policy() const override;

  std::optional<std::size_t> const maximum_pool_size_;
};

}  // namespace gpumem::mr
