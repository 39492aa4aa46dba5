/**
 * @file stream_ordered_memory_resource.hpp
 * The stream-ordered machinery shared by pool_memory_resource and fixed_size_memory_resource: a cache of
 * freed blocks per thread, one shared free list and one timing-disabled event per stream, blocks handed
 * between streams through event waits, growth from an upstream resource, and reclaiming before failing. It lives in mr/, not mr/detail, because it is not a
 * pure algorithm: it calls the backend (events and stream waits), never CUDA directly (DESIGN.md). The
 * algorithms it builds on (the free lists) are in mr/detail.
 *
 * How a request is served (allocate(bytes, stream)):
 *   (0) a block of exactly the block size freed on `stream` by this thread, from the thread's cache
 *       (mr/detail/block_cache.hpp): no shared lock, no event; on a miss for a fixed-size list, the steps
 *       below also move up to half a cache slot of `stream`'s own blocks into the cache;
 *   (a) best fit in `stream`'s own list: no synchronisation at all;
 *   (b) a block that fits in another stream's list: `stream` waits (stream_wait_event, no host
 *       synchronisation) on that stream's event, and takes the block; its remainder stays where it was;
 *   (c) nothing fits anywhere: every other list is merged into `stream`'s (one event wait each), so that
 *       blocks freed on different streams coalesce, and the best fit is tried again;
 *   (d) grow: if another thread is growing, wait for its chunk and look again; else the derived
 *       resource's growth policy asks the upstream for a chunk (without holding the lock),
 *       halving the request after an upstream failure, never below what the allocation needs;
 *   (e) reclaim: wholly free chunks go back to the upstream (after every list was merged into `stream`'s,
 *       so the upstream deallocation is ordered after all the work that used them), then (d) once more;
 *   (e') every thread's cache is emptied into the shared lists, then (a)-(c), (e) and (d) once more;
 *   (f) only then gpumem::out_of_memory, naming the bytes cached, the largest free block and the number of
 *       free blocks.
 * The device is never synchronised (RMM's pool did, rapidsai/rmm#850).
 *
 * Thread caches (what makes the small-size path fast and scale with threads):
 *   deallocate(ptr, bytes, stream) puts blocks of at most block_cache::largest_cached_block bytes into the
 *   calling thread's cache under (stream, block size); a later request of that size on that stream on that
 *   thread gets it back with one uncontended atomic lock and no event: stream order alone makes the reuse
 *   safe. Blocks leave a cache in batches (a full slot spills its older half; an evicted slot all of it)
 *   into their stream's shared list, with one event record per batch (the event rule below). A cache is
 *   emptied into the shared lists when its thread exits, by flush_thread_caches() and release(), before
 *   the resource fails (step e'), when an announced stream is about to be destroyed
 *   (mr::before_stream_destroy, for that stream's blocks), and at the resource's destruction. A per-thread
 *   default stream's blocks that leave a cache on another thread, or at thread exit, go to the legacy
 *   default stream's list, recorded on the legacy default stream: CUDA orders that record after the earlier
 *   work of every blocking stream.
 *   Cost: a thread hides at most block_cache::slot_count * block_cache::bytes_per_slot bytes from the
 *   others until one of those moments; pool_size() counts them, bytes_in_use() does not.
 *
 * Streams belong to the program (before_stream_destroy.hpp): a block leaves a cache at a moment chosen
 * by gpumem, when the stream it was freed on may already be destroyed, and recording on a destroyed stream
 * crashes a GPU program. So only the streams gpumem may use after the call that passed them are cached:
 * the legacy default stream, the thread's own per-thread default stream, and announced streams
 * (gpumem::cuda_stream, cuda_stream_pool, gpumem.cuda.Stream), whose destruction empties their slots
 * first. A block freed on any other stream (CuPy's, PyTorch's, cudaStreamCreate's) goes to the stream's
 * shared list at once, with the stream's event recorded during the deallocate call, as RMM does; a
 * request on such a stream is served from the shared lists.
 *
 * The event rule, and how it differs from RMM:
 *   A stream's event is recorded on that stream after every batch of deallocations, merge and growth that
 *   puts blocks in its list, under the lock. So the event's latest record follows all the work that may still use any
 *   block of the list, and another stream that waits on it may use them. RMM records at deallocation only:
 *   after it merges stream A's list into stream B's, the blocks that stay in B's list are safe for B (it
 *   waited on A) but not for a third stream C that later takes them by waiting on B's event, whose record
 *   may predate B's wait on A. Recording after the merge closes that gap (see the pool's tests).
 *   Recording at deallocation (rather than at the moment another stream takes the block) is what makes the
 *   per-thread default stream work: cudaStreamPerThread names a different stream on every thread, so only
 *   the thread that freed the block can record on its stream. Its cost is one event record per batch of
 *   blocks leaving a thread cache (RMM: one per deallocation).
 *
 * The per-thread default stream: each thread's cudaStreamPerThread has its own list and event, keyed by a
 * number that is never reused (std::thread::id values are), so a new thread never inherits a dead thread's
 * blocks without an event wait. The legacy default stream (0 or cudaStreamLegacy) has one list.
 *
 * Destroyed streams: the list and event of a stream outlive the stream, and blocks on it remain safe for
 * other streams (they wait on the event, which stays valid). An announced stream's list moves to a key of
 * its own before the stream is destroyed, so a new stream that gets the same handle starts with an empty
 * list; an empty list of a destroyed stream is erased at the next merge. Any other stream's list stays
 * under its handle (gpumem cannot know when such a stream dies), and a new stream that gets the same
 * handle uses its blocks without waiting, as with RMM's and CuPy's pools. That relies on CUDA's rule for
 * cudaStreamDestroy: the resources of a stream with work in flight are released only once that work has
 * completed, so a handle comes back only then. release() forgets every stream without cached blocks and
 * destroys its event; the destructor destroys all events.
 *
 * Double frees: a block freed twice is refused, logged at error level, and never handed out twice, when
 * it is found: at once when the second free finds it in the calling thread's cache slot (also thrown by
 * checked_deallocate(), device_memory_resource.hpp), or when the second copy reaches a shared list that
 * holds the block (a pool's coalescing lists see every overlap; the fixed-size stack only in debug builds),
 * which may be in a later call, on any thread. A block freed twice with a reuse in between cannot be told
 * from two allocations: undefined, as in RMM.
 *
 * Device: the resource belongs to the device that is current when it is constructed; allocate, deallocate
 * and release must be called with that device current (as with RMM's pools).
 *
 * CRTP or virtual? The free-list type is a template parameter, because each stream's list is stored by
 * value and its operations sit on the allocation path. The growth policy is a handful of virtual functions:
 * they run only when the resource grows or fails, next to an upstream allocation that costs microseconds,
 * and a virtual interface says exactly what a derived resource must provide (the compiler checks the
 * overrides). The one policy call on every allocation, block_size_for(), costs an indirect call.
 *
 * Invariants (check_invariants()), with n = free blocks over all lists:
 *   pool_size_ == sum of chunks_
 *   pool_size_ == bytes_in_use_ + sum over lists of blocks.total_bytes()
 *   every free block lies inside one chunk; no two free blocks overlap, in one list or across lists;
 *   a block starts a chunk iff it is a head (for lists that track heads)
 * Debug builds check them after allocate, deallocate, grow, release and flush_thread_caches
 * (mr/detail/invariant_checks.hpp says when, and what a violation does).
 */
#pragma once

#include <gpumem/backend/backend.hpp>
#include <gpumem/cuda_device_id.hpp>
#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/debug_log.hpp>
#include <gpumem/error.hpp>
#include <gpumem/export.hpp>
#include <gpumem/before_stream_destroy.hpp>
#include <gpumem/mr/detail/align.hpp>
#include <gpumem/detail/thread_annotations.hpp>
#include <gpumem/mr/detail/block_cache.hpp>
#include <gpumem/mr/detail/free_block.hpp>
#include <gpumem/mr/detail/invariant_checks.hpp>
#include <gpumem/mr/detail/thread_cache_registry.hpp>
#include <gpumem/mr/device_memory_resource.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <iterator>
#include <map>
#include <condition_variable>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gpumem::detail {

/** @brief A number for the calling thread, unique over the process's lifetime (never reused). */
[[nodiscard]] GPUMEM_EXPORT std::uint64_t this_thread_token() noexcept;
/** @brief A new number, never equal to another token (this_thread_token()'s included), never 0. */
[[nodiscard]] GPUMEM_EXPORT std::uint64_t orphan_token() noexcept;

/**
 * @brief Base of the stream-ordered sub-allocators (see the file comment for the algorithm and the rules).
 * @tparam FreeList coalescing_free_list or fixed_size_free_list (same operations: insert, insert_chunk,
 *         get_block, merge_from, remove_whole_chunks, size, largest, total_bytes, for_each, check_invariants).
 *
 * Thread-safety: every public member may be called concurrently; one mutex guards the shared state, and it
 * is not held while the upstream allocates or frees; each thread cache has its own lock (lock order:
 * thread_cache_registry.hpp, then this mutex).
 * Stream-ordering: as device_memory_resource.hpp says; memory freed on one stream reaches another only
 * through an event wait (never a host synchronisation).
 */
template <class FreeList>
class stream_ordered_memory_resource : public mr::device_memory_resource,
                                       private thread_cache_owner,
                                       private stream_destroy_listener {
 public:
  /**
   * @brief Returns every chunk to the upstream and destroys the events. The upstream deallocations are
   * ordered, on the legacy default stream, after the work of every stream that freed blocks here.
   * Allocations still outstanding are the caller's bug: their memory goes back to the upstream too.
   */
  ~stream_ordered_memory_resource() override
  {
    remove_stream_destroy_listener(this);
    caches_.detach_all([this](block_cache& cache) { empty_cache(cache); });
    backend& be = get_backend();
    cudaStream_t const carrier = nullptr;  // the legacy default stream carries the upstream deallocations
    for (auto& [key, list] : lists_) {
      if (key != default_key) { wait_no_throw(carrier, list.event); }
    }
    for (auto const& [address, size] : chunks_) {
      upstream_->deallocate(to_pointer(address), size, cuda_stream_view{carrier});
    }
    for (auto& [key, list] : lists_) { be.event_destroy(list.event); }
  }

  stream_ordered_memory_resource(stream_ordered_memory_resource const&) = delete;
  stream_ordered_memory_resource(stream_ordered_memory_resource&&) = delete;
  stream_ordered_memory_resource& operator=(stream_ordered_memory_resource const&) = delete;
  stream_ordered_memory_resource& operator=(stream_ordered_memory_resource&&) = delete;

  /** @return the resource this one grows from. */
  [[nodiscard]] mr::device_memory_resource* upstream_resource() const noexcept { return upstream_; }

  /** @return bytes held from the upstream (the sum of the chunks). Thread-safety: a consistent snapshot. */
  [[nodiscard]] std::size_t pool_size() const noexcept { return locked([this]() GPUMEM_REQUIRES(mutex_) { return pool_size_; }); }
  /** @return bytes handed out and not yet deallocated (each allocation counted as its block's size). */
  [[nodiscard]] std::size_t bytes_in_use() const noexcept
  {
    return snapshot([this](cache_totals const& cached) GPUMEM_REQUIRES(mutex_) { return bytes_in_use_ - cached.bytes; });
  }
  /** @return bytes held but free (in the shared lists or in thread caches): pool_size() - bytes_in_use(). */
  [[nodiscard]] std::size_t bytes_cached() const noexcept
  {
    return snapshot([this](cache_totals const& cached) GPUMEM_REQUIRES(mutex_) { return pool_size_ - bytes_in_use_ + cached.bytes; });
  }
  /** @return the size of the largest free block over all streams and thread caches (0 when none). */
  [[nodiscard]] std::size_t largest_free_block() const noexcept
  {
    return snapshot([this](cache_totals const& cached) GPUMEM_REQUIRES(mutex_) { return std::max(largest_locked(), cached.largest); });
  }
  /** @return the number of free blocks over all streams and thread caches. */
  [[nodiscard]] std::size_t free_block_count() const noexcept
  {
    return snapshot([this](cache_totals const& cached) GPUMEM_REQUIRES(mutex_) { return free_block_count_locked() + cached.blocks; });
  }
  /** @return the bytes of the free blocks that sit in thread caches (included in bytes_cached()). */
  [[nodiscard]] std::size_t bytes_in_thread_caches() const noexcept
  {
    return snapshot([](cache_totals const& cached) { return cached.bytes; });
  }
  /** @return the number of chunks held from the upstream. */
  [[nodiscard]] std::size_t chunk_count() const noexcept { return locked([this]() GPUMEM_REQUIRES(mutex_) { return chunks_.size(); }); }

  /**
   * @brief Moves the blocks that every thread holds in its cache into the shared lists, where they
   * coalesce and other streams can reach them (after an event wait). allocate() does this by itself
   * before it fails, and release() before it releases; call it to see the coalesced state, or to make a
   * long-idle thread's cached blocks visible to the others.
   * Thread-safety: may run concurrently with allocation.
   */
  void flush_thread_caches() noexcept
  {
    checked_call const check{*this, invariant_sampler_, name_, "flush_thread_caches"};
    drain_thread_caches();
  }

  /**
   * @brief Returns every wholly free chunk to the upstream, and forgets the streams that have no cached
   * blocks left (destroying their events). Every thread cache is emptied into the shared lists first.
   * Stream-ordering: every list is merged into the legacy default stream's (which waits on each stream's
   * event), and the upstream deallocations are made on the legacy default stream. No host synchronisation
   * here (an upstream such as cuda_memory_resource may synchronise in its own deallocate).
   * Thread-safety: may run concurrently with allocation; chunks that become free meanwhile stay cached.
   * @throws gpumem::cuda_error if an event wait fails (nothing is released then).
   */
  void release()
  {
    checked_call const check{*this, invariant_sampler_, name_, "release"};
    drain_thread_caches();
    unique_lock lock{mutex_};
    stream_free_list& carrier = lists_.at(default_key);
    merge_all_into_locked(carrier);
    std::vector<free_block> const whole = take_whole_chunks_locked(carrier);
    std::erase_if(lists_, [this](auto const& entry) {
      if (entry.first == default_key || !entry.second.blocks.empty()) { return false; }
      get_backend().event_destroy(entry.second.event);
      return true;
    });
    lock.unlock();
    for (free_block const& chunk : whole) {
      upstream_->deallocate(to_pointer(chunk.address), chunk.size, cuda_stream_view{carrier.stream});
      detail::log(log_level::info, [&] { return std::string{name_} + " returned " + format_bytes(chunk.size); });
    }
  }

  /**
   * @brief Checks the invariants of the file comment and of every list. O(n log n).
   * @throws gpumem::logic_error naming the first violation.
   */
  void check_invariants() const
  {
    caches_.with_all_locked([this](std::vector<block_cache const*> const& caches) { check_invariants_locked(caches); });
  }

 private:
  void check_invariants_locked(std::vector<block_cache const*> const& caches) const GPUMEM_EXCLUDES(mutex_)
  {
    lock_guard lock{mutex_};
    auto violation = [this](std::string const& what) {
      throw logic_error(std::string{name_} + "::check_invariants: " + what);
    };
    std::size_t chunk_sum = 0;
    for (auto const& [address, size] : chunks_) { chunk_sum += size; }
    if (chunk_sum != pool_size_) {
      violation("the chunks hold " + std::to_string(chunk_sum) + " bytes but pool_size is " +
                std::to_string(pool_size_));
    }
    struct seen_block {
      free_block block;
      bool cached;  // in a thread cache (which keeps no head mark), not in a list
    };
    std::vector<seen_block> blocks;
    std::size_t free_sum = 0;
    for (auto const& [key, list] : lists_) {
      list.blocks.check_invariants();
      free_sum += list.blocks.total_bytes();
      list.blocks.for_each([&blocks](free_block const& b) { blocks.push_back(seen_block{b, false}); });
    }
    if (bytes_in_use_ + free_sum != pool_size_) {
      violation("bytes in use (" + std::to_string(bytes_in_use_) + ") + free bytes (" + std::to_string(free_sum) +
                ") != pool size (" + std::to_string(pool_size_) + ")");
    }
    std::size_t cached_sum = 0;
    for (block_cache const* cache : caches) {
      cache->check_invariants();
      cached_sum += cache->cached_bytes();
      cache->for_each([&blocks](std::uintptr_t, std::size_t size, std::uintptr_t address) {
        blocks.push_back(seen_block{free_block{address, size, false}, true});
      });
    }
    if (cached_sum > bytes_in_use_) {
      violation("the thread caches hold " + std::to_string(cached_sum) + " bytes, more than the " +
                std::to_string(bytes_in_use_) + " bytes counted as handed out");
    }
    std::sort(blocks.begin(), blocks.end(),
              [](seen_block const& a, seen_block const& b) { return a.block.address < b.block.address; });
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      free_block const& b = blocks[i].block;
      auto where = [&b] {  // built only for a message
        return "free block [" + format_pointer(to_pointer(b.address)) + ", +" + std::to_string(b.size) + ")";
      };
      if (i > 0 && blocks[i - 1].block.end() > b.address) { violation(where() + " overlaps another free block"); }
      auto const after = chunks_.upper_bound(b.address);
      if (after == chunks_.begin() || b.end() > std::prev(after)->first + std::prev(after)->second) {
        violation(where() + " does not lie inside one chunk");
      }
      if constexpr (FreeList::tracks_heads) {
        if (blocks[i].cached) { continue; }
        if (b.is_head != (std::prev(after)->first == b.address)) {
          violation(where() + (b.is_head ? " is marked as a head but does not start a chunk"
                                       : " starts a chunk but is not marked as a head"));
        }
      }
    }
  }

 protected:
  /** @brief The upstream's answer: every block lies in a chunk of upstream memory. */
  [[nodiscard]] mr::shareable_memory do_shareable(void const* ptr, std::size_t bytes) const override
  {
    return upstream_->shareable(ptr, bytes);
  }

  /**
   * @param upstream  where chunks come from; must outlive this resource.
   * @param prototype an empty free list, copied for every stream.
   * @param name      the derived resource's name, for messages (a string literal).
   * @throws gpumem::logic_error if upstream is null; gpumem::cuda_error if the first event cannot be made.
   */
  stream_ordered_memory_resource(mr::device_memory_resource* upstream, FreeList prototype, std::string_view name)
    : upstream_{upstream}, prototype_{std::move(prototype)}, name_{name}
  {
    if (upstream_ == nullptr) {
      throw logic_error("gpumem::mr::" + std::string{name_} + ": the upstream resource must not be null");
    }
    device_ = get_backend().current_device();
    {
      lock_guard lock{mutex_};
      (void)list_for_locked(cuda_stream_default);  // the legacy default stream's list always exists
    }
    try {
      add_stream_destroy_listener(this);
    } catch (...) {
      get_backend().event_destroy(lists_.at(default_key).event);
      throw;
    }
  }

  // ---- the policy of the derived resource ----------------------------------------------------------------

  /** @return the size of the block that serves a request of `bytes` (> 0) bytes. */
  [[nodiscard]] virtual std::size_t block_size_for(std::size_t bytes) const noexcept = 0;
  /**
   * @return the largest request the resource can ever serve; larger ones are out_of_memory at once (as in
   *         RMM: the memory for them is truly never there, and callers such as a fallback adaptor can
   *         treat every "cannot serve" alike).
   */
  [[nodiscard]] virtual std::size_t maximum_allocation_size() const noexcept = 0;
  /**
   * @return how many bytes to ask the upstream for when a block of `block_bytes` is needed and
   *         `pool_bytes` are held (or being obtained); 0 when the policy forbids growing.
   */
  [[nodiscard]] virtual std::size_t growth_size(std::size_t block_bytes, std::size_t pool_bytes) const noexcept = 0;
  /** @return the next, smaller size to ask for after the upstream refused `failed_bytes`; 0 to give up. */
  [[nodiscard]] virtual std::size_t smaller_growth_size(std::size_t block_bytes,
                                                        std::size_t failed_bytes) const noexcept = 0;
  /** @return the policy in words, for out-of-memory messages (e.g. "maximum pool size 1.00 GiB"). */
  [[nodiscard]] virtual std::string describe_policy() const = 0;

  /**
   * @brief Obtains one chunk of `bytes` from the upstream now, for the legacy default stream's list (the
   * derived constructors' initial allocation).
   * @throws whatever the upstream throws (gpumem::out_of_memory when it has not the memory).
   */
  void grow_now(std::size_t bytes)
  {
    checked_call const check{*this, invariant_sampler_, name_, "grow"};
    void* const chunk = upstream_->allocate(bytes, cuda_stream_default);
    lock_guard lock{mutex_};
    add_chunk_locked(cuda_stream_default, chunk, bytes);
  }

 private:
  /// The key of a stream's list: the legacy default stream is one key (0 and cudaStreamLegacy); the
  /// per-thread default stream is one key per thread.
  using stream_key = std::pair<std::uintptr_t, std::uint64_t>;
  static constexpr stream_key default_key{0, 0};

  struct stream_free_list {
    cudaStream_t stream;  // as given (cudaStreamPerThread stays so: it names the owning thread's stream)
    // Timing disabled. Invariant: its latest record on `stream` follows every deallocation, merge and
    // growth that put a block into `blocks`: another stream that waits on it may use any of them.
    cudaEvent_t event;
    // Usable at once by work on `stream`; by another stream only after it waits on `event`.
    FreeList blocks;
  };

  [[nodiscard]] static void* to_pointer(std::uintptr_t address) noexcept
  {
    return reinterpret_cast<void*>(address);  // NOLINT(performance-no-int-to-ptr)
  }
  [[nodiscard]] static std::uintptr_t to_address(void const* ptr) noexcept
  {
    return reinterpret_cast<std::uintptr_t>(ptr);
  }

  /// Whether `key` is a destroyed stream's list (stream_destroying).
  [[nodiscard]] static bool is_orphan(stream_key const& key) noexcept
  {
    return key.second != 0 && key.first != to_address(cudaStreamPerThread);
  }

  [[nodiscard]] static stream_key key_of(cuda_stream_view stream) noexcept
  {
    if (stream.is_default()) { return default_key; }
    if (stream.is_per_thread_default()) { return {to_address(stream.value()), this_thread_token()}; }
    return {to_address(stream.value()), 0};
  }

  template <class F>
  auto locked(F f) const noexcept
  {
    lock_guard lock{mutex_};
    return f();
  }

  // ---- allocation ---------------------------------------------------------------------------------------

  /// Checks the invariants at the end of a call, in debug builds (mr/detail/invariant_checks.hpp).
  using checked_call = invariant_check_at_exit<stream_ordered_memory_resource>;

  void* do_allocate(std::size_t bytes, cuda_stream_view stream) final
  {
    checked_call const check{*this, invariant_sampler_, name_, "allocate"};
    std::size_t const size = block_size_for(bytes);
    if (bytes <= maximum_allocation_size() && size <= block_cache::largest_cached_block) {
      if (thread_cache* const mine = caches_.local()) {  // step (0): the thread's cache, no event, no shared lock
        lock_guard cache_lock{mine->lock};
        if (!mine->detached) {
          if (auto const address = mine->cache.pop(cache_key(stream), size)) { return to_pointer(*address); }
        }
      }
    }
    refill more;
    std::uintptr_t const address = allocate_shared(bytes, size, stream, more);
    if (more.count > 0) { refill_cache(stream, size, more); }
    return to_pointer(address);
  }

  /// Step (0) alone: the calling thread's cache, whose lock is never held across a call that may block.
  void* do_try_allocate_without_blocking(std::size_t bytes, cuda_stream_view stream) final
  {
    std::size_t const size = block_size_for(bytes);
    if (bytes > maximum_allocation_size() || size > block_cache::largest_cached_block) { return nullptr; }
    thread_cache* const mine = caches_.local();
    if (mine == nullptr) { return nullptr; }
    lock_guard cache_lock{mine->lock};
    if (mine->detached) { return nullptr; }
    auto const address = mine->cache.pop(cache_key(stream), size);
    return address ? to_pointer(*address) : nullptr;
  }

  /// Into the calling thread's cache only when no block has to leave it (leaving takes the shared lock).
  bool do_try_deallocate_without_blocking(void* ptr, std::size_t bytes, cuda_stream_view stream) final
  {
    std::size_t const size = block_size_for(bytes);
    if (size > block_cache::largest_cached_block) { return false; }
    thread_cache* const mine = caches_.local();
    if (mine == nullptr) { return false; }
    lock_guard cache_lock{mine->lock};
    try {
      return !mine->detached && mine->cache.try_push(cache_key(stream), size, to_address(ptr));
    } catch (logic_error const& e) {  // a double free or a misaligned pointer: reported, nothing to do
      report_deallocation_misuse(std::string{name_} + "::deallocate: " + e.what());
      return true;
    }
  }

  /// Blocks taken from a stream's list for the calling thread's cache, beside the one handed out.
  struct refill {
    std::array<std::uintptr_t, block_cache::slot_capacity> addresses{};
    std::size_t count{};
  };

  /// Steps (a) to (f) of the file comment, under the shared lock. Fills `more` (lists of one block size).
  std::uintptr_t allocate_shared(std::size_t bytes, std::size_t size, cuda_stream_view stream, refill& more)
    GPUMEM_EXCLUDES(mutex_)
  {
    unique_lock lock{mutex_};
    if (bytes > maximum_allocation_size()) {
      fail_locked(bytes, "the request exceeds the largest allocation this resource can serve (" +
                           format_bytes(maximum_allocation_size()) + ")");
    }
    auto const done = [&](std::uintptr_t address) GPUMEM_REQUIRES(mutex_) {
      take_more_locked(stream, size, more);
      return address;
    };
    if (auto const address = take_locked(stream, size)) { return done(*address); }
    // Another thread is growing the pool: wait for its chunk and look again instead of growing too.
    // Concurrent misses that each grew by the pool's size made the pool hold many times the live bytes
    // with 16 threads on 16 streams (the random_mt/16 workload, docs/benchmarks.md).
    while (growing_bytes_ > 0) {
      lock.wait(growth_done_);
      if (auto const address = take_locked(stream, size)) { return done(*address); }
    }
    std::string upstream_failure;
    if (auto const address = grow_and_take(stream, size, upstream_failure)) { return done(*address); }
    reclaim(stream);
    if (auto const address = take_locked(stream, size)) { return done(*address); }  // freed meanwhile
    if (auto const address = grow_and_take(stream, size, upstream_failure)) { return done(*address); }
    // Step (e'): the blocks in every thread's cache go to the shared lists, then reclaim and grow again.
    lock.unlock();
    drain_thread_caches();
    lock.lock();
    if (auto const address = take_locked(stream, size)) { return done(*address); }
    reclaim(stream);
    if (auto const address = take_locked(stream, size)) { return done(*address); }
    if (auto const address = grow_and_take(stream, size, upstream_failure)) { return done(*address); }
    fail_locked(bytes, upstream_failure);
  }

  /// For lists of one block size: takes up to half a cache slot of blocks of `size` from `stream`'s own
  /// list (no event wait: they are the stream's), for the calling thread's cache.
  void take_more_locked(cuda_stream_view stream, std::size_t size, refill& more) noexcept GPUMEM_REQUIRES(mutex_)
  {
    if constexpr (FreeList::one_block_size) {
      if (size > block_cache::largest_cached_block) { return; }
      auto const own = lists_.find(key_of(stream));
      if (own == lists_.end()) { return; }
      std::size_t const wanted = block_cache::capacity_for(size) / 2;
      while (more.count < wanted) {
        auto const found = own->second.blocks.get_block(size);
        if (!found) { break; }
        more.addresses[more.count++] = found->address;
        bytes_in_use_ += size;  // counted as handed out while in a cache (see bytes_in_use())
      }
    }
  }

  /// Puts the blocks of `more` in the calling thread's cache, as cache_freed_block() would (or back in the
  /// shared lists, recording `stream`'s event during this call).
  void refill_cache(cuda_stream_view stream, std::size_t size, refill const& more) noexcept
  {
    std::span<std::uintptr_t const> blocks{more.addresses.data(), more.count};
    try {
      while (!blocks.empty() && cache_freed_block(stream, size, blocks.front())) { blocks = blocks.subspan(1); }
    } catch (logic_error const&) {  // NOLINT(bugprone-empty-catch): cannot happen, the blocks were just taken
    }
    if (!blocks.empty()) { spill(block_cache::spill_batch{cache_key(stream), size, blocks}, true); }
  }

  /// Steps (a) to (c) of the file comment. @return the address of a block of `size` bytes, or nullopt.
  std::optional<std::uintptr_t> take_locked(cuda_stream_view stream, std::size_t size) GPUMEM_REQUIRES(mutex_)
  {
    stream_free_list& own = list_for_locked(stream);
    if (auto const found = own.blocks.get_block(size)) { return split_locked(own, *found, size); }
    for (auto& [key, other] : lists_) {
      if (&other == &own || other.blocks.largest() < size) { continue; }
      get_backend().stream_wait_event(stream, other.event);
      auto const found = other.blocks.get_block(size);  // not null: largest() >= size
      if (found) { return split_locked(other, *found, size); }  // the remainder stays under other's event
    }
    if (merge_all_into_locked(own)) {
      if (auto const found = own.blocks.get_block(size)) { return split_locked(own, *found, size); }
    }
    return std::nullopt;
  }

  /// Hands out the first `size` bytes of `found` (taken from `list`); the rest goes back to `list`.
  std::uintptr_t split_locked(stream_free_list& list, free_block found, std::size_t size) GPUMEM_REQUIRES(mutex_)
  {
    if (found.size > size) {
      try {
        list.blocks.insert(free_block{found.address + size, found.size - size, false});
      } catch (...) {  // std::bad_alloc from the host heap: give the block back whole
        try {
          list.blocks.insert(found);
        } catch (...) {
          bytes_in_use_ += found.size;  // lost until the resource is destroyed; the books stay balanced
        }
        throw;
      }
    }
    bytes_in_use_ += size;
    return found.address;
  }

  /// Merges every other non-empty list into `target`, which waits on each one's event, then records
  /// `target`'s event (see the event rule). @return whether anything was merged.
  bool merge_all_into_locked(stream_free_list& target) GPUMEM_REQUIRES(mutex_)
  {
    bool merged = false;
    try {
      for (auto& [key, other] : lists_) {
        if (&other == &target || other.blocks.empty()) { continue; }
        get_backend().stream_wait_event(target.stream, other.event);
        target.blocks.merge_from(std::move(other.blocks));
        merged = true;
      }
    } catch (...) {
      if (merged) { record_locked(target); }
      throw;
    }
    if (merged) {
      record_locked(target);
      forget_empty_orphans_locked();
    }
    return merged;
  }

  /// Erases the lists of destroyed streams that are empty: no stream can put blocks in them again.
  void forget_empty_orphans_locked() noexcept GPUMEM_REQUIRES(mutex_)
  {
    std::erase_if(lists_, [](auto const& entry) {
      if (!is_orphan(entry.first) || !entry.second.blocks.empty()) { return false; }
      get_backend().event_destroy(entry.second.event);
      return true;
    });
  }

  /// Step (d). Called with the lock held; releases it around the upstream call.
  std::optional<std::uintptr_t> grow_and_take(cuda_stream_view stream, std::size_t size,
                                              std::string& upstream_failure) GPUMEM_REQUIRES(mutex_)
  {
    std::size_t attempt = growth_size(size, pool_size_ + growing_bytes_);
    if (attempt == 0) {
      upstream_failure = "growing the pool would exceed its limit (" + describe_policy() + ")";
    }
    while (attempt != 0) {
      growing_bytes_ += attempt;  // counted against the limit while the upstream works
      void* chunk = nullptr;
      try {
        unlock_guard unlocked{mutex_};
        chunk = upstream_->allocate(attempt, stream);
      } catch (std::bad_alloc const& e) {
        upstream_failure = "the upstream could not allocate " + format_bytes(attempt) + ": " + e.what();
      } catch (...) {
        growing_bytes_ -= attempt;
        growth_done_.notify_all();
        throw;
      }
      growing_bytes_ -= attempt;
      growth_done_.notify_all();  // waiters look again (and grow themselves if this attempt failed)
      if (chunk != nullptr) {
        try {
          add_chunk_locked(stream, chunk, attempt);
          detail::log(log_level::info, [&, grown_to = pool_size_] {
            return std::string{name_} + " grew by " + format_bytes(attempt) + " to " + format_bytes(grown_to);
          });
        } catch (...) {
          unlock_guard unlocked{mutex_};
          upstream_->deallocate(chunk, attempt, stream);
          throw;
        }
        return take_locked(stream, size);  // finds a fitting block: the new chunk is in stream's list
      }
      attempt = smaller_growth_size(size, attempt);
    }
    return std::nullopt;
  }

  /// Registers a chunk and puts it in `stream`'s list.
  void add_chunk_locked(cuda_stream_view stream, void* chunk, std::size_t bytes) GPUMEM_REQUIRES(mutex_)
  {
    stream_free_list& list = list_for_locked(stream);
    std::uintptr_t const address = to_address(chunk);
    chunks_.emplace(address, bytes);
    try {
      list.blocks.insert_chunk(address, bytes);
    } catch (...) {
      chunks_.erase(address);
      throw;
    }
    pool_size_ += bytes;
    record_locked(list);  // memory from a stream-ordered upstream is usable by other streams only after this
  }

  /// Step (e): merges every list into `stream`'s and returns the wholly free chunks to the upstream on
  /// `stream` (ordered after all the work that used them). Releases the lock around the upstream calls.
  void reclaim(cuda_stream_view stream) GPUMEM_REQUIRES(mutex_)
  {
    stream_free_list& own = list_for_locked(stream);
    merge_all_into_locked(own);
    std::vector<free_block> const whole = take_whole_chunks_locked(own);
    if (whole.empty()) { return; }
    unlock_guard unlocked{mutex_};
    for (free_block const& chunk : whole) {
      upstream_->deallocate(to_pointer(chunk.address), chunk.size, stream);
      detail::log(log_level::info, [&] { return std::string{name_} + " returned " + format_bytes(chunk.size); });
    }
  }

  /// Removes the wholly free chunks of `list` from the list and from the books.
  std::vector<free_block> take_whole_chunks_locked(stream_free_list& list) GPUMEM_REQUIRES(mutex_)
  {
    std::vector<free_block> whole = list.blocks.remove_whole_chunks(chunks_);
    for (free_block const& chunk : whole) {
      chunks_.erase(chunk.address);
      pool_size_ -= chunk.size;
    }
    return whole;
  }

  [[noreturn]] void fail_locked(std::size_t bytes, std::string const& cause) GPUMEM_REQUIRES(mutex_)
  {
    std::string details = "pool state: " + format_bytes(pool_size_) + " held from the upstream in " +
                          std::to_string(chunks_.size()) + " chunks, " + format_bytes(bytes_in_use_) +
                          " in use, " + format_bytes(pool_size_ - bytes_in_use_) + " cached in " +
                          std::to_string(free_block_count_locked()) + " free blocks, largest free block " +
                          format_bytes(largest_locked()) + "; " + describe_policy();
    if (!cause.empty()) { details += "; " + cause; }
    detail::log(log_level::warn,
                [&] { return std::string{name_} + " failed to allocate " + format_bytes(bytes) + ": " + details; });
    throw_out_of_memory(name_, bytes, device_, details);
  }

  // ---- deallocation -------------------------------------------------------------------------------------

  void do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept final
  {
    checked_call const check{*this, invariant_sampler_, name_, "deallocate"};
    std::size_t const size = block_size_for(bytes);
    std::uintptr_t const address = to_address(ptr);
    if (address % allocation_alignment != 0) {
      report_deallocation_misuse(std::string{name_} + "::deallocate: " + format_pointer(ptr) + " is not " +
                                 std::to_string(allocation_alignment) + "-byte aligned: it did not come from this resource");
      return;
    }
    if (deallocation_is_checked()) {  // checked_deallocate: also look where the fast path does not
      std::string const misuse = locked([&]() GPUMEM_REQUIRES(mutex_) { return misuse_of_locked(address, size); });
      if (!misuse.empty()) {
        report_deallocation_misuse(std::string{name_} + "::deallocate(" + format_pointer(ptr) + ", " +
                                   std::to_string(bytes) + "): " + misuse);
        return;
      }
    }
    try {
      if (size <= block_cache::largest_cached_block && cache_freed_block(stream, size, address)) { return; }
    } catch (logic_error const& e) {  // a double free of a block in this thread's cache (cache unchanged)
      report_deallocation_misuse(std::string{name_} + "::deallocate: " + e.what());
      return;
    }
    // Not cached: into the stream's shared list now, with the stream's event recorded during this call.
    spill(block_cache::spill_batch{cache_key(stream), size, std::span<std::uintptr_t const>{&address, 1}}, true);
  }

  /// Why a block of `size` bytes at `address` cannot be one this resource handed out (empty when it can
  /// be): it does not lie inside a chunk, or it overlaps a free block of a shared list. O(log c) plus each
  /// list's overlaps() (O(log n) for a pool, O(n) for a fixed-size list); for checked_deallocate only.
  [[nodiscard]] std::string misuse_of_locked(std::uintptr_t address, std::size_t size) const GPUMEM_REQUIRES(mutex_)
  {
    if (!inside_a_chunk_locked(address, size)) { return "the block does not lie inside memory of this resource"; }
    for (auto const& [key, list] : lists_) {
      if (list.blocks.overlaps(address, size)) { return "the block is already free (a double free)"; }
    }
    return {};
  }

  [[nodiscard]] bool inside_a_chunk_locked(std::uintptr_t address, std::size_t size) const noexcept GPUMEM_REQUIRES(mutex_)
  {
    auto const after = chunks_.upper_bound(address);
    if (after == chunks_.begin()) { return false; }
    auto const chunk = std::prev(after);
    return address - chunk->first <= chunk->second && size <= chunk->second - (address - chunk->first);
  }

  /**
   * @brief Puts a freed block in the calling thread's cache, if the thread has one and gpumem may use
   * `stream` after this call (before_stream_destroy.hpp): the block may leave the cache later, from any
   * thread, and that records the stream's event then. A stream with a slot in the cache qualifies (slots
   * are made only for such streams, and a destroyed stream's slots are emptied first).
   * @return false when the block was not cached.
   * @throws gpumem::logic_error if the block is already in its slot (a double free); the cache is unchanged.
   */
  bool cache_freed_block(cuda_stream_view stream, std::size_t size, std::uintptr_t address)
  {
    thread_cache* const mine = caches_.local();
    if (mine == nullptr) { return false; }
    lock_guard cache_lock{mine->lock};
    if (mine->detached) { return false; }
    std::uintptr_t const key = cache_key(stream);
    auto const spill_here = [this](block_cache::spill_batch const& batch) noexcept { spill(batch, true); };
    if (mine->cache.push_to_slot(key, size, address, spill_here)) { return true; }
    if (!mine->cache.has_stream(key) && !stream_outlives_calls(stream)) { return false; }
    mine->cache.push(key, size, address, spill_here);
    return true;
  }

  // ---- thread caches ------------------------------------------------------------------------------------

  /// The cache's name for a stream: its handle, with both names of the legacy default stream as 0.
  [[nodiscard]] static std::uintptr_t cache_key(cuda_stream_view stream) noexcept
  {
    return stream.is_default() ? 0 : to_address(stream.value());
  }

  /**
   * @brief Moves a batch of blocks (of one stream and size, counted as in use) into the stream's shared
   * list, and records the list's event once (the event rule).
   * @param own_thread whether cudaStreamPerThread in the batch names the calling thread's stream. When it
   *        does not (another thread's cache, or an exiting thread whose stream may be gone), the blocks go
   *        to the legacy default stream's list, whose event, recorded now on the legacy default stream, follows
   *        all earlier work of every blocking stream, per-thread default streams included (CUDA's implicit
   *        synchronisation).
   */
  void spill(block_cache::spill_batch const& batch, bool own_thread) noexcept
  {
    auto const handle = static_cast<cudaStream_t>(to_pointer(batch.stream));
    cuda_stream_view const stream =
      (handle == cudaStreamPerThread && !own_thread) ? cuda_stream_view{} : cuda_stream_view{handle};
    lock_guard lock{mutex_};
    stream_free_list* list = nullptr;
    try {
      list = &list_for_locked(stream);
    } catch (...) {
      // A stream seen for the first time, and its event could not be made: wait for its work, after
      // which the blocks are safe for any stream, and keep them on the legacy default stream's list.
      synchronize_no_throw(stream.value());
      list = &lists_.at(default_key);
    }
    for (std::uintptr_t const address : batch.addresses) {
      if (!inside_a_chunk_locked(address, batch.block_size)) {  // a foreign pointer: never hand it out
        report_deallocation_misuse(std::string{name_} + "::deallocate: " +
                                   format_pointer(to_pointer(address)) + " (" + std::to_string(batch.block_size) +
                                   " bytes) does not lie inside memory of this resource; ignored");
        continue;
      }
      try {
        list->blocks.insert(free_block{address, batch.block_size, chunks_.contains(address)});
        bytes_in_use_ -= batch.block_size;
      } catch (logic_error const& e) {
        // A block that overlaps a free block: a double free (or a foreign pointer). Not inserting it keeps
        // the books balanced and the memory handed out once.
        report_deallocation_misuse(std::string{name_} + "::deallocate: " + e.what());
      } catch (std::bad_alloc const&) {  // NOLINT(bugprone-empty-catch): the block stays counted as in use,
      }                                  // lost until the resource is destroyed; the books stay balanced
    }
    record_locked(*list);
  }

  /// Empties `cache` into the shared lists, from a thread that may not own it and may have another device
  /// current (an exiting thread): the events are recorded with the resource's device current.
  void empty_cache(block_cache& cache) noexcept
  {
    std::optional<cuda_set_device_raii> own_device;
    try {
      own_device.emplace(cuda_device_id{device_});
    } catch (...) {  // NOLINT(bugprone-empty-catch): a failed record falls back to a stream synchronisation
    }
    cache.spill_all(std::nullopt, [this](block_cache::spill_batch const& batch) noexcept { spill(batch, false); });
  }

  /// Empties every thread's cache into the shared lists. Called without the shared lock.
  void drain_thread_caches() noexcept
  {
    caches_.for_each([this](block_cache& cache) { empty_cache(cache); });
  }

  void thread_exiting(block_cache& cache) noexcept override { empty_cache(cache); }

  /// `stream` (announced, still valid) is about to be destroyed: its cached blocks go to its shared list,
  /// and the list moves to a key of its own, so that a new stream that gets the same handle does not use
  /// the blocks without waiting on their event.
  void stream_destroying(cudaStream_t stream) noexcept override
  {
    caches_.for_each([this, stream](block_cache& cache) {
      cache.spill_all(to_address(stream),
                      [this](block_cache::spill_batch const& batch) noexcept { spill(batch, false); });
    });
    lock_guard lock{mutex_};
    auto const found = lists_.find(key_of(cuda_stream_view{stream}));
    if (found == lists_.end()) { return; }
    if (found->second.blocks.empty()) {
      get_backend().event_destroy(found->second.event);
    } else {
      try {
        lists_.emplace(stream_key{to_address(stream), orphan_token()}, std::move(found->second));
      } catch (...) {  // std::bad_alloc: wait for the stream instead, after which no wait is needed
        synchronize_no_throw(stream);
        return;
      }
    }
    lists_.erase(found);
  }

  struct cache_totals {
    std::size_t bytes{};
    std::size_t blocks{};
    std::size_t largest{};
  };

  /// Calls f(cache_totals const&) with every thread cache locked and the shared lock held: a consistent view.
  template <class F>
  auto snapshot(F f) const noexcept
  {
    using result = decltype(f(cache_totals{}));
    result value{};
    try {
      caches_.with_all_locked([&](std::vector<block_cache const*> const& caches) {
        cache_totals totals;
        for (block_cache const* cache : caches) {
          totals.bytes += cache->cached_bytes();
          totals.blocks += cache->cached_blocks();
          totals.largest = std::max(totals.largest, cache->largest());
        }
        lock_guard lock{mutex_};
        value = f(totals);
      });
    } catch (...) {  // std::bad_alloc listing the caches: the shared lists alone
      lock_guard lock{mutex_};
      value = f(cache_totals{});
    }
    return value;
  }

  // ---- streams and events -------------------------------------------------------------------------------

  /// The list of `stream`, made (with its event) on first use.
  /// @throws gpumem::cuda_error if the event cannot be made; std::bad_alloc.
  stream_free_list& list_for_locked(cuda_stream_view stream) GPUMEM_REQUIRES(mutex_)
  {
    stream_key const key = key_of(stream);
    auto const found = lists_.find(key);
    if (found != lists_.end()) { return found->second; }
    cudaStream_t const handle = stream.is_default() ? nullptr : stream.value();
    cudaEvent_t const event = get_backend().event_create(cudaEventDisableTiming);
    try {
      return lists_.emplace(key, stream_free_list{handle, event, prototype_}).first->second;
    } catch (...) {
      get_backend().event_destroy(event);
      throw;
    }
  }

  /// Records `list`'s event on its stream. If the backend fails, waits for the stream instead, so that
  /// the event rule still holds for every block of the list (an earlier record then covers them).
  static void record_locked(stream_free_list& list) noexcept
  {
    try {
      get_backend().event_record(list.event, list.stream);
    } catch (...) {
      synchronize_no_throw(list.stream);
    }
  }

  static void synchronize_no_throw(cudaStream_t stream) noexcept
  {
    try {
      get_backend().stream_synchronize(stream);
    } catch (...) {  // NOLINT(bugprone-empty-catch): the stream is gone; its work completes on its own
    }
  }

  /// `stream` waits on `event`; if the backend cannot enqueue the wait, the host waits for the event.
  static void wait_no_throw(cudaStream_t stream, cudaEvent_t event) noexcept
  {
    try {
      get_backend().stream_wait_event(stream, event);
    } catch (...) {
      try {
        get_backend().event_synchronize(event);
      } catch (...) {  // NOLINT(bugprone-empty-catch): nothing more can be done in a destructor
      }
    }
  }

  [[nodiscard]] std::size_t largest_locked() const noexcept GPUMEM_REQUIRES(mutex_)
  {
    std::size_t largest = 0;
    for (auto const& [key, list] : lists_) { largest = std::max(largest, list.blocks.largest()); }
    return largest;
  }

  [[nodiscard]] std::size_t free_block_count_locked() const noexcept GPUMEM_REQUIRES(mutex_)
  {
    std::size_t count = 0;
    for (auto const& [key, list] : lists_) { count += list.blocks.size(); }
    return count;
  }

  mr::device_memory_resource* const upstream_;
  FreeList const prototype_;  // an empty list, copied for each new stream
  std::string_view const name_;
  int device_{};  // the device current at construction

  mutable mutex mutex_;
  std::map<stream_key, stream_free_list> lists_ GPUMEM_GUARDED_BY(mutex_);  // default_key always present
  chunk_map chunks_ GPUMEM_GUARDED_BY(mutex_);                              // upstream chunks, address -> size
  std::size_t pool_size_ GPUMEM_GUARDED_BY(mutex_){};      // == sum of chunks_
  std::size_t bytes_in_use_ GPUMEM_GUARDED_BY(mutex_){};   // pool_size_ - sum of free lists
  std::size_t growing_bytes_ GPUMEM_GUARDED_BY(mutex_){};  // asked of the upstream right now
  std::condition_variable growth_done_;                    // notified (under mutex_) when a growth attempt ends
  mutable thread_cache_registry caches_{this};     // each thread's cache of freed blocks
  invariant_sampler invariant_sampler_;            // which calls check_invariants() after them (debug builds)
};

}  // namespace gpumem::detail
