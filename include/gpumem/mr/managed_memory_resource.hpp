/**
 * @file managed_memory_resource.hpp
 * A device resource over managed (unified) memory: cudaMallocManaged / cudaFree through the backend. The
 * memory is usable from the host and from every device; the driver migrates pages on demand.
 */
#pragma once

#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/export.hpp>
#include <gpumem/mr/device_memory_resource.hpp>

#include <cstddef>

namespace gpumem::mr {

/**
 * @brief A device_memory_resource that allocates managed memory (cudaMallocManaged with
 * cudaMemAttachGlobal) and frees it with cudaFree.
 *
 * The memory is host- and device-accessible (CCCL properties host_accessible and device_accessible).
 * Beware of oversubscription: on some systems a cudaMallocManaged larger than the free device memory does
 * not fail at once but pages until the GPU stalls; size requests against get_backend().mem_info().
 *
 * Thread-safety: all members may be called concurrently (the resource has no state).
 * Stream-ordering: allocate ignores the stream (the memory is usable by every stream and by the host once
 * the call returns). deallocate frees at once; cudaFree first waits for all work on the device.
 *
 * Any two managed_memory_resource objects compare equal.
 */
class GPUMEM_EXPORT managed_memory_resource final : public device_memory_resource {
 public:
#ifdef GPUMEM_HAS_CUDA_MR
  /** @brief CCCL property: managed memory is accessible from the host (device_accessible is inherited). */
  friend void get_property(managed_memory_resource const&, cuda::mr::host_accessible) noexcept {}
#endif

 private:
  /**
   * @brief cudaMallocManaged(bytes) with the current device as the one the memory is accounted to.
   * @throws gpumem::out_of_memory naming "managed_memory_resource", the size, the device and its free/total
   *         memory when the memory is not available.
   * @throws gpumem::cuda_error when the runtime fails otherwise.
   */
  void* do_allocate(std::size_t bytes, cuda_stream_view stream) override;
  /** @brief cudaFree(ptr), which waits for the device's work first. Never throws. */
  void do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept override;
  /** @return true when `other` is a managed_memory_resource. */
  [[nodiscard]] bool do_is_equal(device_memory_resource const& other) const noexcept override;
};

#ifdef GPUMEM_HAS_CUDA_MR
static_assert(cuda::mr::async_resource_with<managed_memory_resource, cuda::mr::device_accessible,
                                            cuda::mr::host_accessible>);
#endif

}  // namespace gpumem::mr
