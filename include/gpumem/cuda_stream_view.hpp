/**
 * @file cuda_stream_view.hpp
 * A non-owning view of a CUDA stream, and the three predefined default-stream values.
 */
#pragma once

#include <gpumem/export.hpp>

#include <cuda_runtime_api.h>

#if __has_include(<cuda/stream_ref>)
#include <cuda/stream_ref>
#define GPUMEM_HAS_CUDA_STREAM_REF 1
#endif

#include <cstdint>
#include <iosfwd>

namespace gpumem {

/**
 * @brief A non-owning, trivially copyable view of a `cudaStream_t`.
 * The default-constructed view is the legacy default stream (handle 0), which implicitly synchronises
 * with every blocking stream of its device.
 * Thread-safety: a view is a value; the stream it names follows CUDA's rules.
 */
class cuda_stream_view {
 public:
  constexpr cuda_stream_view() noexcept = default;
  constexpr cuda_stream_view(cudaStream_t stream) noexcept : stream_{stream} {}  // NOLINT: implicit by design
  cuda_stream_view(int) = delete;             // 0 is ambiguous: say cuda_stream_default
  cuda_stream_view(std::nullptr_t) = delete;  // likewise
#ifdef GPUMEM_HAS_CUDA_STREAM_REF
  constexpr cuda_stream_view(cuda::stream_ref ref) noexcept : stream_{ref.get()} {}  // NOLINT
  constexpr operator cuda::stream_ref() const noexcept { return cuda::stream_ref{stream_}; }  // NOLINT
#endif

  [[nodiscard]] constexpr cudaStream_t value() const noexcept { return stream_; }
  constexpr operator cudaStream_t() const noexcept { return stream_; }  // NOLINT: interop with CUDA calls

  /** @return true for the legacy default stream (0 or cudaStreamLegacy). */
  [[nodiscard]] bool is_default() const noexcept { return stream_ == nullptr || stream_ == cudaStreamLegacy; }
  /** @return true for the per-thread default stream (cudaStreamPerThread). */
  [[nodiscard]] bool is_per_thread_default() const noexcept { return stream_ == cudaStreamPerThread; }

  /** @brief Blocks until all work on the stream has completed. @throws cuda_error */
  GPUMEM_EXPORT void synchronize() const;
  /**
   * @brief As synchronize(), but reports failure by return value. RMM's returns nothing, so the result may be
   * ignored. @return true on success.
   */
  GPUMEM_EXPORT bool synchronize_no_throw() const noexcept;
  /** @return true when all work submitted so far has completed. @throws cuda_error */
  [[nodiscard]] GPUMEM_EXPORT bool is_idle() const;
  /** @return the stream's priority (lower numbers are higher priorities). @throws cuda_error */
  [[nodiscard]] GPUMEM_EXPORT int priority() const;
  /** @return the stream's creation flags (cudaStreamDefault or cudaStreamNonBlocking). @throws cuda_error */
  [[nodiscard]] GPUMEM_EXPORT unsigned flags() const;
  /** @return true while the stream's work is captured into a graph (cudaStreamIsCapturing). @throws cuda_error */
  [[nodiscard]] GPUMEM_EXPORT bool is_capturing() const;
  /**
   * @brief Enqueues `fn(user_data)` on the stream (cudaLaunchHostFunc).
   * Stream-ordering: `fn` runs on another thread (CUDA's callback thread, or the host backend's stream worker)
   * once all work submitted to the stream before it has completed; work submitted after it waits for it to
   * return. On a capturing stream it becomes a node of the graph and runs at every launch instead.
   * @pre `fn` does not throw and calls neither CUDA nor gpumem (CUDA forbids it; it may deadlock).
   * @throws logic_error if `fn` is null; cuda_error if it cannot be enqueued (`fn` then never runs).
   */
  GPUMEM_EXPORT void launch_host_func(void (*fn)(void*), void* user_data) const;

  friend bool operator==(cuda_stream_view a, cuda_stream_view b) noexcept { return a.stream_ == b.stream_; }

 private:
  cudaStream_t stream_{};
};

/** @brief The legacy default stream (handle 0). */
inline cuda_stream_view const cuda_stream_default{};
/** @brief The legacy default stream named explicitly (cudaStreamLegacy). */
inline cuda_stream_view const cuda_stream_legacy{cudaStreamLegacy};
/** @brief The calling thread's default stream (cudaStreamPerThread). */
inline cuda_stream_view const cuda_stream_per_thread{cudaStreamPerThread};

/** @brief Prints the stream handle as a pointer. */
GPUMEM_EXPORT std::ostream& operator<<(std::ostream& os, cuda_stream_view stream);

}  // namespace gpumem
