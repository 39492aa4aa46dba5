/**
 * @file prefetch_resource_adaptor.hpp
 * An adaptor that prefetches every new allocation to the current device on the allocating stream (RMM's
 * prefetch_resource_adaptor), so that managed memory is resident before the first kernel touches it
 * instead of faulting its pages in one by one.
 */
#pragma once

#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/export.hpp>
#include <gpumem/mr/device_memory_resource.hpp>
#include <gpumem/mr/resource_adaptor_base.hpp>

#include <cstddef>

namespace gpumem::mr {

/**
 * @brief Forwards to an upstream resource, and after each allocation enqueues a prefetch of the whole
 * allocation to the calling thread's current device on the allocation's stream.
 *
 * Memory that can migrate (managed memory: managed_memory_resource, cuda_async_managed_memory_resource, a
 * pool over either; pageable memory where the device accesses it) is prefetched; any other memory (a pool
 * over cudaMalloc) is handed out unprefetched, as RMM does, so the adaptor may wrap any resource. Whether
 * the memory can migrate is asked of the backend for each allocation (cudaPointerGetAttributes on a GPU).
 * On the host backend the prefetch of managed memory is an empty stream-ordered operation that checks its
 * arguments.
 *
 * Cost: the upstream's allocation, a pointer-attribute query and, for memory that can migrate, one
 * cudaMemPrefetchAsync.
 *
 * Thread-safety: as the upstream's (the adaptor has no state of its own).
 * Stream-ordering: the prefetch is ordered on the allocation's stream, before any work the caller then
 * submits to it; deallocation is the upstream's.
 * Equality: equal to another prefetch_resource_adaptor whose upstream is equal to this one's.
 */
class GPUMEM_EXPORT prefetch_resource_adaptor final : public resource_adaptor_base {
 public:
  /** @throws gpumem::logic_error if `upstream` is null. */
  explicit prefetch_resource_adaptor(device_memory_resource* upstream);

 private:
  /**
   * @throws what the upstream throws; gpumem::cuda_error if the prefetch cannot be enqueued (the
   *         allocation is then given back first).
   */
  void* do_allocate(std::size_t bytes, cuda_stream_view stream) override;
};

}  // namespace gpumem::mr
