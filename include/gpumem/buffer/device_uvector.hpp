/**
 * @file device_uvector.hpp
 * `device_uvector<T>`: a typed, uninitialised, stream-ordered array of trivially copyable elements in
 * device memory (rmm::device_uvector's semantics), stored in a device_buffer.
 *
 * "Uninitialised": elements are never constructed or destroyed, only copied as bytes, which is why T must
 * be trivially copyable; new elements (construction, growth) hold indeterminate values until written.
 *
 * Stream-ordering: as device_buffer (see device_buffer.hpp): members that take a stream enqueue their work
 * on it and return at once, except those documented as synchronous (to_host, copy_to_host, element,
 * set_element, front_element, back_element), which enqueue on the given stream and then wait for it.
 * reserve, resize and shrink_to_fit make the given stream the vector's stream.
 *
 * Host data given to an `_async` member (set_element_async, the host-span constructor) is read when the
 * stream reaches the copy, not when the call returns: it must stay valid and unchanged until then. gpumem
 * does not stage it, because staging would cost an extra host copy of every upload and would misbehave under
 * stream capture; the rvalue overloads of set_element_async are deleted so that a temporary cannot be passed.
 */
#pragma once

#include <gpumem/backend/backend.hpp>
#include <gpumem/buffer/device_buffer.hpp>
#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/error.hpp>
#include <gpumem/mr/detail/align.hpp>
#include <gpumem/mr/device_memory_resource.hpp>
#include <gpumem/mr/per_device_resource.hpp>

#include <array>
#include <bit>
#include <iterator>
#include <cstddef>
#include <limits>
#include <source_location>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace gpumem {

/**
 * @brief What device_uvector and device_scalar can hold: a trivially copyable type, since elements are
 * copied as bytes (memcpy/memset on a stream) and never constructed or destroyed, whose alignment is at
 * most the 256 bytes that every device resource guarantees (detail::allocation_alignment).
 *
 * A type aligned to more (`alignas(512)`) is refused at compile time: its elements would sit on
 * 256-byte-aligned storage, so every other one would be misaligned. Store such data in a device_buffer
 * from an mr::aligned_resource_adaptor and place the elements yourself.
 */
template <class T>
concept device_uvector_element = std::is_trivially_copyable_v<T> && !std::is_const_v<T> && !std::is_volatile_v<T> &&
                                 alignof(T) <= detail::allocation_alignment;

/**
 * @brief A typed array of `T` in device memory; elements are uninitialised until written.
 * Iterators are device pointers: never dereference them on the host.
 *
 * Thread-safety: an object must not be used from two threads at once without external synchronisation;
 * distinct objects are independent.
 * Stream-ordering: see the file comment; each member says what it does on which stream.
 *
 * @tparam T a trivially copyable, non-cv-qualified type aligned to at most 256 bytes
 *           (device_uvector_element).
 */
template <device_uvector_element T>
class device_uvector {
 public:
  using value_type = T;
  using size_type = std::size_t;
  using reference = value_type&;
  using const_reference = value_type const&;
  using pointer = value_type*;
  using const_pointer = value_type const*;
  using iterator = pointer;
  using const_iterator = const_pointer;
  using reverse_iterator = std::reverse_iterator<iterator>;
  using const_reverse_iterator = std::reverse_iterator<const_iterator>;

  /**
   * @brief Allocates `size` uninitialised elements from `mr` on `stream`.
   * Stream-ordering: the memory may be used at once by work on `stream`, which becomes the vector's stream.
   * @post size() == capacity() == size.
   * @throws gpumem::bad_alloc if size * sizeof(T) overflows; gpumem::out_of_memory as the resource does;
   *         gpumem::logic_error if `mr` is null.
   */
  device_uvector(std::size_t size, cuda_stream_view stream,
                 mr::device_memory_resource* mr = mr::get_current_device_resource())
    : storage_{elements_to_bytes(size), stream, mr}
  {
  }

  /**
   * @brief A deep copy of `other`'s elements into new memory from `mr`, copied on `stream`.
   * Stream-ordering: work that writes `other` must be ordered before `stream` reaches the copy.
   * @post size() == capacity() == other.size().
   * @throws as the size constructor, and gpumem::cuda_error if the copy cannot be enqueued.
   */
  device_uvector(device_uvector const& other, cuda_stream_view stream,
                 mr::device_memory_resource* mr = mr::get_current_device_resource())
    : storage_{other.storage_, stream, mr}
  {
  }

  /**
   * @brief Allocates `host.size()` elements from `mr` and copies `host` into them, asynchronously.
   * Stream-ordering: the copy is enqueued on `stream` and not waited for; `host` must stay valid and
   * unchanged until `stream` reaches the copy (e.g. until `stream` is synchronised). Not staged (see the
   * file comment). `host` may also point at device or managed memory.
   * @post size() == capacity() == host.size().
   * @throws as the deep-copy constructor.
   */
  device_uvector(std::span<T const> host, cuda_stream_view stream,
                 mr::device_memory_resource* mr = mr::get_current_device_resource())
    : storage_{host.data(), host.size_bytes(), stream, mr}
  {
  }

  device_uvector(device_uvector const&) = delete;
  device_uvector& operator=(device_uvector const&) = delete;
  /** @brief Takes `other`'s memory; `other` is left empty (size 0, no memory) and usable. */
  device_uvector(device_uvector&&) noexcept = default;
  /** @brief Frees this vector's memory on its stream, then takes `other`'s; `other` is left empty. */
  device_uvector& operator=(device_uvector&&) noexcept = default;
  /** @brief Frees the memory on the vector's stream (see device_buffer's destructor). */
  ~device_uvector() noexcept = default;

  // ---- element access -----------------------------------------------------------------------------

  /**
   * @brief Copies `value` into element `index`, asynchronously.
   * Stream-ordering: enqueued on `stream` and not waited for; `value` is read when `stream` reaches the
   * copy, so it must stay alive and unchanged until then (hence the deleted rvalue overload).
   * @throws gpumem::out_of_range if index >= size() (the message names both).
   */
  void set_element_async(std::size_t index, value_type const& value, cuda_stream_view stream)
  {
    check_index(index);
    detail::get_backend().memcpy_async(data() + index, &value, sizeof(value_type), stream.value());
  }

  /** A temporary would be destroyed before the asynchronous copy reads it: use set_element() instead. */
  void set_element_async(std::size_t index, value_type const&& value, cuda_stream_view stream) = delete;

  /**
   * @brief Sets element `index` to all-zero bytes, asynchronously (a memset on `stream`).
   * @throws gpumem::out_of_range if index >= size().
   */
  void set_element_to_zero_async(std::size_t index, cuda_stream_view stream)
  {
    check_index(index);
    detail::get_backend().memset_async(data() + index, 0, sizeof(value_type), stream.value());
  }

  /**
   * @brief Copies `value` into element `index` and waits for `stream` (synchronous; `value` may be a
   * temporary).
   * Stream-ordering: the copy runs on `stream`, after the work already enqueued there.
   * @throws gpumem::out_of_range if index >= size(); gpumem::cuda_error if the stream fails.
   */
  void set_element(std::size_t index, value_type const& value, cuda_stream_view stream)
  {
    set_element_async(index, value, stream);
    detail::get_backend().stream_synchronize(stream.value());
  }

  /**
   * @brief Reads element `index` back to the host (synchronous).
   * Stream-ordering: the copy runs on `stream` after the work already enqueued there; then waits for it.
   * @throws gpumem::out_of_range if index >= size(); gpumem::cuda_error if the stream fails.
   */
  [[nodiscard]] value_type element(std::size_t index, cuda_stream_view stream) const
  {
    check_index(index);
    // Bytes, then bit_cast: T need not be default-constructible.
    std::array<std::byte, sizeof(value_type)> bytes;
    detail::get_backend().memcpy_async(bytes.data(), data() + index, sizeof(value_type), stream.value());
    detail::get_backend().stream_synchronize(stream.value());
    return std::bit_cast<value_type>(bytes);
  }

  /** @brief element(0, stream). @throws gpumem::out_of_range if the vector is empty. */
  [[nodiscard]] value_type front_element(cuda_stream_view stream) const { return element(0, stream); }

  /** @brief element(size() - 1, stream). @throws gpumem::out_of_range if the vector is empty. */
  [[nodiscard]] value_type back_element(cuda_stream_view stream) const
  {
    expects<out_of_range>(!is_empty(), "there is no back element: the device_uvector is empty (size 0)");
    return element(size() - 1, stream);
  }

  // ---- copies to the host -------------------------------------------------------------------------

  /**
   * @brief Copies every element into a new host vector (synchronous).
   * Stream-ordering: the copy runs on `stream` after the work already enqueued there; then waits for it.
   * @throws gpumem::cuda_error if the copy or the stream fails.
   */
  [[nodiscard]] std::vector<value_type> to_host(cuda_stream_view stream) const
    requires std::is_default_constructible_v<value_type>
  {
    std::vector<value_type> host(size());
    copy_to_host(std::span<value_type>{host}, stream);
    return host;
  }

  /**
   * @brief Copies every element into `host` (synchronous).
   * Stream-ordering: the copy runs on `stream` after the work already enqueued there; then waits for it.
   * @throws gpumem::logic_error if host.size() != size() (the message names both);
   *         gpumem::cuda_error if the copy or the stream fails.
   */
  void copy_to_host(std::span<value_type> host, cuda_stream_view stream) const
  {
    if (host.size() != size()) [[unlikely]] {
      throw logic_error("gpumem::device_uvector::copy_to_host: the host span has " + std::to_string(host.size()) +
                        " elements but the device_uvector has " + std::to_string(size()));
    }
    if (!host.empty()) {
      detail::get_backend().memcpy_async(host.data(), data(), host.size_bytes(), stream.value());
    }
    detail::get_backend().stream_synchronize(stream.value());
  }

  // ---- capacity -----------------------------------------------------------------------------------

  /**
   * @brief Makes the capacity at least `new_capacity` elements, keeping the contents.
   * Stream-ordering: as device_buffer::reserve; `stream` becomes the vector's stream.
   * @throws gpumem::bad_alloc on size overflow; gpumem::out_of_memory as the resource does (the vector is
   *         then unchanged).
   */
  void reserve(std::size_t new_capacity, cuda_stream_view stream)
  {
    storage_.reserve(elements_to_bytes(new_capacity), stream);
  }

  /**
   * @brief Sets the size to `new_size` elements, keeping the first min(size(), new_size); new elements are
   * uninitialised. Reallocates only when `new_size > capacity()`.
   * Stream-ordering: as device_buffer::resize; `stream` becomes the vector's stream.
   * @throws as reserve().
   */
  void resize(std::size_t new_size, cuda_stream_view stream)
  {
    storage_.resize(elements_to_bytes(new_size), stream);
  }

  /**
   * @brief Reallocates so that capacity() == size(), keeping the contents.
   * Stream-ordering: as device_buffer::shrink_to_fit; `stream` becomes the vector's stream.
   * @throws gpumem::out_of_memory as the resource does (the vector is then unchanged).
   */
  void shrink_to_fit(cuda_stream_view stream) { storage_.shrink_to_fit(stream); }

  /**
   * @brief Gives up the memory as an untyped buffer (its size in bytes is size() * sizeof(T)).
   * @post the vector is empty and usable.
   */
  [[nodiscard]] device_buffer release() noexcept { return std::move(storage_); }

  /** @return the number of elements. */
  [[nodiscard]] std::size_t size() const noexcept { return storage_.size() / sizeof(value_type); }
  /** @return the number of elements, signed. */
  [[nodiscard]] std::ptrdiff_t ssize() const noexcept { return static_cast<std::ptrdiff_t>(size()); }
  /** @return true when size() == 0. */
  [[nodiscard]] bool is_empty() const noexcept { return size() == 0; }
  /** @return how many elements fit without reallocating. */
  [[nodiscard]] std::size_t capacity() const noexcept { return storage_.capacity() / sizeof(value_type); }

  // ---- device pointers ----------------------------------------------------------------------------

  /** @return the elements' device pointer (nullptr when capacity() == 0). Never dereference on the host. */
  [[nodiscard]] pointer data() noexcept { return static_cast<pointer>(storage_.data()); }
  /** @return the elements' device pointer (nullptr when capacity() == 0). */
  [[nodiscard]] const_pointer data() const noexcept { return static_cast<const_pointer>(storage_.data()); }
  /**
   * @return the device pointer to element `index` (RMM's element_ptr). Never dereference it on the host.
   * @throws gpumem::out_of_range if index >= size() (RMM leaves that undefined).
   */
  [[nodiscard]] pointer element_ptr(std::size_t index)
  {
    check_index(index);
    return data() + index;
  }
  /** @copydoc element_ptr(std::size_t) */
  [[nodiscard]] const_pointer element_ptr(std::size_t index) const
  {
    check_index(index);
    return data() + index;
  }
  /** @return device pointer to the first element. */
  [[nodiscard]] iterator begin() noexcept { return data(); }
  /** @return device pointer to the first element. */
  [[nodiscard]] const_iterator begin() const noexcept { return data(); }
  /** @return device pointer to the first element. */
  [[nodiscard]] const_iterator cbegin() const noexcept { return data(); }
  /** @return device pointer one past the last element. */
  [[nodiscard]] iterator end() noexcept { return data() + size(); }
  /** @return device pointer one past the last element. */
  [[nodiscard]] const_iterator end() const noexcept { return data() + size(); }
  /** @return device pointer one past the last element. */
  [[nodiscard]] const_iterator cend() const noexcept { return data() + size(); }
  /** @return a reverse iterator over device pointers, at the last element. Never dereference on the host. */
  [[nodiscard]] reverse_iterator rbegin() noexcept { return reverse_iterator{end()}; }
  /** @return a reverse iterator at the last element. */
  [[nodiscard]] const_reverse_iterator rbegin() const noexcept { return const_reverse_iterator{end()}; }
  /** @return a reverse iterator at the last element. */
  [[nodiscard]] const_reverse_iterator crbegin() const noexcept { return rbegin(); }
  /** @return a reverse iterator one before the first element. */
  [[nodiscard]] reverse_iterator rend() noexcept { return reverse_iterator{begin()}; }
  /** @return a reverse iterator one before the first element. */
  [[nodiscard]] const_reverse_iterator rend() const noexcept { return const_reverse_iterator{begin()}; }
  /** @return a reverse iterator one before the first element. */
  [[nodiscard]] const_reverse_iterator crend() const noexcept { return rend(); }

  // ---- stream and resource ------------------------------------------------------------------------

  /** @return the stream on which the memory will be freed. */
  [[nodiscard]] cuda_stream_view stream() const noexcept { return storage_.stream(); }
  /**
   * @brief Makes `stream` the vector's stream (where the memory is freed).
   * Stream-ordering: the caller must order all earlier work on the elements before `stream`'s later work.
   */
  void set_stream(cuda_stream_view stream) noexcept { storage_.set_stream(stream); }
  /** @return the resource that allocated (and will free) the memory; never null. */
  [[nodiscard]] mr::device_memory_resource* memory_resource() const noexcept { return storage_.memory_resource(); }

 private:
  /// @throws gpumem::bad_alloc when `count` elements do not fit in a size_t of bytes.
  static std::size_t elements_to_bytes(std::size_t count)
  {
    if (count > std::numeric_limits<std::size_t>::max() / sizeof(value_type)) [[unlikely]] {
      throw bad_alloc("gpumem::device_uvector: " + std::to_string(count) + " elements of " +
                      std::to_string(sizeof(value_type)) + " bytes overflow std::size_t");
    }
    return count * sizeof(value_type);
  }

  /// @throws gpumem::out_of_range naming the caller, the index and the size when index >= size().
  void check_index(std::size_t index, std::source_location where = std::source_location::current()) const
  {
    if (index >= size()) [[unlikely]] {
      throw out_of_range(std::string{where.function_name()} + ": index " + std::to_string(index) +
                        " is out of range for a device_uvector of size " + std::to_string(size()));
    }
  }

  device_buffer storage_;  ///< storage_.size() is always a multiple of sizeof(T)
};

}  // namespace gpumem
