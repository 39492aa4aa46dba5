/**
 * @file device_scalar.hpp
 * `device_scalar<T>`: one trivially copyable value in device memory, stream-ordered (rmm::device_scalar's
 * semantics): a device_uvector<T> of size 1 with value-shaped accessors. Typical use: a counter or a flag
 * that kernels write and the host reads back.
 *
 * Stream-ordering: as device_uvector (see device_uvector.hpp). value() is synchronous; set_value_async and
 * set_value_to_zero_async enqueue and return. The constructor taking an initial value differs from RMM's
 * on purpose: it waits for its copy, so that the value may be a temporary (`device_scalar<int>{0, s}`),
 * which RMM's asynchronous version only gets away with because CUDA happens to stage small pageable
 * copies; gpumem's host backend does not, so there it would read a destroyed temporary.
 */
#pragma once

#include <gpumem/buffer/device_uvector.hpp>
#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/device_memory_resource.hpp>
#include <gpumem/mr/per_device_resource.hpp>

#include <cstddef>
#include <source_location>

namespace gpumem {

/**
 * @brief One value of type `T` in device memory.
 * Thread-safety: an object must not be used from two threads at once without external synchronisation;
 * distinct objects are independent.
 * Stream-ordering: see the file comment; each member says what it does on which stream.
 * @tparam T a trivially copyable, non-cv-qualified type aligned to at most 256 bytes
 *           (device_uvector_element).
 */
template <device_uvector_element T>
class device_scalar {
 public:
  using value_type = T;
  using pointer = value_type*;
  using const_pointer = value_type const*;

  /**
   * @brief Allocates an uninitialised value from `mr` on `stream`.
   * Stream-ordering: usable at once by work on `stream`, which becomes the scalar's stream.
   * @throws gpumem::out_of_memory as the resource does; gpumem::logic_error if `mr` is null.
   */
  explicit device_scalar(cuda_stream_view stream, mr::device_memory_resource* mr = mr::get_current_device_resource())
    : storage_{1, stream, mr}
  {
  }

  /**
   * @brief Allocates a value from `mr` on `stream` and copies `initial_value` into it, then waits for
   * `stream` (so `initial_value` may be a temporary; not usable while `stream` is being captured).
   * Stream-ordering: the copy runs on `stream` after the work already enqueued there.
   * @throws as the other constructor, and gpumem::cuda_error if the copy or the stream fails.
   */
  device_scalar(value_type const& initial_value, cuda_stream_view stream,
                mr::device_memory_resource* mr = mr::get_current_device_resource())
    : storage_{1, stream, mr}
  {
    storage_.set_element(0, initial_value, stream);
  }

  /**
   * @brief A deep copy of `other`'s value into new memory from `mr`, copied on `stream`.
   * Stream-ordering: work that writes `other` must be ordered before `stream` reaches the copy.
   * @throws as the other constructors.
   */
  device_scalar(device_scalar const& other, cuda_stream_view stream,
                mr::device_memory_resource* mr = mr::get_current_device_resource())
    : storage_{other.storage_, stream, mr}
  {
  }

  device_scalar(device_scalar const&) = delete;
  device_scalar& operator=(device_scalar const&) = delete;
  /** @brief Takes `other`'s memory; `other` is left without memory: only destroy it or assign to it. */
  device_scalar(device_scalar&&) noexcept = default;
  /** @brief Frees this scalar's memory on its stream, then takes `other`'s. */
  device_scalar& operator=(device_scalar&&) noexcept = default;
  /** @brief Frees the memory on the scalar's stream. */
  ~device_scalar() noexcept = default;

  /**
   * @brief Copies the value to the host (synchronous).
   * Stream-ordering: the copy runs on `stream` after the work already enqueued there; then waits for it.
   * @pre the scalar was not moved from.
   * @throws gpumem::cuda_error if the copy or the stream fails; gpumem::logic_error if moved from.
   */
  [[nodiscard]] value_type value(cuda_stream_view stream) const
  {
    expects_not_moved_from();
    return storage_.front_element(stream);
  }

  /**
   * @brief Copies `value` into the scalar, asynchronously.
   * Stream-ordering: enqueued on `stream` and not waited for; `value` is read when `stream` reaches the
   * copy, so it must stay alive and unchanged until then (hence the deleted rvalue overload).
   * @throws gpumem::cuda_error if the copy cannot be enqueued; gpumem::logic_error if moved from.
   */
  void set_value_async(value_type const& value, cuda_stream_view stream)
  {
    expects_not_moved_from();
    storage_.set_element_async(0, value, stream);
  }

  /** A temporary would be destroyed before the asynchronous copy reads it. */
  void set_value_async(value_type const&& value, cuda_stream_view stream) = delete;

  /**
   * @brief Sets the value to all-zero bytes, asynchronously (a memset on `stream`).
   * @throws gpumem::cuda_error if the memset cannot be enqueued; gpumem::logic_error if moved from.
   */
  void set_value_to_zero_async(cuda_stream_view stream)
  {
    expects_not_moved_from();
    storage_.set_element_to_zero_async(0, stream);
  }

  /** @return the value's device pointer (for kernels and copies). Never dereference on the host. */
  [[nodiscard]] pointer data() noexcept { return storage_.data(); }
  /** @return the value's device pointer. */
  [[nodiscard]] const_pointer data() const noexcept { return storage_.data(); }
  /** @return 1: the number of elements, for code written against containers. */
  [[nodiscard]] static constexpr std::size_t size() noexcept { return 1; }

  /** @return the stream on which the memory will be freed. */
  [[nodiscard]] cuda_stream_view stream() const noexcept { return storage_.stream(); }
  /**
   * @brief Makes `stream` the scalar's stream (where the memory is freed).
   * Stream-ordering: the caller must order all earlier work on the value before `stream`'s later work.
   */
  void set_stream(cuda_stream_view stream) noexcept { storage_.set_stream(stream); }
  /** @return the resource that allocated (and will free) the memory. */
  [[nodiscard]] mr::device_memory_resource* memory_resource() const noexcept { return storage_.memory_resource(); }

 private:
  /// A moved-from scalar is a misuse (gpumem::logic_error), not an index out of range.
  void expects_not_moved_from(std::source_location where = std::source_location::current()) const
  {
    expects(!storage_.is_empty(), "the device_scalar was moved from", where);
  }

  device_uvector<value_type> storage_;  ///< exactly one element, except after a move
};

}  // namespace gpumem
