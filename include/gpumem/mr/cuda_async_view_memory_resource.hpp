/**
 * @file cuda_async_view_memory_resource.hpp
 * A device resource over an existing stream-ordered memory pool (cudaMallocFromPoolAsync / cudaFreeAsync)
 * that it does not own, for example the device's default pool, which plain cudaMallocAsync uses.
 */
#pragma once

#include <gpumem/backend/backend.hpp>
#include <gpumem/cuda_device_id.hpp>
#include <gpumem/export.hpp>
#include <gpumem/mr/device_memory_resource.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace gpumem::mr {

/**
 * @brief Allocates from a memory pool owned by someone else; the pool must outlive the resource.
 * Thread-safety: all members may be called concurrently (the driver's pool is thread-safe).
 * Stream-ordering: allocate and deallocate are stream-ordered by the pool itself: memory freed on stream S
 * is reused at once on S and on other streams once the free has completed. Neither call synchronises.
 * Two views compare equal when they view the same pool.
 */
class GPUMEM_EXPORT cuda_async_view_memory_resource : public device_memory_resource {
 public:
  /**
   * @param pool a pool handle (from cudaMemPoolCreate, cudaDeviceGetDefaultMemPool or
   *        default_memory_pool()).
   * @param device the device the pool allocates on (used in error messages).
   * @throws gpumem::logic_error if `pool` is null.
   */
  cuda_async_view_memory_resource(cudaMemPool_t pool, cuda_device_id device);
  /**
   * @brief As RMM's one-argument constructor: a view of `pool`, which allocates on the current device.
   * @throws gpumem::logic_error if `pool` is null.
   */
  explicit cuda_async_view_memory_resource(cudaMemPool_t pool);

  [[nodiscard]] cudaMemPool_t pool_handle() const noexcept { return pool_; }
  [[nodiscard]] cuda_device_id device() const noexcept { return device_; }
  /** @return reserved and used bytes with their high-water marks, as the pool reports them. */
  [[nodiscard]] mempool_usage usage() const;
  /**
   * @brief Returns the pool's cached memory to the device until at most `keep_bytes` stay reserved
   * (cudaMemPoolTrimTo). Memory in use stays; memory freed on a stream is cached only once the free has
   * completed, so synchronise that stream first to return it too.
   * @throws gpumem::cuda_error if the backend call fails.
   */
  void trim(std::size_t keep_bytes = 0);

 protected:
  void* do_allocate(std::size_t bytes, cuda_stream_view stream) override;
  void do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept override;
  [[nodiscard]] bool do_is_equal(device_memory_resource const& other) const noexcept override;
  /**
   * @brief The pool's file descriptor and the allocation's export data (cuda backend; the pool must have been
   * made with POSIX file descriptor handles: cuda_async_memory_resource's export_handle_type). `ptr` must be an
   * allocation's start. @throws gpumem::cuda_error naming the cause otherwise.
   */
  [[nodiscard]] shareable_memory do_shareable(void const* ptr, std::size_t bytes) const override;
  /** @brief The name used in out_of_memory messages. */
  [[nodiscard]] virtual char const* name() const noexcept { return "cuda_async_view_memory_resource"; }

 private:
  cudaMemPool_t pool_;
  cuda_device_id device_;
};

/** @brief The device's default memory pool (the one cudaMallocAsync uses). Owned by the driver. */
[[nodiscard]] GPUMEM_EXPORT cudaMemPool_t default_memory_pool(cuda_device_id device);

/** @brief Sets how many bytes `pool` may keep cached at synchronisation points (UINT64_MAX: all). */
GPUMEM_EXPORT void set_release_threshold(cudaMemPool_t pool, std::uint64_t bytes);

}  // namespace gpumem::mr
