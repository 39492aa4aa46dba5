/**
 * @file managed_memory_resource.hpp
 * A device resource over managed (unified) memory: cudaMallocManaged / cudaFree through the backend. The
 * memory is usable from the host and from every device; the driver migrates pages on demand.
 */
#pragma once

#include <gpumem/export.hpp>
#include <gpumem/mr/backend_memory_resource.hpp>
#include <gpumem/mr/device_memory_resource.hpp>

namespace gpumem::mr {

/**
 * @brief A device_memory_resource that allocates managed memory (cudaMallocManaged with
 * cudaMemAttachGlobal, accounted to the current device) and frees it with cudaFree:
 * backend_memory_resource for memory_kind::managed, whose header states the cost, thread safety, stream
 * ordering and equality (any two managed_memory_resource objects compare equal). Its out-of-memory message
 * names "managed_memory_resource".
 *
 * The memory is host- and device-accessible (CCCL properties host_accessible and device_accessible).
 * Beware of oversubscription: on some systems a cudaMallocManaged larger than the free device memory does
 * not fail at once but pages until the GPU stalls; size requests against get_backend().mem_info().
 */
class GPUMEM_EXPORT managed_memory_resource final : public backend_memory_resource {
 public:
  managed_memory_resource() noexcept : backend_memory_resource{memory_kind::managed} {}

#ifdef GPUMEM_HAS_CUDA_MR
  /** @brief CCCL property: managed memory is accessible from the host (device_accessible is inherited). */
  friend void get_property(managed_memory_resource const&, cuda::mr::host_accessible) noexcept {}
#endif
};

#ifdef GPUMEM_HAS_CUDA_MR
static_assert(cuda::mr::async_resource_with<managed_memory_resource, cuda::mr::device_accessible,
                                            cuda::mr::host_accessible>);
#endif

}  // namespace gpumem::mr
