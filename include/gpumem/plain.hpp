/**
 * @file plain.hpp
 * The plain API: malloc/free-shaped functions over each device's current resource, for code that does not
 * want to carry a resource and a size around (and for the C API, gpumem.h, which is built on it).
 *
 *     void* p = gpumem::alloc(1 << 20, stream);   // 1 MiB from the current device's resource
 *     ...                                         // use p on `stream`
 *     gpumem::free(p, stream);                    // no size: gpumem remembers it
 *
 * gpumem records, for every live pointer, its size, the resource that allocated it and its device, so
 * free() returns the memory to that resource on that device even when the current device or the current
 * resource has changed since. The cost is one hash-map insert and erase per allocation (16 independent
 * shards, so threads rarely contend), plus one reference-count increment and decrement when the resource
 * was set by std::shared_ptr; use the resources directly where that matters.
 *
 * The resource that served a pointer must be alive when the pointer is freed (mr/per_device_resource.hpp):
 * - a resource set by std::shared_ptr is kept alive by gpumem until its last pointer is freed, so it may be
 *   replaced, and the caller's reference dropped, while its memory is live;
 * - the default resources live for the whole process;
 * - a resource set by raw pointer is the caller's to keep alive, and gpumem cannot tell when it is gone.
 *   So free() returns memory to it only while that setting is still in place; once the device's resource
 *   was replaced (or reset), free() throws logic_error for its pointers, forgets them and leaves their
 *   memory alone, rather than call into a resource that may have been destroyed.
 *
 * Misuse is reported, not undefined: freeing a pointer twice throws gpumem::logic_error saying it "was
 * already freed" (gpumem remembers recently freed pointers, a bounded number per shard), and freeing a
 * pointer it never handed out throws logic_error saying it "was not allocated by gpumem::alloc/zeros".
 * Neither touches any resource.
 */
#pragma once

#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/export.hpp>

#include <cstddef>

namespace gpumem {

/**
 * @brief Allocates `size` bytes (256-byte aligned) from the current device's current resource
 * (mr::get_current_device_resource()).
 * Thread-safety: may be called concurrently from any thread.
 * Stream-ordering: the memory may be used at once by work on `stream`; other streams must synchronise
 * with `stream` first (device_memory_resource.hpp).
 * @return the allocation; nullptr when size == 0 (nothing is recorded, and free(nullptr) is a no-op).
 * @throws gpumem::bad_alloc when `size` overflows when rounded up to 256.
 * @throws gpumem::out_of_memory when the resource has not the memory (message: size, resource, device,
 *         free and total).
 * @throws gpumem::cuda_error when the backend fails otherwise.
 */
[[nodiscard]] GPUMEM_EXPORT void* alloc(std::size_t size, cuda_stream_view stream = cuda_stream_view{});

/**
 * @brief As alloc(), then fills the memory with zero bytes by a memset enqueued on `stream`.
 * Stream-ordering: the zeros are written in stream order: work on `stream` sees them; the host and other
 * streams must synchronise with `stream` first (for example stream.synchronize()) before reading.
 * @return the allocation; nullptr when size == 0.
 * @throws as alloc(); gpumem::cuda_error when the memset cannot be enqueued (the memory is freed first).
 */
[[nodiscard]] GPUMEM_EXPORT void* zeros(std::size_t size, cuda_stream_view stream = cuda_stream_view{});

/**
 * @brief Returns `ptr`, obtained from alloc() or zeros(), to the resource and device that allocated it.
 * Thread-safety: may be called concurrently from any thread, for different pointers.
 * Stream-ordering: the memory may be reused by work on `stream` at once: all work using `ptr` must have
 * been submitted to `stream` (or be complete).
 * @pre `ptr` is nullptr or a live pointer from alloc()/zeros().
 * @post free(nullptr) does nothing. When this was the last pointer of a resource set by shared_ptr that is
 *       no longer set and not held elsewhere, the resource is destroyed here.
 * @throws gpumem::logic_error naming the pointer when it "was already freed" or "was not allocated by
 *         gpumem::alloc/zeros"; no resource is touched then.
 * @throws gpumem::logic_error naming the pointer when it came from a resource set by raw pointer that has
 *         been replaced since (file comment): the pointer is forgotten and its memory left alone.
 */
GPUMEM_EXPORT void free(void* ptr, cuda_stream_view stream = cuda_stream_view{});

/**
 * @brief As alloc(), but only when the current resource can serve `size` without blocking
 * (device_memory_resource::try_allocate_without_blocking: for a pool, from the calling thread's cache).
 * For callers that hold a lock other code may need while it allocates (Python's GIL).
 * @return the allocation, recorded as alloc()'s are; nullptr when size == 0 or when it cannot be served
 *         that way (then call alloc()).
 * @throws as alloc(), except out_of_memory (which would need blocking: nullptr instead).
 */
[[nodiscard]] GPUMEM_EXPORT void* try_alloc_without_blocking(std::size_t size, cuda_stream_view stream = cuda_stream_view{});

/**
 * @brief As free(), but only when it can be done without blocking: `ptr` belongs to the current device, its
 * resource takes it back without blocking (device_memory_resource::try_deallocate_without_blocking), and
 * freeing it does not destroy the resource.
 * @return true when freed (also for nullptr); false when nothing was done (then call free()).
 * @throws gpumem::logic_error as free() when `ptr` is not live.
 */
[[nodiscard]] GPUMEM_EXPORT bool try_free_without_blocking(void* ptr, cuda_stream_view stream = cuda_stream_view{});

/**
 * @brief The size that was asked for when `ptr` was allocated by alloc() or zeros().
 * Thread-safety: may be called concurrently from any thread.
 * @throws gpumem::logic_error naming the pointer when it is not a live pointer from alloc()/zeros().
 */
[[nodiscard]] GPUMEM_EXPORT std::size_t allocation_size(void const* ptr);

/**
 * @brief How many pointers from alloc()/zeros() are live (not yet freed), over all threads and devices.
 * Thread-safety: may be called concurrently; the value may be stale by the time it is read.
 */
[[nodiscard]] GPUMEM_EXPORT std::size_t live_allocation_count() noexcept;

}  // namespace gpumem
