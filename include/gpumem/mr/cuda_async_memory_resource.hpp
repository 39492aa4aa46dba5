/**
 * @file cuda_async_memory_resource.hpp
 * A device resource that owns a stream-ordered memory pool of its own (cudaMemPoolCreate +
 * cudaMallocFromPoolAsync / cudaFreeAsync): the driver's sub-allocator, with CUDA's stream-ordered reuse.
 */
#pragma once

#include <gpumem/export.hpp>
#include <gpumem/mr/cuda_async_view_memory_resource.hpp>

#include <cstddef>
#include <optional>

namespace gpumem::mr {

/**
 * @brief Owns a memory pool on the device that is current at construction.
 * Thread-safety: all members may be called concurrently.
 * Stream-ordering: as cuda_async_view_memory_resource: memory freed on stream S is reused at once on S and
 * on other streams once the free has completed; no call synchronises a stream or the device.
 * Under the host backend the pool is emulated with the same reuse rules.
 */
class GPUMEM_EXPORT cuda_async_memory_resource final : public cuda_async_view_memory_resource {
 public:
  /** @brief Whether the pool's memory can be exported to other processes. */
  enum class allocation_handle_type { none, posix_file_descriptor, fabric };

  /**
   * @param initial_pool_size bytes to reserve at construction (allocated once and freed, so the pool keeps
   *        them cached); default none.
   * @param release_threshold bytes the pool keeps cached at synchronisation points; default: all of them
   *        (UINT64_MAX), so freed memory is reused instead of returned to the device.
   * @param export_handle_type sharing with other processes; default none.
   * @param maximum_pool_size a cap on the pool's reserved bytes (not 0); default: no cap.
   * @throws gpumem::cuda_error (cudaErrorNotSupported) naming the device when it has no memory pools, or
   *         when `export_handle_type` is fabric and the device cannot export fabric handles (never on the
   *         host backend).
   * @throws gpumem::logic_error if initial_pool_size overflows when rounded up to 256, maximum_pool_size is 0,
   *         or initial_pool_size exceeds maximum_pool_size (each naming the option and its value).
   * @throws gpumem::out_of_memory if the initial size cannot be reserved.
   */
  explicit cuda_async_memory_resource(std::optional<std::size_t> initial_pool_size = std::nullopt,
                                      std::optional<std::size_t> release_threshold = std::nullopt,
                                      std::optional<allocation_handle_type> export_handle_type = std::nullopt,
                                      std::optional<std::size_t> maximum_pool_size = std::nullopt);
  ~cuda_async_memory_resource() override;
  cuda_async_memory_resource(cuda_async_memory_resource const&) = delete;
  cuda_async_memory_resource& operator=(cuda_async_memory_resource const&) = delete;

 protected:
  [[nodiscard]] char const* name() const noexcept override { return "cuda_async_memory_resource"; }
  /**
   * @brief As the view's, for a pool made with export_handle_type posix_file_descriptor.
   * @throws gpumem::logic_error naming the option for a pool made without it (no driver call).
   */
  [[nodiscard]] shareable_memory do_shareable(void const* ptr, std::size_t bytes) const override;

 private:
  std::optional<allocation_handle_type> export_handle_type_;
};

}  // namespace gpumem::mr
