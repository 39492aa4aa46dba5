/**
 * @file cuda_async_managed_memory_resource.hpp
 * A resource that allocates managed memory stream-ordered, from the device's default managed memory pool
 * (cudaMemGetDefaultMemPool with cudaMemAllocationTypeManaged + cudaMallocFromPoolAsync / cudaFreeAsync,
 * CUDA 13), as RMM's cuda_async_managed_memory_resource.
 */
#pragma once

#include <gpumem/cuda_device_id.hpp>
#include <gpumem/export.hpp>
#include <gpumem/mr/cuda_async_view_memory_resource.hpp>

#include <cuda_runtime_api.h>

namespace gpumem::mr {

/**
 * @brief Stream-ordered managed memory: accessible from the host and every device, migrated on demand (or by
 * prefetch()), and reused by the driver's pool with CUDA's stream-ordered rules.
 *
 * Uses the default managed pool of the device that is current at construction; the pool belongs to the
 * driver, so its properties (the release threshold) are left as they are, and every such resource of one
 * device shares it.
 * Under the host backend the pool is emulated with the same reuse rules, and its memory counts as managed
 * (prefetch() accepts it).
 *
 * Thread-safety: all members may be called concurrently.
 * Stream-ordering: as cuda_async_view_memory_resource: memory freed on stream S is reused at once on S and
 * on other streams once the free has completed; no call synchronises a stream or the device.
 * Equality: equal to any resource over the same pool (another cuda_async_managed_memory_resource of the same
 * device, or a cuda_async_view_memory_resource of default_managed_memory_pool()).
 */
class GPUMEM_EXPORT cuda_async_managed_memory_resource final : public cuda_async_view_memory_resource {
 public:
  /**
   * @throws gpumem::cuda_error (cudaErrorNotSupported) naming what is missing where the runtime or the driver
   *         is older than CUDA 13.0 or the device has no concurrent managed access.
   */
  cuda_async_managed_memory_resource();

 protected:
  [[nodiscard]] char const* name() const noexcept override { return "cuda_async_managed_memory_resource"; }
};

/**
 * @brief The default managed memory pool of `device` (the one cuda_async_managed_memory_resource uses).
 * Owned by the driver: never destroy it.
 * @throws gpumem::logic_error if `device` is not a valid device ordinal.
 * @throws gpumem::cuda_error (cudaErrorNotSupported) as cuda_async_managed_memory_resource's constructor.
 */
[[nodiscard]] GPUMEM_EXPORT cudaMemPool_t default_managed_memory_pool(cuda_device_id device);

}  // namespace gpumem::mr
