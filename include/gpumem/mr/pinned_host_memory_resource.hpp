/**
 * @file pinned_host_memory_resource.hpp
 * A resource over page-locked (pinned) host memory: cudaMallocHost / cudaFreeHost through the backend.
 * Pinned memory is what makes host<->device copies truly asynchronous; it is host memory that the device
 * can also read and write.
 */
#pragma once

#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/export.hpp>
#include <gpumem/mr/device_memory_resource.hpp>

#include <cstddef>

namespace gpumem::mr {

/**
 * @brief A device_memory_resource (so it plugs into everything that takes one) that allocates page-locked
 * host memory with cudaMallocHost and frees it with cudaFreeHost.
 *
 * The memory is host- and device-accessible (CCCL properties host_accessible and device_accessible).
 * Pinning is expensive and takes physical memory away from the operating system: allocate few, large
 * blocks (or put a pool on top).
 *
 * Thread-safety: all members may be called concurrently (the resource has no state).
 * Stream-ordering: allocate ignores the stream. deallocate frees at once; cudaFreeHost (and the host
 * backend's emulation of it) first waits for all work on the device.
 *
 * Any two pinned_host_memory_resource objects compare equal.
 */
class GPUMEM_EXPORT pinned_host_memory_resource final : public device_memory_resource {
 public:
#ifdef GPUMEM_HAS_CUDA_MR
  /** @brief CCCL property: pinned memory is host memory (device_accessible is inherited). */
  friend void get_property(pinned_host_memory_resource const&, cuda::mr::host_accessible) noexcept {}
#endif

 private:
  /**
   * @brief cudaMallocHost(bytes).
   * @throws gpumem::out_of_memory naming "pinned_host_memory_resource" and the size when the memory cannot
   *         be pinned (the message's free/total figures are the current device's; pinned memory is limited
   *         by the host's physical memory instead).
   * @throws gpumem::cuda_error when the runtime fails otherwise.
   */
  void* do_allocate(std::size_t bytes, cuda_stream_view stream) override;
  /** @brief cudaFreeHost(ptr), which waits for the device's work first. Never throws. */
  void do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept override;
  /** @return true when `other` is a pinned_host_memory_resource. */
  [[nodiscard]] bool do_is_equal(device_memory_resource const& other) const noexcept override;
};

#ifdef GPUMEM_HAS_CUDA_MR
static_assert(cuda::mr::async_resource_with<pinned_host_memory_resource, cuda::mr::device_accessible,
                                            cuda::mr::host_accessible>);
#endif

}  // namespace gpumem::mr
