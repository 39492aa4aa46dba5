/**
 * @file prefetch.hpp
 * Migrating managed memory to a device (or to the host) ahead of its use (cudaMemPrefetchAsync), as RMM's
 * rmm::prefetch: memory that cannot migrate is left where it is.
 */
#pragma once

#include <gpumem/cuda_device_id.hpp>
#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/export.hpp>

#include <cstddef>
#include <span>

namespace gpumem {

/**
 * @brief Migrates `bytes` of managed memory at `ptr` to `device`, ordered on `stream`.
 *
 * A hint: the data stay valid wherever they are, and work on `stream` after the prefetch finds them on
 * `device` without page faults. `device` may be cudaCpuDeviceId (-1) to bring the pages to the host.
 * Memory that cannot migrate is a no-op, as in RMM: device memory (cudaMalloc, a pool over it), pinned host
 * memory, pageable host memory on a device without pageable memory access, memory of a device without
 * concurrent managed access, and memory gpumem does not know. So code may prefetch whatever resource
 * served it. Whether the memory can migrate is asked of the backend (the pointer's attributes), before any
 * prefetch is enqueued. Under the host backend memory does not move; the prefetch of managed memory is an
 * empty stream-ordered operation that still checks its arguments and the stream.
 * Stream-ordering: after the work submitted to `stream` so far; the call returns at once.
 * `bytes` == 0 does nothing.
 * @throws gpumem::logic_error if `device` is neither a valid device ordinal nor cudaCpuDeviceId, or `ptr` is
 *         null while bytes > 0.
 * @throws gpumem::cuda_error if the prefetch of memory that can migrate cannot be enqueued (a destroyed or
 *         foreign stream, a range past the end of the allocation).
 */
GPUMEM_EXPORT void prefetch(void const* ptr, std::size_t bytes, cuda_device_id device, cuda_stream_view stream);

/**
 * @brief prefetch(data.data(), data.size_bytes(), device, stream): the span's elements (RMM's typed overload).
 * @throws as the pointer overload.
 */
template <class T>
void prefetch(std::span<T const> data, cuda_device_id device, cuda_stream_view stream)
{
  prefetch(static_cast<void const*>(data.data()), data.size_bytes(), device, stream);
}

/**
 * @brief Advises CUDA how managed memory [ptr, ptr + bytes) will be used (cudaMemAdvise): `advice` a
 * cudaMemoryAdvise value (1 to 6), `device` the device it concerns or cudaCpuDeviceId (-1). A hint; the host
 * backend checks the arguments as CUDA does.
 * @throws gpumem::cuda_error (cudaErrorInvalidValue for memory that is not managed or a bad advice,
 *         cudaErrorInvalidDevice for a bad device).
 */
GPUMEM_EXPORT void mem_advise(void const* ptr, std::size_t bytes, int advice, int device);

}  // namespace gpumem
