/**
 * @file prefetch.hpp
 * Migrating managed memory to a device ahead of its use (cudaMemPrefetchAsync), as RMM's rmm::prefetch.
 */
#pragma once

#include <gpumem/cuda_device_id.hpp>
#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/export.hpp>

#include <cstddef>

namespace gpumem {

/**
 * @brief Migrates `bytes` of managed memory at `ptr` to `device`, ordered on `stream`.
 *
 * A hint: the data stay valid wherever they are, and work on `stream` after the prefetch finds them on
 * `device` without page faults. Under the host backend memory does not move; the prefetch is an empty
 * stream-ordered operation that still checks its arguments and the stream.
 * Stream-ordering: after the work submitted to `stream` so far; the call returns at once.
 * `bytes` == 0 does nothing.
 * @pre [ptr, ptr + bytes) is managed memory (cudaMallocManaged, managed_memory_resource).
 * @throws gpumem::logic_error if `device` is not a valid device ordinal, or `ptr` is null while bytes > 0.
 * @throws gpumem::cuda_error if the prefetch cannot be enqueued (on a GPU: memory that is not managed).
 */
GPUMEM_EXPORT void prefetch(void const* ptr, std::size_t bytes, cuda_device_id device, cuda_stream_view stream);

}  // namespace gpumem
