/**
 * @file before_stream_destroy.hpp
 * Which streams gpumem may use after the call that passed them returned, and the call that ends that.
 *
 * Streams belong to the program: CuPy, PyTorch, Numba and raw CUDA create and destroy them without telling
 * gpumem, and a call on a destroyed stream is undefined behaviour in CUDA (a crash, on a GPU). So a
 * resource uses a stream handle only during the call that passed it (allocate, deallocate, a copy),
 * except for the streams that stream_outlives_calls() names:
 * - the legacy default stream, which is never destroyed;
 * - the calling thread's own per-thread default stream, which lives as long as the thread;
 * - a stream that announced itself with detail::announce_stream() (every gpumem::cuda_stream, and so every
 *   stream of a cuda_stream_pool and every gpumem.cuda.Stream in Python), until before_stream_destroy() is
 *   called for it, which gpumem::cuda_stream does in its destructor.
 * Deferred work on any other stream (an event record after a batch of frees, a wait, a free ordered later)
 * must use events recorded during the call. The stream-ordered sub-allocators keep blocks in per-thread
 * caches, and record their stream's event later, only for the streams named above; the VMM pool records
 * at every free on any other stream.
 */
#pragma once

#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/export.hpp>

#include <cuda_runtime_api.h>

namespace gpumem::mr {

/**
 * @brief Says that `stream` is about to be destroyed: every live caching resource moves the blocks it
 * holds in any thread's cache for `stream` into its shared lists (recording the stream's event there)
 * and stops associating the handle with them; afterwards no resource uses the stream again.
 * gpumem::cuda_stream calls this in its destructor. For a stream made elsewhere it is never required
 * (gpumem never defers work on such a stream) but harmless; the stream must still be valid.
 * The legacy and per-thread default streams are never destroyed: for them this does nothing.
 * Thread-safety: may be called from any thread, concurrently with allocation.
 */
GPUMEM_EXPORT void before_stream_destroy(cuda_stream_view stream) noexcept;

}  // namespace gpumem::mr

namespace gpumem::detail {

/**
 * @brief Registers `stream` as one that will call mr::before_stream_destroy() before it is destroyed, so
 * that resources may defer work on it (gpumem::cuda_stream's constructor).
 * @throws std::bad_alloc.
 */
GPUMEM_EXPORT void announce_stream(cudaStream_t stream);

/**
 * @return whether gpumem may use `stream` after the call that passed it returned (see the file comment);
 *         for cudaStreamPerThread: on the calling thread only.
 * Cost: none for the default streams; one lock and one hash lookup for any other stream.
 */
[[nodiscard]] GPUMEM_EXPORT bool stream_outlives_calls(cuda_stream_view stream) noexcept;

/// A resource that must hear of an announced stream before it is destroyed.
class stream_destroy_listener {
 public:
  /// Forget `stream` (never a default stream); it is still valid during the call. Called under the
  /// listener list's lock.
  virtual void stream_destroying(cudaStream_t stream) noexcept = 0;

 protected:
  stream_destroy_listener() = default;
  ~stream_destroy_listener() = default;
  stream_destroy_listener(stream_destroy_listener const&) = default;
  stream_destroy_listener& operator=(stream_destroy_listener const&) = default;
};

/// Adds or removes a listener (a resource's constructor and destructor). @throws std::bad_alloc (add).
GPUMEM_EXPORT void add_stream_destroy_listener(stream_destroy_listener* listener);
GPUMEM_EXPORT void remove_stream_destroy_listener(stream_destroy_listener* listener) noexcept;

}  // namespace gpumem::detail
