/**
 * @file before_stream_destroy.hpp
 * The call to make before destroying a stream that gpumem did not create.
 *
 * The stream-ordered sub-allocators (pool, fixed_size, and binning through its bins) keep blocks freed on
 * a stream in the freeing thread's cache, and record the stream's event only when the blocks leave the
 * cache for the shared lists (stream_ordered_memory_resource.hpp). A block cached for a stream that no
 * longer exists could not leave safely. gpumem::cuda_stream (and so cuda_stream_pool) calls this for you
 * when it destroys its stream; a stream made elsewhere (cudaStreamCreate, CuPy, PyTorch) on which such a
 * resource's memory was deallocated must get this call before it is destroyed.
 */
#pragma once

#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/export.hpp>

#include <cuda_runtime_api.h>

namespace gpumem::mr {

/**
 * @brief Moves every block that any live caching resource holds in any thread's cache for `stream` into
 * that resource's shared list for the stream, and records the stream's event there (the stream must
 * still be valid). Afterwards no resource refers to the stream except through its event.
 * The legacy and per-thread default streams are never destroyed: for them this does nothing.
 * Thread-safety: may be called from any thread, concurrently with allocation.
 */
GPUMEM_EXPORT void before_stream_destroy(cuda_stream_view stream) noexcept;

}  // namespace gpumem::mr

namespace gpumem::detail {

/// A resource that must hear of a stream before it is destroyed.
class stream_destroy_listener {
 public:
  /// Forget `stream` (never a default stream). Called under the listener list's lock.
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
