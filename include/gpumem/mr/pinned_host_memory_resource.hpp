/**
 * @file pinned_host_memory_resource.hpp
 * A resource over page-locked (pinned) host memory: cudaMallocHost / cudaFreeHost through the backend.
 * Pinned memory is what makes host<->device copies truly asynchronous; it is host memory that the device
 * can also read and write.
 */
#pragma once

#include <gpumem/export.hpp>
#include <gpumem/mr/backend_memory_resource.hpp>
#include <gpumem/mr/device_memory_resource.hpp>

namespace gpumem::mr {

/**
 * @brief A device_memory_resource (so it plugs into everything that takes one) that allocates page-locked
 * host memory with cudaMallocHost and frees it with cudaFreeHost: backend_memory_resource for
 * memory_kind::pinned_host, whose header states the cost, thread safety, stream ordering (cudaFreeHost
 * waits for the device's work first) and equality (any two pinned_host_memory_resource objects compare
 * equal). Its out-of-memory message names "pinned_host_memory_resource" and says that the host's physical
 * memory is the limit (the message's free/total figures are the current device's).
 *
 * The memory is host- and device-accessible (CCCL properties host_accessible and device_accessible).
 * Pinning is expensive and takes physical memory away from the operating system: allocate few, large
 * blocks (or put a pool on top).
 */
class GPUMEM_EXPORT pinned_host_memory_resource final : public backend_memory_resource {
 public:
  pinned_host_memory_resource() noexcept : backend_memory_resource{memory_kind::pinned_host} {}

#ifdef GPUMEM_HAS_CUDA_MR
  /** @brief CCCL property: pinned memory is host memory (device_accessible is inherited). */
  friend void get_property(pinned_host_memory_resource const&, cuda::mr::host_accessible) noexcept {}
#endif
};

#ifdef GPUMEM_HAS_CUDA_MR
static_assert(cuda::mr::async_resource_with<pinned_host_memory_resource, cuda::mr::device_accessible,
                                            cuda::mr::host_accessible>);
#endif

}  // namespace gpumem::mr
