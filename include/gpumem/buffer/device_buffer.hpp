/**
 * @file device_buffer.hpp
 * `device_buffer`: an untyped, uninitialised, stream-ordered block of device memory (rmm::device_buffer's
 * semantics). The typed containers (device_uvector, device_scalar) are built on it.
 *
 * Stream-ordering contract, shared by every member:
 * - A buffer has a stream: the stream of its last (re)allocation, or the one given to set_stream(). The
 *   destructor and move assignment free the memory on that stream, so all work that uses the memory must
 *   be ordered before that stream's later work (same stream, or synchronised with it) when they run.
 * - A member that takes a stream does its work (allocation, copy, deallocation) on that stream, and
 *   returns without waiting for it; the contents are ready for work on that stream only.
 * - Work on another stream that reads what was written needs synchronisation first (an event, or
 *   synchronising the writing stream), exactly as for cudaMemcpyAsync.
 * - reserve, resize and shrink_to_fit make the given stream the buffer's stream, whether or not they
 *   reallocate (unless they throw: then nothing changes).
 *
 * Alignment: the memory is aligned to at least alignment(): 256 bytes (what every resource guarantees) unless
 * a constructor was given more. A larger alignment is served by asking the resource for alignment() - 256
 * more bytes and placing data() on the first aligned address in them, so it works over any resource.
 *
 * Invariants: `size() <= capacity()`; `data() == nullptr` iff `capacity() == 0`; `memory_resource()` is
 * never null; `data()` is a multiple of alignment(); the memory (when there is some) came from
 * `memory_resource()->allocate(capacity() + padding, ...)` on device `device()`, where padding is
 * alignment() - 256 when alignment() > 256 and 0 otherwise.
 */
#pragma once

#include <gpumem/cuda_device_id.hpp>
#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/export.hpp>
#include <gpumem/mr/detail/align.hpp>
#include <gpumem/mr/device_memory_resource.hpp>
#include <gpumem/mr/per_device_resource.hpp>

#include <cstddef>

namespace gpumem {

/**
 * @brief An untyped, uninitialised, stream-ordered allocation of device memory, owned by the object.
 *
 * Copying is explicit (the copy constructor takes a stream and a resource); moving transfers ownership and
 * leaves the source empty (size and capacity 0, no memory, on the default stream) and still usable.
 *
 * Thread-safety: an object must not be used from two threads at once without external synchronisation;
 * distinct objects are independent. The memory resource must be thread-safe if it is shared.
 * Stream-ordering: see the file comment; each member says what it does on which stream.
 */
class GPUMEM_EXPORT device_buffer {
 public:
  /**
   * @brief An empty buffer: no memory, size 0, on the default stream, bound to the current device's
   * current resource (used by later growth).
   * @throws gpumem::cuda_error if the current device cannot be queried.
   */
  device_buffer();

  /**
   * @brief Allocates `size` bytes of uninitialised memory from `mr` on `stream`.
   * Stream-ordering: the memory may be used at once by work on `stream`; it becomes the buffer's stream.
   * @post size() == capacity() == size; data() != nullptr iff size > 0; device() is the current device.
   * @throws gpumem::logic_error if `mr` is null.
   * @throws gpumem::out_of_memory (or gpumem::bad_alloc) as `mr->allocate` does.
   */
  device_buffer(std::size_t size, cuda_stream_view stream,
                mr::device_memory_resource* mr = mr::get_current_device_resource());

  /**
   * @brief As the (size, stream, mr) constructor, with the memory aligned to at least `alignment` bytes
   * (RMM's aligned constructor); the buffer keeps the alignment when it reallocates.
   * @post alignment() == alignment; data() is a multiple of it.
   * @throws gpumem::logic_error if `alignment` is not a power of two, or `mr` is null.
   * @throws gpumem::bad_alloc if size plus the padding (alignment - 256) overflows; as `mr->allocate` otherwise.
   */
  device_buffer(std::size_t size, std::size_t alignment, cuda_stream_view stream,
                mr::device_memory_resource* mr = mr::get_current_device_resource());

  /**
   * @brief Allocates `size` bytes from `mr` on `stream` and copies `size` bytes from `source` into them.
   * `source` may be host memory (pageable or pinned), device or managed memory.
   * Stream-ordering: the copy is enqueued on `stream` and not waited for: `source` must hold its data
   * when `stream` reaches the copy (if it is written by work on another stream, that work must be ordered
   * first) and must stay valid and unchanged until then (e.g. until `stream` is synchronised).
   * @pre `source` points at `size` readable bytes.
   * @post size() == capacity() == size.
   * @throws gpumem::logic_error if `mr` is null, or `source` is null while `size > 0`.
   * @throws gpumem::out_of_memory as `mr->allocate` does; gpumem::cuda_error if the copy cannot be enqueued
   *         (the allocation is then returned).
   */
  device_buffer(void const* source, std::size_t size, cuda_stream_view stream,
                mr::device_memory_resource* mr = mr::get_current_device_resource());

  /**
   * @brief As the (source, size, stream, mr) constructor, with the memory aligned to at least `alignment`.
   * @post alignment() == alignment.
   * @throws as the (source, size) constructor, and as the aligned (size) constructor for `alignment`.
   */
  device_buffer(void const* source, std::size_t size, std::size_t alignment, cuda_stream_view stream,
                mr::device_memory_resource* mr = mr::get_current_device_resource());

  /**
   * @brief A deep copy of `other`'s first `other.size()` bytes into new memory from `mr`, on `stream`, with
   * `other`'s alignment.
   * Stream-ordering: as the (source, size) constructor with `other.data()` as the source: the copy runs
   * on `stream`, so work that writes `other` must be ordered before it.
   * @post size() == capacity() == other.size(); alignment() == other.alignment().
   * @throws as the (source, size) constructor.
   */
  device_buffer(device_buffer const& other, cuda_stream_view stream,
                mr::device_memory_resource* mr = mr::get_current_device_resource());

  device_buffer(device_buffer const&) = delete;
  device_buffer& operator=(device_buffer const&) = delete;

  /**
   * @brief Takes `other`'s memory, size, stream, resource and device.
   * @post `other` is empty (no memory, size 0, on the default stream), keeps its resource and device, and
   *       may be reused (resize, reserve) or destroyed.
   */
  device_buffer(device_buffer&& other) noexcept;

  /**
   * @brief Frees this buffer's memory (on its own stream, on its own device), then takes `other`'s.
   * Stream-ordering: as the destructor for the memory freed.
   * @post as the move constructor.
   */
  device_buffer& operator=(device_buffer&& other) noexcept;

  /**
   * @brief Returns the memory to the resource on the buffer's stream, with the buffer's device current.
   * Stream-ordering: the memory may be reused by work on stream() at once; all work that uses it must be
   * ordered before that.
   */
  ~device_buffer() noexcept;

  /**
   * @brief Makes the capacity at least `new_capacity` bytes, keeping the contents; size() is unchanged.
   * Does nothing to the memory when `new_capacity <= capacity()`.
   * Stream-ordering: allocation, copy of the old contents and deallocation of the old memory all run on
   * `stream`, which becomes the buffer's stream; work writing the old contents must be ordered before it.
   * @post capacity() >= new_capacity; data() may change; stream() == stream.
   * @throws gpumem::out_of_memory as the resource does; the buffer is then unchanged (strong guarantee).
   */
  void reserve(std::size_t new_capacity, cuda_stream_view stream);

  /**
   * @brief Sets the size to `new_size` bytes, keeping the first min(size(), new_size) bytes; bytes past
   * the old size are uninitialised. Reallocates (to exactly `new_size`) only when `new_size > capacity()`;
   * shrinking keeps the capacity (see shrink_to_fit).
   * Stream-ordering: as reserve(); `stream` becomes the buffer's stream.
   * @post size() == new_size; stream() == stream.
   * @throws gpumem::out_of_memory as the resource does; the buffer is then unchanged (strong guarantee).
   */
  void resize(std::size_t new_size, cuda_stream_view stream);

  /**
   * @brief Reallocates so that capacity() == size(), keeping the contents (frees the memory when empty).
   * Stream-ordering: as reserve(); `stream` becomes the buffer's stream.
   * @post capacity() == size(); stream() == stream.
   * @throws gpumem::out_of_memory as the resource does; the buffer is then unchanged (strong guarantee).
   */
  void shrink_to_fit(cuda_stream_view stream);

  /** @return the memory (device-accessible; nullptr when capacity() == 0). Never dereference on the host. */
  [[nodiscard]] void* data() noexcept { return data_; }
  /** @return the memory (device-accessible; nullptr when capacity() == 0). */
  [[nodiscard]] void const* data() const noexcept { return data_; }
  /** @return the size in bytes. */
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  /** @return the size in bytes, signed. */
  [[nodiscard]] std::ptrdiff_t ssize() const noexcept { return static_cast<std::ptrdiff_t>(size_); }
  /** @return the bytes allocated (>= size()). */
  [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }
  /** @return true when size() == 0 (there may still be capacity). */
  [[nodiscard]] bool is_empty() const noexcept { return size_ == 0; }
  /** @return the alignment the memory keeps (256 unless a constructor was given one; see the file comment). */
  [[nodiscard]] std::size_t alignment() const noexcept { return alignment_; }

  /** @return the stream on which the memory will be freed (see the file comment). */
  [[nodiscard]] cuda_stream_view stream() const noexcept { return stream_; }
  /**
   * @brief Makes `stream` the buffer's stream: later deallocation (destructor, move assignment) runs on it.
   * Stream-ordering: the caller must order all earlier work on the memory before `stream`'s later work.
   */
  void set_stream(cuda_stream_view stream) noexcept { stream_ = stream; }

  /** @return the resource that allocated (and will free) the memory; never null. */
  [[nodiscard]] mr::device_memory_resource* memory_resource() const noexcept { return mr_; }
  /** @return the device that was current when the buffer was constructed; the memory lives there. */
  [[nodiscard]] cuda_device_id device() const noexcept { return device_; }

 private:
  /// Allocates exactly `new_capacity` bytes on `stream`, copies size() bytes into them, frees the old
  /// memory on `stream`, and commits. Strong guarantee. @pre new_capacity >= size().
  void reallocate(std::size_t new_capacity, cuda_stream_view stream);
  /// Frees the memory (if any) on stream_ with device_ current; leaves data_ null, size_ and capacity_ 0.
  void free_storage() noexcept;
  /// What the resource hands out for `capacity` bytes at alignment_: the allocation and data() within it.
  struct storage {
    void* allocation{nullptr};
    void* data{nullptr};
  };
  /// Allocates `capacity` bytes aligned to alignment_ on `stream` (nothing for 0). @throws as the resource.
  [[nodiscard]] storage allocate_storage(std::size_t capacity, cuda_stream_view stream) const;
  /// Returns what allocate_storage(capacity, ...) gave. Never throws.
  void deallocate_storage(storage held, std::size_t capacity, cuda_stream_view stream) const noexcept;

  void* data_{nullptr};                 ///< nullptr iff capacity_ == 0; a multiple of alignment_
  void* allocation_{nullptr};           ///< what mr_ returned for data_ (data_ itself unless alignment_ > 256)
  std::size_t alignment_{detail::allocation_alignment};  ///< a power of two
  std::size_t size_{0};                 ///< <= capacity_
  std::size_t capacity_{0};             ///< the byte count passed to mr_->allocate for data_
  cuda_stream_view stream_{};           ///< where data_ is freed; every reallocation moves it
  mr::device_memory_resource* mr_;      ///< never null
  cuda_device_id device_;               ///< data_ was allocated (and is freed) with this device current
};

}  // namespace gpumem
