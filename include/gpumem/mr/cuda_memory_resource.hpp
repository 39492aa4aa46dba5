/**
 * @file cuda_memory_resource.hpp
 * The simplest device resource: every allocation is a cudaMalloc, every deallocation a cudaFree (through the
 * backend, so it runs on the host backend too). The upstream that pools and arenas grow from.
 */
#pragma once

#include <gpumem/export.hpp>
#include <gpumem/mr/backend_memory_resource.hpp>
#include <gpumem/mr/device_memory_resource.hpp>

namespace gpumem::mr {

/**
 * @brief A device_memory_resource that allocates with cudaMalloc and frees with cudaFree, on the calling
 * thread's current device: backend_memory_resource for memory_kind::device, whose header states the cost,
 * thread safety, stream ordering (cudaFree waits for the device's work first) and equality (any two
 * cuda_memory_resource objects compare equal). Its out-of-memory message names "cuda_memory_resource".
 */
class GPUMEM_EXPORT cuda_memory_resource final : public backend_memory_resource {
 public:
  cuda_memory_resource() noexcept : backend_memory_resource{memory_kind::device} {}
};

#ifdef GPUMEM_HAS_CUDA_MR
static_assert(cuda::mr::async_resource_with<cuda_memory_resource, cuda::mr::device_accessible>);
#endif

}  // namespace gpumem::mr
