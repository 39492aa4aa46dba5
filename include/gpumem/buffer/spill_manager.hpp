/**
 * @file spill_manager.hpp
 * Programs larger than the GPU: a device memory budget for unified buffers. When a device allocation
 * through the manager fails (the budget is reached, or the device itself is full), the device copies of
 * the least recently used unified buffers are given up until the allocation fits, and it is retried. A
 * SYNCHRONIZED or HOST_DIRTY copy is simply dropped; a DEVICE_ONLY or DEVICE_DIRTY one is first copied
 * back to the host copy. Either way the buffer becomes HOST_ONLY, and its next device access brings the
 * data back. Nothing is lost.
 *
 * Built from the adaptors: limiting_resource_adaptor (the budget) under failure_callback_resource_adaptor
 * (retry on out-of-memory), whose callback spills.
 *
 * Opt-in: only buffers created with unified_options::spill take part.
 */
#pragma once

#include <gpumem/detail/thread_annotations.hpp>
#include <gpumem/export.hpp>
#include <gpumem/mr/device_memory_resource.hpp>
#include <gpumem/mr/failure_callback_resource_adaptor.hpp>
#include <gpumem/mr/limiting_resource_adaptor.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <unordered_set>

namespace gpumem {

namespace detail {
class unified_storage;
}

/** @brief What a spill_manager has done so far. */
struct spill_statistics {
  std::uint64_t spills{};            ///< device copies given up
  std::uint64_t bytes_spilled{};     ///< device bytes freed by spilling
  std::uint64_t copies_back{};       ///< spills that first copied device data to the host
  std::uint64_t bytes_copied_back{};
  std::uint64_t failed_allocations{};  ///< requests that failed even after spilling everything spillable
};

/**
 * @brief A device memory budget over `upstream` that spills unified buffers' device copies, least recently
 * used first, when an allocation does not fit.
 *
 * "Used" is a device access: device(), device_view(), sync_to_device(), copy_from(), fill(), zeros().
 * A buffer is never spilled while a residency guard holds it (unified_buffer::keep_resident()), nor while
 * another thread is inside one of its members. An allocation that finds nothing else to spill waits for
 * such busy buffers, and for other threads' spills under way (up to a second in all, sleeping between
 * tries), before it fails; it never waits for guarded ones.
 *
 * Thread-safety: all members may be called concurrently, and so may the buffers' members.
 * Stream-ordering: a spilled device copy is copied back (when needed) and freed on the buffer's stream,
 * after the work submitted to that stream so far, so kernels in flight on it are safe. A device pointer
 * obtained from a buffer is valid until that buffer is spilled: hold keep_resident() guards on every buffer
 * a kernel uses while allocating others.
 * Lifetime: the manager should outlive its buffers. If buffers remain at its destruction (none of them may
 * be in use by another thread then), their device copies are copied back and freed, and they go on without
 * spilling, allocating from `upstream`.
 */
class GPUMEM_EXPORT spill_manager {
 public:
  /**
   * @param upstream where device copies come from (e.g. a pool); must outlive the manager.
   * @param budget_bytes the most device bytes the manager's buffers (and other users of resource()) may
   *        hold at once.
   * @throws gpumem::logic_error if upstream is null or budget_bytes is 0.
   */
  spill_manager(mr::device_memory_resource* upstream, std::size_t budget_bytes);
  ~spill_manager();
  spill_manager(spill_manager const&) = delete;
  spill_manager& operator=(spill_manager const&) = delete;
  spill_manager(spill_manager&&) = delete;
  spill_manager& operator=(spill_manager&&) = delete;

  /**
   * @brief The resource with the budget: buffers allocate here, and so may other code, whose allocations
   * then also spill buffers when the budget is reached. Throws gpumem::out_of_memory when spilling every
   * spillable buffer does not make the request fit.
   */
  [[nodiscard]] mr::device_memory_resource* resource() noexcept { return &retrying_; }

  [[nodiscard]] std::size_t budget() const noexcept { return limiting_.get_allocation_limit(); }
  /** @return device bytes allocated through resource() now. */
  [[nodiscard]] std::size_t used_bytes() const noexcept { return limiting_.get_allocated_bytes(); }
  /** @return the number of buffers holding a device copy (the LRU list). */
  [[nodiscard]] std::size_t resident_buffers() const;
  [[nodiscard]] spill_statistics statistics() const;

  /**
   * @brief Spills least recently used device copies until at least `bytes` have been freed or nothing
   * spillable is left. @return the bytes freed.
   */
  std::size_t spill(std::size_t bytes);

 private:
  friend class detail::unified_storage;

  // Called by unified_storage (lock order: buffer, then manager; the manager only try_locks buffers).
  void on_buffer_created(detail::unified_storage* storage);
  void on_buffer_destroyed(detail::unified_storage* storage) noexcept;
  void on_device_allocated(detail::unified_storage* storage);  // newest in LRU
  void on_device_used(detail::unified_storage* storage) noexcept;  // move to newest
  void on_device_cold(detail::unified_storage* storage) noexcept;  // move to oldest (its data are garbage)
  void on_device_freed(detail::unified_storage* storage) noexcept;  // leave the LRU
  void on_spilled(std::size_t bytes, bool copied_back);

  /// What one spill pass did: bytes freed; when it found nothing more, the buffers it skipped because another
  /// thread was inside them, and the spills other threads had under way.
  struct spill_result {
    std::size_t freed;
    std::size_t busy;
    std::size_t in_flight;
  };
  spill_result spill_some(std::size_t bytes);
  /// How long an allocation waits, in all, for buffers that other threads are using before it fails.
  static constexpr std::chrono::milliseconds busy_wait{1000};
  static bool on_out_of_memory(std::size_t bytes, void* self);
  void unlink(detail::unified_storage* storage) noexcept GPUMEM_REQUIRES(mutex_);
  void link_newest(detail::unified_storage* storage) noexcept GPUMEM_REQUIRES(mutex_);
  void link_oldest(detail::unified_storage* storage) noexcept GPUMEM_REQUIRES(mutex_);

  mr::limiting_resource_adaptor limiting_;
  mr::failure_callback_resource_adaptor retrying_;
  mutable detail::mutex mutex_;
  detail::unified_storage* oldest_ GPUMEM_GUARDED_BY(mutex_){};
  detail::unified_storage* newest_ GPUMEM_GUARDED_BY(mutex_){};
  std::size_t resident_ GPUMEM_GUARDED_BY(mutex_){};          // buffers in the LRU list
  std::size_t spills_in_flight_ GPUMEM_GUARDED_BY(mutex_){};  // victims taken out of the LRU, not yet spilled
  std::unordered_set<detail::unified_storage*> buffers_ GPUMEM_GUARDED_BY(mutex_);  // every buffer using this manager
  spill_statistics statistics_ GPUMEM_GUARDED_BY(mutex_){};
};

}  // namespace gpumem
