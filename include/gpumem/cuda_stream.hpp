/**
 * @file cuda_stream.hpp
 * An owning CUDA stream: created on construction, destroyed on destruction. Movable, not copyable.
 */
#pragma once

#include <gpumem/cuda_device_id.hpp>
#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/export.hpp>

#include <cuda_runtime_api.h>

#include <utility>

namespace gpumem {

/**
 * @brief An owning stream on the device that was current when it was created.
 * Thread-safety: the object is not synchronised; the stream itself may be used from any thread.
 * Stream-ordering: destruction does not wait for the stream's work, but that work still completes
 * (CUDA's rule; the host backend waits for it in the destroying thread).
 */
class GPUMEM_EXPORT cuda_stream {
 public:
  /** @brief Whether the stream synchronises implicitly with the legacy default stream. */
  enum class flags : unsigned {
    sync_default = cudaStreamDefault,     ///< blocking: waits for / is waited on by the legacy default stream
    non_blocking = cudaStreamNonBlocking  ///< no implicit synchronisation with the legacy default stream
  };

  /**
   * @brief Creates a stream on the current device.
   * @param priority CUDA's convention: lower numbers are higher priorities; values outside
   *        stream_priority_range() are clamped into it, as CUDA does.
   * @throws gpumem::cuda_error if the stream cannot be created.
   */
  explicit cuda_stream(flags stream_flags = flags::sync_default, int priority = 0);
  ~cuda_stream() noexcept;
  cuda_stream(cuda_stream&& other) noexcept;
  cuda_stream& operator=(cuda_stream&& other) noexcept;
  cuda_stream(cuda_stream const&) = delete;
  cuda_stream& operator=(cuda_stream const&) = delete;

  /** @return false only for a moved-from stream. */
  [[nodiscard]] bool is_valid() const noexcept { return stream_ != nullptr; }
  /** @pre is_valid() */
  [[nodiscard]] cudaStream_t value() const noexcept { return stream_; }
  [[nodiscard]] cuda_stream_view view() const noexcept { return cuda_stream_view{stream_}; }
  operator cuda_stream_view() const noexcept { return view(); }  // NOLINT: used where views are taken
  /** @brief The handle, for CUDA calls (explicit, as RMM's: an owning stream does not decay silently). */
  explicit operator cudaStream_t() const noexcept { return stream_; }
#ifdef GPUMEM_HAS_CUDA_STREAM_REF
  /** @brief A CCCL stream reference to the stream (for cuda::mr resources and CCCL algorithms). */
  operator cuda::stream_ref() const noexcept { return cuda::stream_ref{stream_}; }  // NOLINT: as RMM's
#endif
  [[nodiscard]] cuda_device_id device() const noexcept { return device_; }
  [[nodiscard]] flags get_flags() const;
  [[nodiscard]] int priority() const;

  /** @brief Blocks until all work on the stream has completed. @throws cuda_error */
  void synchronize() const;
  /**
   * @brief As synchronize(), but a failure (or a moved-from stream) is reported by the return value, not
   * thrown: for destructors and other paths that must not throw. RMM's returns nothing; the result may be
   * ignored.
   * @return true when the stream's work completed without error.
   */
  bool synchronize_no_throw() const noexcept;
  /** @return true when all work submitted so far has completed. */
  [[nodiscard]] bool is_idle() const;

  /** @return {least, greatest} priority of the current device (numerically, greatest <= least). */
  [[nodiscard]] static std::pair<int, int> priority_range();

  /**
   * @brief Streams compare by handle, with each other, with views and with raw handles (as RMM's, through
   * the view). A moved-from stream equals the legacy default stream's view (handle 0).
   */
  friend bool operator==(cuda_stream const& a, cuda_stream_view b) noexcept { return a.view() == b; }

 private:
  void destroy() noexcept;

  cudaStream_t stream_{};
  cuda_device_id device_{0};
};

}  // namespace gpumem
