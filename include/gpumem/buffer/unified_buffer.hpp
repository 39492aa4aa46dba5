/**
 * @file unified_buffer.hpp
 * `unified_buffer<T>`: a host copy and a device copy of the same elements that knows which copy is
 * current, copies only when needed, copies fast, and (with a spill_manager) survives a GPU that is too
 * small.
 *
 * States (buffer_state.hpp) and the transitions, exactly. They follow PyDotCompute's published table and
 * examples (a read access of a new buffer gives HOST_ONLY, a write of it HOST_DIRTY: "host access" then
 * "host modified"):
 *   UNINITIALIZED --host read access (host_view())-->           HOST_ONLY
 *   UNINITIALIZED --device access-->                            DEVICE_ONLY
 *   HOST_ONLY, HOST_DIRTY --device access (copies host->device)--> SYNCHRONIZED
 *   DEVICE_ONLY, DEVICE_DIRTY --host access (copies device->host)--> SYNCHRONIZED
 *   any state --host write access (host())-->                   HOST_DIRTY (copied from the device first
 *                                                               when the device copy is the current one)
 *   HOST_ONLY, SYNCHRONIZED --mark_host_dirty()-->              HOST_DIRTY
 *   DEVICE_ONLY, SYNCHRONIZED --mark_device_dirty()-->          DEVICE_DIRTY
 *   copy_from(), fill(), zeros() write the device copy:         DEVICE_ONLY when no host copy is allocated,
 *                                                               else DEVICE_DIRTY (the host copy is stale)
 *   HOST_DIRTY --synchronize()--> SYNCHRONIZED (as sync_to_device); DEVICE_DIRTY likewise (as sync_to_host)
 *   UNINITIALIZED --allocate(host, device)-->                   SYNCHRONIZED (both copies: the same
 *                                                               indeterminate contents), HOST_ONLY or DEVICE_ONLY
 *   any state --free()-->                                       UNINITIALIZED (both copies freed)
 *   spilling (spill_manager.hpp):                               HOST_ONLY
 * Every other access leaves the state as it is; in particular the syncs leave UNINITIALIZED alone (there is
 * nothing to copy), and allocate() keeps the state of a buffer that holds data. Read-only accessors
 * (host_view(), device_view(), copy_to(), the syncs) never dirty anything. "Device access" is device(),
 * device_view() or sync_to_device(); "host access" is host(), host_view() or sync_to_host(). A *_DIRTY
 * state says that the other copy is stale or not allocated at all.
 *
 * The buffer cannot see what a kernel does: after a kernel writes the device copy, call
 * mark_device_dirty(), or the host keeps reading its own (stale) copy and a spill may drop the writes.
 * mark_*_dirty() on a state where it makes no sense (marking a copy that does not exist or is stale) is a
 * logic_error, because one of the two writes would be lost.
 *
 * Stream-ordering:
 * - The buffer has a stream: the one given to its latest device access, sync or write. Copies are issued on
 *   the stream given to the call; when that differs from the buffer's stream, the new stream first waits
 *   (an event) for all work submitted to the old one, kernels included. Host accesses that must copy
 *   device->host copy on the buffer's stream.
 * - Pinned buffers: a sync is one asynchronous copy recorded with an event; the call returns at once, and
 *   the next host access waits for the event. Pageable buffers: syncs are staged (transfer.hpp) and return
 *   when the host side is done (device->host: the data are in the host copy).
 * - Device pointers are valid for work on the stream given to the access (and later work on it), until
 *   the buffer is destroyed or spilled. Host pointers are valid until the buffer is destroyed.
 *
 * Lifetime: the buffer's stream must outlive the buffer (its device copy is freed on it), also while a
 * unified_buffer_pool keeps the buffer for reuse.
 * Thread-safety: members may be called from several threads; each call is atomic (one mutex per buffer).
 * Errors: gpumem::logic_error for misuse (wrong sizes, impossible dirty marks, use after move),
 * gpumem::out_of_memory when a copy cannot be allocated (the state is then unchanged), gpumem::cuda_error
 * when a copy cannot be issued.
 */
#pragma once

#include <gpumem/buffer/buffer_state.hpp>
#include <gpumem/buffer/detail/unified_storage.hpp>
#include <gpumem/buffer/unified_options.hpp>
#include <gpumem/mr/detail/align.hpp>
#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/error.hpp>

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <utility>

namespace gpumem {

/**
 * @brief Keeps a unified buffer's device copy from being spilled while it lives (see spill_manager.hpp).
 * Movable; the buffer must outlive it.
 */
class residency_guard {
 public:
  explicit residency_guard(detail::unified_storage& storage) noexcept : storage_{&storage}
  {
    storage_->add_residency_hold();
  }
  ~residency_guard() { release(); }
  residency_guard(residency_guard&& other) noexcept : storage_{std::exchange(other.storage_, nullptr)} {}
  residency_guard& operator=(residency_guard&& other) noexcept
  {
    if (this != &other) {
      release();
      storage_ = std::exchange(other.storage_, nullptr);
    }
    return *this;
  }
  residency_guard(residency_guard const&) = delete;
  residency_guard& operator=(residency_guard const&) = delete;

  /** @brief Lets the buffer be spilled again (before destruction). */
  void release() noexcept
  {
    if (storage_ != nullptr) { std::exchange(storage_, nullptr)->drop_residency_hold(); }
  }

 private:
  detail::unified_storage* storage_;
};

/**
 * @brief `size()` elements of T with a host copy and a device copy (see the file comment).
 * @tparam T trivially copyable: copies are bytewise; aligned to at most the 256 bytes that both copies
 *         guarantee (a type aligned to more is refused at compile time, as device_uvector refuses it).
 * Movable (the moved-from buffer throws logic_error on any access but size() and valid()); not copyable.
 */
template <class T>
  requires std::is_trivially_copyable_v<T> && (alignof(T) <= detail::allocation_alignment)
class unified_buffer {
 public:
  using value_type = T;

  /**
   * @brief A buffer of `count` elements in state UNINITIALIZED; nothing is allocated yet.
   * @throws gpumem::logic_error if count * sizeof(T) overflows, or the options conflict.
   */
  explicit unified_buffer(std::size_t count, unified_options const& options = {})
    : storage_{std::make_unique<detail::unified_storage>(checked_bytes(count), options)}
  {
  }

  /** @brief Adopts a storage (used by unified_buffer_pool). @pre storage->bytes() % sizeof(T) == 0. */
  explicit unified_buffer(std::unique_ptr<detail::unified_storage> storage) noexcept : storage_{std::move(storage)} {}

  unified_buffer(unified_buffer&&) noexcept = default;
  unified_buffer& operator=(unified_buffer&&) noexcept = default;
  unified_buffer(unified_buffer const&) = delete;
  unified_buffer& operator=(unified_buffer const&) = delete;
  ~unified_buffer() = default;

  /** @return the number of elements; 0 after a move. */
  [[nodiscard]] std::size_t size() const noexcept { return storage_ ? storage_->bytes() / sizeof(T) : 0; }
  [[nodiscard]] std::size_t size_bytes() const noexcept { return storage_ ? storage_->bytes() : 0; }
  /** @return false after the buffer was moved from. */
  [[nodiscard]] bool valid() const noexcept { return storage_ != nullptr; }
  [[nodiscard]] buffer_state state() const { return storage().state(); }
  [[nodiscard]] bool is_pinned() const { return storage().pinned(); }
  /** @return the buffer's stream (see the file comment). */
  [[nodiscard]] cuda_stream_view stream() const { return storage().stream(); }

  /**
   * @brief The host copy for reading and writing: current (copied from the device if needed, waiting for
   * copies in flight) and marked dirty (SYNCHRONIZED -> HOST_DIRTY).
   * @throws gpumem::out_of_memory if the host copy cannot be allocated.
   */
  [[nodiscard]] std::span<T> host() { return {static_cast<T*>(storage().host(true)), size()}; }
  /** @brief The host copy for reading: as host() without dirtying anything. */
  [[nodiscard]] std::span<T const> host_view() const
  {
    return {static_cast<T const*>(storage().host(false)), size()};
  }

  /**
   * @brief The device copy for kernels on `stream`: current (copied from the host if needed). Call
   * mark_device_dirty() after a kernel writes it. @return nullptr when size() == 0. Never dereference on
   * the host.
   * @throws gpumem::out_of_memory if the device copy cannot be allocated (after spilling, with a manager).
   */
  [[nodiscard]] T* device(cuda_stream_view stream = {}) { return static_cast<T*>(storage().device(stream)); }
  /** @brief As device(), for kernels that only read. */
  [[nodiscard]] T const* device_view(cuda_stream_view stream = {}) const
  {
    return static_cast<T const*>(storage().device(stream));
  }

  /** @brief Makes the device copy current (HOST_ONLY, HOST_DIRTY -> SYNCHRONIZED); no-op otherwise. */
  void sync_to_device(cuda_stream_view stream = {}) { storage().sync_to_device(stream); }
  /** @brief Makes the host copy current (DEVICE_ONLY, DEVICE_DIRTY -> SYNCHRONIZED); no-op otherwise. */
  void sync_to_host(cuda_stream_view stream = {}) { storage().sync_to_host(stream); }
  /**
   * @brief The host copy was written through a pointer from earlier: HOST_ONLY, SYNCHRONIZED -> HOST_DIRTY.
   * @throws gpumem::logic_error when UNINITIALIZED, DEVICE_ONLY or DEVICE_DIRTY (the host copy holds no
   *         data or is stale: a device write would be lost).
   */
  void mark_host_dirty() { storage().mark_host_dirty(); }
  /**
   * @brief A kernel wrote the device copy: DEVICE_ONLY, SYNCHRONIZED -> DEVICE_DIRTY.
   * @throws gpumem::logic_error when UNINITIALIZED, HOST_ONLY or HOST_DIRTY (a host write would be lost).
   */
  void mark_device_dirty() { storage().mark_device_dirty(); }
  /**
   * @brief Makes both copies current: HOST_DIRTY as sync_to_device(), DEVICE_DIRTY as sync_to_host(); a
   * no-op in every other state.
   */
  void synchronize(cuda_stream_view stream = {}) { storage().synchronize(stream); }

  /**
   * @brief Allocates the copies asked for now rather than on first use (the device copy ordered on
   * `stream`). From UNINITIALIZED the state becomes SYNCHRONIZED (both), HOST_ONLY or DEVICE_ONLY; a buffer
   * in another state keeps its state and its data.
   * @throws gpumem::logic_error if neither copy is asked for.
   * @throws gpumem::out_of_memory if a copy cannot be allocated (the state is then unchanged).
   */
  void allocate(bool host = true, bool device = true, cuda_stream_view stream = {})
  {
    storage().allocate(host, device, stream);
  }
  /** @return whether the buffer holds data or allocated copies for it: state() != UNINITIALIZED. */
  [[nodiscard]] bool is_allocated() const { return state() != buffer_state::UNINITIALIZED; }
  /**
   * @brief Frees both copies (the device copy on the buffer's stream, after its work): UNINITIALIZED.
   * Pointers from earlier accesses dangle. The next access allocates again.
   * @throws gpumem::logic_error while a keep_resident() guard is alive.
   */
  void free() { storage().free(); }

  /**
   * @brief Copies `source` (host memory, pageable or pinned) into the device copy, ordered on `stream`.
   * Returns when `source` may be reused. @post state() is DEVICE_ONLY or DEVICE_DIRTY.
   * @throws gpumem::logic_error if source.size() != size().
   */
  void copy_from(std::span<T const> source, cuda_stream_view stream = {})
  {
    auto& core = storage();
    check_size(source.size(), "copy_from");
    core.copy_from(source.data(), source.size_bytes(), stream);
  }
  /**
   * @brief Copies the current data into `destination` (host memory). Returns when they are there.
   * @throws gpumem::logic_error if destination.size() != size() or the buffer is UNINITIALIZED.
   */
  void copy_to(std::span<T> destination, cuda_stream_view stream = {})
  {
    auto& core = storage();
    check_size(destination.size(), "copy_to");
    core.copy_to(destination.data(), destination.size_bytes(), stream);
  }
  /** @brief Sets every element of the device copy to `value` on `stream` (DEVICE_ONLY or DEVICE_DIRTY). */
  void fill(T const& value, cuda_stream_view stream = {}) { storage().fill(&value, sizeof(T), stream); }
  /** @brief Sets every byte of the device copy to zero on `stream` (one memset). */
  void zeros(cuda_stream_view stream = {})
  {
    unsigned char const zero = 0;
    storage().fill(&zero, 1, stream);
  }

  /** @brief A guard that keeps the device copy from being spilled while it lives. */
  [[nodiscard]] residency_guard keep_resident() { return residency_guard{storage()}; }

  /** @brief The untyped core (for pools and bindings). */
  [[nodiscard]] detail::unified_storage& storage() const
  {
    expects(storage_ != nullptr, "unified_buffer used after it was moved from");
    return *storage_;
  }
  /** @brief Gives up the core (for pools). @post !valid(). */
  [[nodiscard]] std::unique_ptr<detail::unified_storage> release_storage() noexcept { return std::move(storage_); }

 private:
  [[nodiscard]] static std::size_t checked_bytes(std::size_t count)
  {
    expects(count <= static_cast<std::size_t>(-1) / sizeof(T),
            "unified_buffer of " + std::to_string(count) + " elements of " + std::to_string(sizeof(T)) +
              " bytes: the size overflows");
    return count * sizeof(T);
  }
  void check_size(std::size_t count, char const* what) const
  {
    expects(count == size(), std::string{what} + ": the span has " + std::to_string(count) +
                               " elements, the buffer " + std::to_string(size()));
  }

  std::unique_ptr<detail::unified_storage> storage_;
};

}  // namespace gpumem
