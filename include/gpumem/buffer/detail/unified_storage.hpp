/**
 * @file unified_storage.hpp
 * The untyped core of unified_buffer<T>: a host copy and a device copy of `bytes` bytes, the state saying
 * which is current, and the copies between them. unified_buffer<T> is a typed face over it; the spill
 * manager and the buffer pool work on it directly. See unified_buffer.hpp for the contract; this file
 * documents only what the typed face does not show.
 */
#pragma once

#include <gpumem/buffer/buffer_state.hpp>
#include <gpumem/buffer/unified_options.hpp>
#include <gpumem/cuda_device_id.hpp>
#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/event.hpp>
#include <gpumem/export.hpp>

#include <atomic>
#include <cstddef>
#include <mutex>

namespace gpumem {
class spill_manager;
}

namespace gpumem::detail {

/**
 * @brief A host copy and a device copy of the same bytes.
 *
 * Invariants (under mutex_):
 *   host_allocated_: host_ holds capacity_ bytes (nullptr when capacity_ == 0);  device_ likewise
 *   state_ == UNINITIALIZED, or the copies the state names as current are allocated
 *   DEVICE_ONLY/HOST_ONLY: the other copy holds no data (it may be allocated, then it is stale)
 *   HOST_DIRTY/DEVICE_DIRTY: the other copy is stale or not allocated at all
 *   host_copy_pending_: host_event_ marks the end of an asynchronous copy that reads or writes host_;
 *     the host may touch host_ only after it has completed
 *   in spill_'s LRU list  iff  spill_ != nullptr && device_allocated_ && capacity_ > 0
 *   known to spill_ (for detaching at its destruction)  iff  spill_ != nullptr
 *
 * Thread-safety: every member locks mutex_, so calls from several threads are serialised; the spill
 * manager spills under the same mutex (taken with try_lock, so it never waits for a buffer in use).
 */
class GPUMEM_EXPORT unified_storage {
 public:
  /**
   * @throws gpumem::logic_error if both options.device_resource and options.spill are set.
   * @throws gpumem::cuda_error if the current device cannot be queried.
   */
  unified_storage(std::size_t bytes, unified_options const& options);
  /**
   * @brief Frees both copies without waiting: the device copy on the buffer's stream, a pinned host copy
   * with pinned_memory_pool::deallocate_async on that stream (so a copy in flight keeps it until done); a
   * pageable host copy has no copy in flight by then (staged copies return when done with it).
   */
  ~unified_storage();
  unified_storage(unified_storage const&) = delete;
  unified_storage& operator=(unified_storage const&) = delete;
  unified_storage(unified_storage&&) = delete;
  unified_storage& operator=(unified_storage&&) = delete;

  [[nodiscard]] std::size_t bytes() const noexcept { return bytes_; }
  [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }
  [[nodiscard]] buffer_state state() const;
  [[nodiscard]] bool pinned() const noexcept { return options_.pinned; }
  [[nodiscard]] unified_options const& options() const noexcept { return options_; }
  [[nodiscard]] cuda_stream_view stream() const;
  /** @brief The device the buffer was made on (its device copy lives there). */
  [[nodiscard]] cuda_device_id device_id() const noexcept { return device_id_; }

  /** @brief The host copy, current and with no copy in flight; `write` marks it dirty. */
  [[nodiscard]] void* host(bool write);
  /** @brief The device copy, current for work on `stream` (ordered after the buffer's earlier work). */
  [[nodiscard]] void* device(cuda_stream_view stream);

  void sync_to_device(cuda_stream_view stream);
  void sync_to_host(cuda_stream_view stream);
  /** @brief HOST_DIRTY: sync_to_device; DEVICE_DIRTY: sync_to_host; no-op otherwise. */
  void synchronize(cuda_stream_view stream);
  /** @brief Allocates the copies asked for (see unified_buffer::allocate). */
  void allocate(bool host, bool device, cuda_stream_view stream);
  /** @brief Frees both copies (see unified_buffer::free). */
  void free();
  void mark_host_dirty();
  void mark_device_dirty();

  void copy_from(void const* source, std::size_t bytes, cuda_stream_view stream);
  void copy_to(void* destination, std::size_t bytes, cuda_stream_view stream);
  /** @brief Fills the device copy with `pattern` repeated (pattern_bytes divides bytes()). */
  void fill(void const* pattern, std::size_t pattern_bytes, cuda_stream_view stream);

  /** @brief While > 0, the spill manager leaves the device copy alone. */
  void add_residency_hold() noexcept { holds_.fetch_add(1, std::memory_order_relaxed); }
  void drop_residency_hold() noexcept { holds_.fetch_sub(1, std::memory_order_relaxed); }
  [[nodiscard]] bool has_residency_hold() const noexcept { return holds_.load(std::memory_order_relaxed) > 0; }

  /**
   * @brief For buffer pools: makes the storage hold `bytes` (<= capacity()) bytes of no data, keeping the
   * memory it has. @post state() == UNINITIALIZED. @throws gpumem::logic_error if bytes > capacity().
   */
  void reset_for_reuse(std::size_t bytes);

 private:
  friend class gpumem::spill_manager;

  // All private members expect mutex_ held.
  void allocate_host();
  void allocate_device(cuda_stream_view stream);
  void touch_device() noexcept;                   // the device copy was used: newest in the LRU
  void wait_host_copy();                          // waits for host_event_ if a copy is pending
  void order_on(cuda_stream_view stream);         // later work on `stream` follows the buffer's earlier work
  void wait_for(cuda_stream_view stream);         // blocks until `stream`'s work so far has completed
  void make_device_current(cuda_stream_view stream);  // allocates, copies host->device: SYNCHRONIZED
  void make_host_current(cuda_stream_view stream);    // allocates, copies device->host: SYNCHRONIZED
  void copy_host_to_device(cuda_stream_view stream);
  void copy_device_to_host(cuda_stream_view stream);
  void free_device() noexcept;                    // on stream_; unregisters from spill_
  void free_host() noexcept;

  /**
   * @brief Gives up the device copy (copying it back first if it holds data the host copy lacks).
   * Called by the spill manager with mutex_ held (by its try_lock).
   * @return the device bytes freed; 0 if the copy could not be saved (the buffer is then unchanged).
   */
  std::size_t spill_device_copy() noexcept;

  mutable std::mutex mutex_;
  std::size_t bytes_;
  std::size_t capacity_;
  unified_options options_;
  mr::device_memory_resource* device_resource_;  // never null
  cuda_device_id device_id_;
  buffer_state state_{buffer_state::UNINITIALIZED};
  void* host_{};
  void* device_{};
  bool host_allocated_{false};
  bool device_allocated_{false};
  cuda_stream_view stream_{};  // where the device copy was last used; device frees and D->H copies go here
  event host_event_{event_flags::disable_timing};
  bool host_copy_pending_{false};
  event order_event_{event_flags::disable_timing};
  std::atomic<int> holds_{0};

  // The spill manager's LRU list, guarded by the manager's mutex.
  spill_manager* spill_{};
  unified_storage* lru_older_{};
  unified_storage* lru_newer_{};
  bool in_lru_{false};
};

}  // namespace gpumem::detail
