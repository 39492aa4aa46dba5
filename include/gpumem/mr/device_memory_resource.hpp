/**
 * @file device_memory_resource.hpp
 * The stream-ordered device memory resource interface that every gpumem resource implements.
 *
 * Stream-ordering contract (as RMM documents it):
 * - Memory returned by allocate(bytes, stream) may be used at once by work on `stream`. Work on another
 *   stream B may use it only after B is synchronised with `stream` (an event, or a stream synchronisation).
 * - deallocate(p, bytes, stream) says the memory may be reused by work on `stream` at once, i.e. all work
 *   that uses `p` was submitted to `stream` before the call (or is otherwise complete). The resource may
 *   hand the memory to another stream only after `stream`'s work up to the deallocation has completed.
 * - The legacy default stream (cuda_stream_default) synchronises implicitly with all blocking streams.
 *
 * Common contract of every resource, enforced here once so implementations need not repeat it:
 * - Every allocation is aligned to 256 bytes (detail::allocation_alignment).
 * - allocate(0) returns nullptr; deallocate(nullptr, ...) does nothing.
 * - A size that overflows when rounded up to 256 throws gpumem::bad_alloc naming the size.
 * - An alignment that is not a power of two, or above 256, throws gpumem::logic_error.
 * - deallocate never throws.
 *
 * CCCL: the class provides allocate(bytes, alignment) / deallocate(p, bytes, alignment) (synchronous, on the
 * default stream), allocate_async / deallocate_async with a cuda::stream_ref, equality and the
 * device_accessible property, so every resource satisfies cuda::mr::async_resource_with<device_accessible>
 * and can be passed as a cuda::mr::async_resource_ref.
 */
#pragma once

#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/error.hpp>
#include <gpumem/export.hpp>
#include <gpumem/mr/detail/align.hpp>
#include <gpumem/mr/shareable_memory.hpp>

#include <cstddef>
#include <string>

#if __has_include(<cuda/memory_resource>) && defined(LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE)
#include <cuda/memory_resource>
#define GPUMEM_HAS_CUDA_MR 1
#endif

namespace gpumem::mr {

/**
 * @brief Base class of all device memory resources: stream-ordered allocate/deallocate (see file comment).
 * Implementations override do_allocate, do_deallocate and, where two instances can free each other's
 * memory, do_is_equal.
 * Thread-safety: each derived resource states its own; all of gpumem's resources are thread-safe.
 */
class GPUMEM_EXPORT device_memory_resource {
 public:
  device_memory_resource() = default;
  virtual ~device_memory_resource() = default;
  device_memory_resource(device_memory_resource const&) = default;
  device_memory_resource(device_memory_resource&&) noexcept = default;
  device_memory_resource& operator=(device_memory_resource const&) = default;
  device_memory_resource& operator=(device_memory_resource&&) noexcept = default;

  /**
   * @brief Allocates `bytes` bytes, 256-byte aligned, usable at once by work on `stream`.
   * Stream-ordering: see the file comment.
   * @return the allocation, or nullptr when bytes == 0.
   * @throws gpumem::out_of_memory when the memory is not available.
   * @throws gpumem::bad_alloc when `bytes` overflows when rounded up to 256, or the request fails otherwise.
   */
  [[nodiscard]] void* allocate(std::size_t bytes, cuda_stream_view stream = cuda_stream_view{})
  {
    if (bytes == 0) { return nullptr; }
    check_size(bytes);
    return do_allocate(bytes, stream);
  }

  /**
   * @brief Returns memory obtained from allocate() of this resource (or an equal one).
   * Stream-ordering: the memory may be reused by work on `stream` at once.
   * @pre `ptr` came from allocate(bytes, ...) of an equal resource and was not deallocated since.
   */
  void deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream = cuda_stream_view{}) noexcept
  {
    if (ptr == nullptr) { return; }
    do_deallocate(ptr, bytes, stream);
  }

  /**
   * @brief As deallocate(), but a misuse that the resource detects during the call throws instead of being
   * logged (at error level) and ignored: a double free, a pointer it never handed out, a misaligned pointer.
   * Each resource's header says which misuses it detects; adaptors pass their upstream's detection
   * through. What no resource can detect (a pointer freed twice and handed out again in between) stays
   * undefined, as in RMM. The Python package's deallocate() calls this.
   * @throws gpumem::logic_error naming the misuse; the misused call changed nothing in the resource.
   */
  void checked_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream = cuda_stream_view{});

  /**
   * @brief CCCL-style synchronous allocation on the default stream.
   * @throws gpumem::logic_error if `alignment` is not a power of two or exceeds 256
   *         (use aligned_resource_adaptor for more).
   */
  [[nodiscard]] void* allocate(std::size_t bytes, std::size_t alignment)
  {
    check_alignment(alignment);
    return allocate(bytes, cuda_stream_view{});
  }
  void deallocate(void* ptr, std::size_t bytes, std::size_t /*alignment*/) noexcept
  {
    deallocate(ptr, bytes, cuda_stream_view{});
  }

  /** @brief CCCL-style stream-ordered allocation. @throws as allocate(bytes, alignment). */
  [[nodiscard]] void* allocate_async(std::size_t bytes, std::size_t alignment, cuda_stream_view stream)
  {
    check_alignment(alignment);
    return allocate(bytes, stream);
  }
  [[nodiscard]] void* allocate_async(std::size_t bytes, cuda_stream_view stream) { return allocate(bytes, stream); }
  void deallocate_async(void* ptr, std::size_t bytes, std::size_t /*alignment*/, cuda_stream_view stream) noexcept
  {
    deallocate(ptr, bytes, stream);
  }
  void deallocate_async(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept
  {
    deallocate(ptr, bytes, stream);
  }

  /** @return true when memory from either resource may be deallocated by the other. */
  [[nodiscard]] bool is_equal(device_memory_resource const& other) const noexcept
  {
    return this == &other || do_is_equal(other);
  }
  [[nodiscard]] bool operator==(device_memory_resource const& other) const noexcept { return is_equal(other); }
  [[nodiscard]] bool operator!=(device_memory_resource const& other) const noexcept { return !is_equal(other); }

  /**
   * @brief As allocate(), but only when the resource can serve the request without blocking: without
   * waiting for a lock that another thread may hold across a call into its upstream, without growing, and
   * without waiting for the device. For callers that hold a lock other code may need while it allocates
   * (Python's GIL: the Python package tries this with the GIL held, and calls allocate() without it only
   * when this fails).
   * @return the allocation, or nullptr when the request cannot be served that way (always for bytes == 0,
   *         and for resources that do not implement it: the default); then call allocate().
   * @throws gpumem::bad_alloc when `bytes` overflows when rounded up to 256.
   */
  [[nodiscard]] void* try_allocate_without_blocking(std::size_t bytes, cuda_stream_view stream = cuda_stream_view{})
  {
    if (bytes == 0) { return nullptr; }
    check_size(bytes);
    return do_try_allocate_without_blocking(bytes, stream);
  }

  /**
   * @brief As deallocate(), but only when it can be done without blocking (see try_allocate_without_blocking).
   * @return true when `ptr` was deallocated; false when nothing was done (then call deallocate()).
   * @pre as deallocate().
   */
  [[nodiscard]] bool try_deallocate_without_blocking(void* ptr, std::size_t bytes,
                                                     cuda_stream_view stream = cuda_stream_view{})
  {
    if (ptr == nullptr) { return true; }
    return do_try_deallocate_without_blocking(ptr, bytes, stream);
  }

  /**
   * @brief How another process can map `bytes` bytes at `ptr`, memory this resource handed out
   * (shareable_memory.hpp; gpumem/ipc.hpp's export_memory calls it). Adaptors and sub-allocators pass the
   * question to their upstream; the VMM pool answers with its pieces of physical memory, cuda_memory_resource
   * with the allocation's CUDA IPC handle.
   * @throws gpumem::logic_error naming the resource when its memory cannot be shared between processes (the
   *         default), or when [ptr, ptr + bytes) is not memory it handed out; gpumem::cuda_error when the
   *         driver refuses.
   */
  [[nodiscard]] shareable_memory shareable(void const* ptr, std::size_t bytes) const
  {
    expects_shareable_range(ptr, bytes);
    return do_shareable(ptr, bytes);
  }

#ifdef GPUMEM_HAS_CUDA_MR
  friend void get_property(device_memory_resource const&, cuda::mr::device_accessible) noexcept {}
#endif

 protected:
  /** @pre bytes > 0 and bytes rounded up to 256 does not overflow. @return non-null, 256-byte aligned. */
  virtual void* do_allocate(std::size_t bytes, cuda_stream_view stream) = 0;
  /** @pre ptr != nullptr, from do_allocate(bytes, ...) of an equal resource. Must not throw. */
  virtual void do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept = 0;
  /** @return whether `other` can free this resource's memory and vice versa. Default: identity only. */
  [[nodiscard]] virtual bool do_is_equal(device_memory_resource const& other) const noexcept { return this == &other; }
  /** @pre as do_allocate. @return non-null only when served without blocking. Default: nullptr. */
  [[nodiscard]] virtual void* do_try_allocate_without_blocking(std::size_t /*bytes*/, cuda_stream_view /*stream*/)
  {
    return nullptr;
  }
  /**
   * @pre ptr != nullptr, bytes > 0. @return as shareable(). Default: throws gpumem::logic_error naming the
   * resource's type (its memory cannot be shared).
   */
  [[nodiscard]] virtual shareable_memory do_shareable(void const* ptr, std::size_t bytes) const;
  /** @pre as do_deallocate. @return true only when deallocated without blocking. Default: false. */
  [[nodiscard]] virtual bool do_try_deallocate_without_blocking(void* /*ptr*/, std::size_t /*bytes*/,
                                                                cuda_stream_view /*stream*/)
  {
    return false;
  }

 private:
  static void check_size(std::size_t bytes);
  static void check_alignment(std::size_t alignment);
  static void expects_shareable_range(void const* ptr, std::size_t bytes);
};

#ifdef GPUMEM_HAS_CUDA_MR
static_assert(cuda::mr::async_resource_with<device_memory_resource, cuda::mr::device_accessible>);
#endif

}  // namespace gpumem::mr

namespace gpumem::detail {

/**
 * @brief For a resource's deallocate(), which must not throw: reports a misuse it detected (and did not
 * act on). The message is logged at error level (when `log` is true); inside checked_deallocate() on this
 * thread, the first report of the call is thrown from it as gpumem::logic_error.
 */
GPUMEM_EXPORT void report_deallocation_misuse(std::string const& message, bool log = true) noexcept;

/**
 * @return whether a checked_deallocate() is running on this thread: a resource's deallocate() may then also
 * look for the misuses that are too costly to look for on every call (a pointer it never handed out).
 */
[[nodiscard]] GPUMEM_EXPORT bool deallocation_is_checked() noexcept;

}  // namespace gpumem::detail
