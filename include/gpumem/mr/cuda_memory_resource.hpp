/**
 * @file cuda_memory_resource.hpp
 * The simplest device resource: every allocation is a cudaMalloc, every deallocation a cudaFree (through the
 * backend, so it runs on the host backend too). The upstream that pools and arenas grow from.
 */
#pragma once

#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/export.hpp>
#include <gpumem/mr/device_memory_resource.hpp>

#include <cstddef>

namespace gpumem::mr {

/**
 * @brief A device_memory_resource that allocates with cudaMalloc and frees with cudaFree, on the calling
 * thread's current device.
 *
 * Every call goes to the CUDA runtime, which is slow (cudaMalloc and cudaFree synchronise the device):
 * use it as the upstream of a pool, not on a hot path.
 *
 * Thread-safety: all members may be called concurrently (the resource has no state).
 * Stream-ordering: allocate ignores the stream (cudaMalloc's memory is usable by every stream at once).
 * deallocate frees at once: cudaFree (and the host backend's emulation of it) first waits for all work
 * on the device, which keeps the contract of device_memory_resource.hpp on both backends.
 *
 * Any two cuda_memory_resource objects compare equal: each can free the other's memory.
 */
class GPUMEM_EXPORT cuda_memory_resource final : public device_memory_resource {
 private:
  /**
   * @brief cudaMalloc(bytes) on the current device.
   * @throws gpumem::out_of_memory naming "cuda_memory_resource", the size, the device and its free/total
   *         memory when the device has not enough memory.
   * @throws gpumem::cuda_error when the runtime fails otherwise.
   */
  void* do_allocate(std::size_t bytes, cuda_stream_view stream) override;
  /** @brief cudaFree(ptr), which waits for the device's work first. Never throws. */
  void do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept override;
  /** @return true when `other` is a cuda_memory_resource. */
  [[nodiscard]] bool do_is_equal(device_memory_resource const& other) const noexcept override;
};

#ifdef GPUMEM_HAS_CUDA_MR
static_assert(cuda::mr::async_resource_with<cuda_memory_resource, cuda::mr::device_accessible>);
#endif

}  // namespace gpumem::mr
