/**
 * @file cuda_stream_pool.hpp
 * A fixed set of streams handed out round-robin, for spreading independent work over streams without
 * creating one per task.
 */
#pragma once

#include <gpumem/cuda_stream.hpp>
#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/export.hpp>

#include <atomic>
#include <cstddef>
#include <vector>

namespace gpumem {

/**
 * @brief Owns `size` streams of the current device and returns views of them in turn.
 * Thread-safety: get_stream() may be called concurrently (an atomic counter picks the stream).
 */
class GPUMEM_EXPORT cuda_stream_pool {
 public:
  static constexpr std::size_t default_size = 16;

  /**
   * @throws gpumem::logic_error if `size` is 0.
   * @throws gpumem::cuda_error if a stream cannot be created.
   */
  explicit cuda_stream_pool(std::size_t size = default_size,
                            cuda_stream::flags flags = cuda_stream::flags::sync_default);
  cuda_stream_pool(cuda_stream_pool const&) = delete;
  cuda_stream_pool& operator=(cuda_stream_pool const&) = delete;

  /** @return the next stream, round-robin. */
  [[nodiscard]] cuda_stream_view get_stream() noexcept;
  /** @return stream `index % get_pool_size()` (deterministic choice). */
  [[nodiscard]] cuda_stream_view get_stream(std::size_t index) const noexcept;
  [[nodiscard]] std::size_t get_pool_size() const noexcept { return streams_.size(); }

 private:
  std::vector<cuda_stream> streams_;
  std::atomic<std::size_t> next_{0};
};

}  // namespace gpumem
