/**
 * @file transfer.hpp
 * Fast copies between host and device memory, whatever kind of host memory it is; and the plain
 * stream-ordered copy and fill of CUDA (memcpy_async, memset_async) for memory of any kind.
 *
 * From pinned host memory a copy is one cudaMemcpyAsync, which runs at the link's full speed and does not
 * block the caller. From pageable memory CUDA copies at a fraction of that speed (docs/PERFORMANCE.md),
 * because the driver stages through a small pinned buffer with one thread. These functions stage through a ring of large pinned
 * chunks (from the default pinned pool) instead, with the host-side copies spread over several worker
 * threads and overlapped with the DMA of the previous chunks.
 *
 *     std::vector<float> host(n);                                      // pageable
 *     gpumem::copy_to_device(device_ptr, host.data(), n * sizeof(float), stream);  // host reusable now
 *     gpumem::copy_to_host(host.data(), device_ptr, n * sizeof(float), stream);    // data in host now
 *
 * Thread-safety: every function may be called from any thread, also concurrently on different streams
 * (the worker threads are shared; the calling thread always takes part, so no call waits on another's
 * work). Do not call the copies from inside a stream callback (launch_host_func): a staged copy waits for
 * the stream.
 */
#pragma once

#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/export.hpp>

#include <cstddef>

namespace gpumem {

/** @brief How staged copies are cut up; read once from the environment, adjustable for tuning. */
struct transfer_config {
  /// Bytes per staging chunk (GPUMEM_STAGING_CHUNK, e.g. "2MiB" or a byte count). The default and the
  /// thread count below are the best pair of the sweep in docs/PERFORMANCE.md.
  std::size_t chunk_bytes{std::size_t{2} << 20U};
  /// Host threads copying into and out of staging chunks (GPUMEM_COPY_THREADS, 1 to 64), the calling
  /// thread included. Each owns two chunks (double buffering): at most 2 * threads * chunk_bytes are pinned
  /// by one copy. The process default is 12, or the machine's hardware threads where it has fewer.
  unsigned threads{12};
  /// Copies smaller than this are staged by the calling thread alone, through one or two chunks. So is
  /// every copy on cudaStreamPerThread (other threads cannot name the caller's per-thread stream).
  std::size_t parallel_threshold{std::size_t{4} << 20U};
};

/**
 * @brief The configuration in use (first call: defaults, then GPUMEM_STAGING_CHUNK / GPUMEM_COPY_THREADS).
 * GPUMEM_STAGING_CHUNK takes a byte count or a binary suffix ("8MiB", "512K", "1G"); it must be a positive
 * multiple of 256. GPUMEM_COPY_THREADS takes a whole number from 1 to 64.
 * Thread-safety: may be called from any thread, concurrently with set_transfer_config.
 * @throws gpumem::logic_error naming the variable and its value when one is malformed (on every call until
 *         set_transfer_config replaces the configuration; the copies throw it too).
 */
[[nodiscard]] GPUMEM_EXPORT transfer_config get_transfer_config();
/**
 * @brief Replaces the configuration for later copies (copies under way keep the one they started with).
 * @throws gpumem::logic_error if chunk_bytes is 0 or not a multiple of 256, or threads is 0 or above 64.
 */
GPUMEM_EXPORT void set_transfer_config(transfer_config const& config);

/**
 * @brief Copies `bytes` from host memory `src` to device memory `dst`, ordered on `stream`.
 *
 * - `src` pinned (backend::is_pinned_host): one asynchronous copy; returns at once. `src` must stay valid
 *   and unchanged until `stream` has reached the copy.
 * - `src` pageable: staged. Returns once every byte of `src` has been read (the caller may then reuse or
 *   free `src`); the last chunks' DMA may still be in flight on `stream`, and work later on `stream` sees
 *   the data. Like CUDA's own pageable copies, the call may wait for the stream: for its own earlier
 *   chunks, and for earlier staged copies on `stream` so that at most 2 * threads * chunk_bytes of their
 *   staging memory stays in flight (back-to-back copies ahead of a busy stream do not pin ever more memory).
 * Work on `stream` submitted before the call is ordered before the copy in both cases.
 * `bytes` == 0 does nothing (null pointers allowed).
 * @throws gpumem::logic_error if `dst` or `src` is null while bytes > 0, or if a staged copy is asked for on
 *         a stream that is capturing a graph (the staging buffers are reused after the call: capture copies
 *         from pinned memory instead).
 * @throws gpumem::cuda_error if a copy cannot be enqueued; gpumem::out_of_memory if no staging memory.
 *         Such an error is thrown by the calling thread once every worker has stopped (bytes already copied
 *         stay copied; no staging buffer leaks, those with a copy in flight go back to the pool in stream
 *         order).
 */
GPUMEM_EXPORT void copy_to_device(void* dst, void const* src, std::size_t bytes, cuda_stream_view stream);

/**
 * @brief Copies `bytes` from device memory `src` to host memory `dst`, ordered on `stream` after the work
 * submitted to it so far.
 *
 * - `dst` pinned: one asynchronous copy; returns at once. Read `dst` only after `stream` has reached the
 *   end of the copy (synchronise the stream, or an event recorded after the call).
 * - `dst` pageable: staged. Returns when all of the data are in `dst` (this waits for `stream`'s earlier
 *   work).
 * @throws as copy_to_device.
 */
GPUMEM_EXPORT void copy_to_host(void* dst, void const* src, std::size_t bytes, cuda_stream_view stream);

/**
 * @brief Copies `bytes` from `src` to `dst`, ordered on `stream` (cudaMemcpyAsync with cudaMemcpyDefault:
 * either side may be device, managed or host memory; the runtime tells which from the address).
 *
 * One driver call, nothing staged: with pageable host memory on either side CUDA's own slow path applies and
 * the call may wait for the copy (copy_to_device / copy_to_host are the fast way for pageable memory).
 * Stream-ordering: after the work submitted to `stream` so far; otherwise the call returns at once, and `src`
 * must stay valid and unchanged, `dst` unread, until `stream` has reached the end of the copy.
 * `bytes` == 0 does nothing (null pointers allowed).
 * @pre the ranges [dst, dst + bytes) and [src, src + bytes) are valid and do not overlap.
 * @throws gpumem::logic_error if `dst` or `src` is null while bytes > 0.
 * @throws gpumem::cuda_error if the copy cannot be enqueued.
 */
GPUMEM_EXPORT void memcpy_async(void* dst, void const* src, std::size_t bytes, cuda_stream_view stream);

/**
 * @brief Sets `bytes` bytes at `dst` (device or managed memory) to `value`'s low byte, ordered on `stream`
 * (cudaMemsetAsync). Returns at once; `dst` holds the value once `stream` has reached the end of the fill.
 * `bytes` == 0 does nothing (a null pointer allowed).
 * @throws gpumem::logic_error if `dst` is null while bytes > 0.
 * @throws gpumem::cuda_error if the fill cannot be enqueued.
 */
GPUMEM_EXPORT void memset_async(void* dst, int value, std::size_t bytes, cuda_stream_view stream);

}  // namespace gpumem
