/**
 * @file system_memory_resource.hpp
 * A device resource over the system allocator (RMM's system_memory_resource): plain pageable host memory,
 * which a device can use directly where it can access pageable memory (HMM, or ATS on Grace Hopper):
 * cudaDevAttrPageableMemoryAccess. The device migrates or maps the pages it touches; nothing is reserved
 * on the device.
 */
#pragma once

#include <gpumem/cuda_device_id.hpp>
#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/export.hpp>
#include <gpumem/mr/device_memory_resource.hpp>

#include <cstddef>

namespace gpumem::mr {

/**
 * @brief Allocates with the global aligned `::operator new` (256-byte aligned) and frees with
 * `::operator delete`, for a device that can access pageable host memory.
 *
 * Host backend: its devices' memory is host memory, which every emulated device accesses, so the resource is
 * supported there and hands out the same system memory (it is not counted against the emulated device's
 * capacity, as system memory is not device memory on a GPU either).
 *
 * Cost: one ::operator new per allocate; deallocate synchronises its stream, then one ::operator delete.
 * Thread-safety: all members may be called concurrently (no state besides the device).
 * Stream-ordering: allocate returns memory usable at once (the system allocator does not order on streams);
 * deallocate waits for `stream` to finish its work before freeing, since the memory is reused by the system
 * allocator at once. A failed wait is reported on stderr and the memory is not freed (leaked, never reused
 * while work may still touch it).
 * Equality: every system_memory_resource equals every other (they share the system allocator).
 */
class GPUMEM_EXPORT system_memory_resource final : public device_memory_resource {
 public:
  /**
   * @brief A resource for the current device.
   * @throws gpumem::cuda_error (cudaErrorNotSupported) naming the device when it cannot access pageable
   *         host memory (cudaDevAttrPageableMemoryAccess is 0: no HMM or ATS).
   */
  system_memory_resource();

  /** @return the device the resource was made for. */
  [[nodiscard]] cuda_device_id device() const noexcept { return device_; }

#ifdef GPUMEM_HAS_CUDA_MR
  /** @brief CCCL property: system memory is host memory (device_accessible is inherited). */
  friend void get_property(system_memory_resource const&, cuda::mr::host_accessible) noexcept {}
#endif

 private:
  /** @throws gpumem::out_of_memory when the system allocator has not the memory, or the request exceeds the
   *  system's physical memory (the message names the size and the system's free and total memory). */
  void* do_allocate(std::size_t bytes, cuda_stream_view stream) override;
  void do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept override;
  [[nodiscard]] bool do_is_equal(device_memory_resource const& other) const noexcept override;

  cuda_device_id device_;
};

#ifdef GPUMEM_HAS_CUDA_MR
static_assert(cuda::mr::async_resource_with<system_memory_resource, cuda::mr::device_accessible,
                                            cuda::mr::host_accessible>);
#endif

/**
 * @return whether `device` can access pageable host memory, so that system_memory_resource works there
 * (RMM's is_system_memory_supported). True for every device of the host backend.
 * @throws gpumem::cuda_error for an invalid device.
 */
[[nodiscard]] GPUMEM_EXPORT bool is_system_memory_supported(cuda_device_id device);

}  // namespace gpumem::mr
