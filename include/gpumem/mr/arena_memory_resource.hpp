/**
 * @file arena_memory_resource.hpp
 * A sub-allocator of per-thread and per-stream arenas over a global arena of superblocks, for concurrency
 * and low fragmentation (Kaiyu Shi et al.'s design, as RMM's arena_memory_resource implements it; this is
 * gpumem's own implementation, documented here and in mr/detail/arena/).
 *
 * Structure:
 * - The global arena: `arena_size` bytes taken from the upstream at construction, in one allocation, and
 *   given back at destruction; nothing else is ever asked of the upstream, so the resource's footprint is
 *   fixed and known. It hands out superblocks (4 MiB; 1/16 of a smaller arena than 64 MiB, down to a power
 *   of two, so that every arena has at least 16: detail/arena/arena_policy.hpp) to local arenas and serves
 *   large requests (above a quarter superblock) itself; what comes back is coalesced.
 * - Local arenas: one per stream for every non-default stream, as in RMM; and one per thread for the
 *   default streams, both the per-thread default stream (as in RMM) and the legacy default stream, which is
 *   gpumem's own rule: RMM gives the legacy default stream one arena shared by every thread. A small
 *   request is served by best fit from the superblocks of the caller's arena under that arena's own mutex:
 *   threads on the default streams never share a lock on the fast path, which is what makes the resource
 *   scale with threads where a pool with one mutex serialises them (the two default streams synchronise
 *   with each other, so a thread's blocks may move between them at once). Only when its arena has no room
 *   does a thread take the global lock, to fetch one superblock.
 * - Memory moves back to the global arena when an arena holds too much free: a superblock that a free
 *   empties is returned while its arena would still keep one superblock of free space.
 * - Out of memory: when neither the caller's arena nor a free superblock (for a large request: the global
 *   arena's free space) can serve a request, the resource
 *   1. defragments (every arena gives its empty superblocks back, after their streams' work) and retries;
 *   2. serves a small request from the global arena's free space that is left outside superblocks;
 *   3. serves the request from the free space of any local arena that holds it: the caller's own at once,
 *      another one after the work of that arena's streams up to its latest free has completed. More
 *      threads and streams than superblocks therefore share what is free instead of failing;
 *   4. throws gpumem::out_of_memory with the arena state. That happens only when no single free range, of
 *      the global arena or of any local arena, holds the request (free space split over several ranges
 *      cannot serve one block).
 *   Steps 1 and 3 block the calling thread on other streams' work; a block served in step 2 or 3 costs its
 *   deallocation a wait for the freeing stream (as a large block's does) unless the arena it came from is
 *   the freeing stream's own.
 *
 * Stream-ordering (beyond device_memory_resource's contract):
 * - A block freed into a per-stream arena is reused only on that stream, at once (stream order protects
 *   it). A block freed into a per-thread arena is reused only by that thread on a default stream; the
 *   legacy default stream and blocking per-thread default streams synchronise with each other.
 * - A block freed on a stream other than the one whose arena owns it (another stream, or another thread's
 *   default stream) goes back to its owner's arena only after the freeing stream's work has completed:
 *   deallocate synchronises the freeing stream (host-blocking, as RMM does).
 * - Before a superblock leaves a local arena for the global arena, the work of the arena's stream(s) up to
 *   the latest free is waited for: a per-stream arena records an event on its stream at every free and
 *   synchronises that event; a per-thread arena records its event on the freeing default stream or, from
 *   another thread (defragment), on the legacy default stream, which orders after every blocking stream's
 *   earlier work. Never a device-wide synchronisation.
 * - A block of the global arena's own (a large one, or one served in step 2 above) is freed to the global
 *   arena after deallocate synchronises its stream.
 * - A block served from another arena's free space (step 3 above) is handed out only after that arena's
 *   fence has completed (the wait that precedes a superblock's return), and goes back to that arena when
 *   freed, after deallocate synchronises the freeing stream as for any block freed into another arena.
 * - The resource uses a stream handle only during the call that passes it: the waits above use events
 *   recorded during the frees, or the legacy default stream, never a stream remembered from an earlier call.
 *
 * Known limits: the resource serves the device that was current at construction; use it with that device
 * current (as RMM's). Local arenas live as long as the resource (a thread that exits leaves its arena,
 * whose empty superblocks go back on the next defragment; a new thread with the same std::thread::id takes
 * it over). A stream arena is keyed by its handle: a stream destroyed and another created at the same
 * handle share the arena, as in RMM.
 */
#pragma once

#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/export.hpp>
#include <gpumem/mr/device_memory_resource.hpp>

#include <cstddef>
#include <memory>
#include <optional>
#include <string>

namespace gpumem::mr {

/**
 * @brief Per-thread and per-stream arenas over a global arena of superblocks (see the file comment).
 * Thread-safety: all members may be called concurrently. Small requests on the default streams contend
 * only for the calling thread's arena; requests on one non-default stream share that stream's arena.
 * Stream-ordering: see the file comment.
 * Equality: an arena resource equals only itself.
 */
class GPUMEM_EXPORT arena_memory_resource final : public device_memory_resource {
 public:
  /**
   * @brief Takes the whole arena from `upstream` now, in one allocation on the default stream, and serves
   * every later request from it.
   * @param upstream            where the arena comes from; must outlive this resource.
   * @param arena_size          bytes (rounded down to 256); default: half the free memory of the current
   *                            device, as the backend's mem_info reports it. Tests pass an explicit size
   *                            (and must: half of a real GPU is far too much for a test).
   * @param dump_log_on_failure when an allocation fails, also write the full arena state (every arena and
   *                            its superblocks) to stderr before throwing.
   * @throws gpumem::logic_error if `upstream` is null, or the arena is smaller than 1 MiB (naming its size).
   * @throws gpumem::out_of_memory if the upstream cannot provide the arena (the message names the arena
   *         size and the upstream's own error).
   * @post global_free_bytes() == arena_size(), arena_count() == 0.
   */
  explicit arena_memory_resource(device_memory_resource* upstream, std::optional<std::size_t> arena_size = std::nullopt,
                                 bool dump_log_on_failure = false);
  /** @brief Gives the arena back to the upstream (on the default stream). Every allocation must be freed. */
  ~arena_memory_resource() override;
  arena_memory_resource(arena_memory_resource const&) = delete;
  arena_memory_resource(arena_memory_resource&&) = delete;
  arena_memory_resource& operator=(arena_memory_resource const&) = delete;
  arena_memory_resource& operator=(arena_memory_resource&&) = delete;

  /** @return the upstream resource the arena came from. */
  [[nodiscard]] device_memory_resource* upstream_resource() const noexcept;
  /** @return bytes of the global arena (taken from the upstream at construction). */
  [[nodiscard]] std::size_t arena_size() const noexcept;
  /** @return bytes per superblock. */
  [[nodiscard]] std::size_t superblock_size() const noexcept;
  /** @return requests of more bytes than this (rounded up to 256) are served by the global arena. */
  [[nodiscard]] std::size_t large_allocation_threshold() const noexcept;

  // ---- state queries (each a consistent snapshot; for tests and diagnostics) --------------------------

  /** @return free bytes in the global arena (free space inside local arenas is not counted). */
  [[nodiscard]] std::size_t global_free_bytes() const noexcept;
  /** @return the largest free range of the global arena. */
  [[nodiscard]] std::size_t global_largest_free_range() const noexcept;
  /** @return the number of free ranges of the global arena (1 when all memory is back and coalesced). */
  [[nodiscard]] std::size_t global_free_range_count() const noexcept;
  /** @return the number of local arenas (per-thread plus per-stream). */
  [[nodiscard]] std::size_t arena_count() const noexcept;
  /**
   * @return deallocations that were ignored because they were invalid: an address this resource did not
   * hand out, a block freed twice, or a size that does not match (each is also reported on stderr, as
   * deallocate cannot throw).
   */
  [[nodiscard]] std::size_t invalid_deallocations() const noexcept;
  /** @return a multi-line description of the global arena and every local arena. */
  [[nodiscard]] std::string dump_state() const;

  /**
   * @brief Returns every local arena's empty superblocks to the global arena, each arena after its
   * stream's work up to its latest free has completed (see the file comment), and coalesces them.
   * Allocation runs this by itself before it reports out of memory.
   * Stream-ordering: blocks the calling thread until that work has completed.
   * @throws gpumem::cuda_error if waiting for a stream fails (arenas already done stay done).
   */
  void defragment();

  /**
   * @brief Checks every invariant of the global and local arenas (O(superblocks + free ranges)): the
   * accounting equations, that no two ranges overlap, that each superblock belongs to exactly one arena.
   * @throws gpumem::logic_error describing the first violation.
   */
  void check_invariants() const;

 private:
  void* do_allocate(std::size_t bytes, cuda_stream_view stream) override;
  void do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept override;
  /// The upstream's answer: every block lies in a superblock of upstream memory.
  [[nodiscard]] shareable_memory do_shareable(void const* ptr, std::size_t bytes) const override
  {
    return upstream_resource()->shareable(ptr, bytes);
  }

  struct impl;
  std::unique_ptr<impl> impl_;
};

#ifdef GPUMEM_HAS_CUDA_MR
static_assert(cuda::mr::async_resource_with<arena_memory_resource, cuda::mr::device_accessible>);
#endif

}  // namespace gpumem::mr
