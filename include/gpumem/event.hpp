/**
 * @file event.hpp
 * An owning CUDA event: record it on a stream, make other streams wait for it, query or wait for it
 * on the host, and measure the time between two of them.
 */
#pragma once

#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/export.hpp>

#include <cuda_runtime_api.h>

namespace gpumem {

/** @brief Event creation flags; combine with |. */
enum class event_flags : unsigned {
  none = cudaEventDefault,
  blocking_sync = cudaEventBlockingSync,    ///< synchronize() sleeps instead of spinning
  disable_timing = cudaEventDisableTiming,  ///< cheaper; elapsed_time() is not available
  interprocess = cudaEventInterprocess,     ///< shareable between processes; requires disable_timing
};

[[nodiscard]] constexpr event_flags operator|(event_flags a, event_flags b) noexcept
{
  return static_cast<event_flags>(static_cast<unsigned>(a) | static_cast<unsigned>(b));
}
[[nodiscard]] constexpr bool has_flag(event_flags set, event_flags flag) noexcept
{
  return (static_cast<unsigned>(set) & static_cast<unsigned>(flag)) != 0;
}

/**
 * @brief An owning event. Movable, not copyable.
 * Thread-safety: the object is not synchronised; the event itself may be used from any thread.
 * Stream-ordering: record() marks the point in a stream's work reached so far; wait() makes later work
 * of another stream start only after that point; query()/synchronize() observe it from the host.
 */
class GPUMEM_EXPORT event {
 public:
  /**
   * @throws gpumem::logic_error if `flags` has interprocess without disable_timing.
   * @throws gpumem::cuda_error if the event cannot be created.
   */
  explicit event(event_flags flags = event_flags::none);
  ~event() noexcept;
  event(event&& other) noexcept;
  event& operator=(event&& other) noexcept;
  event(event const&) = delete;
  event& operator=(event const&) = delete;

  /** @brief Records the event at the current end of `stream`'s work (replacing an earlier record). */
  void record(cuda_stream_view stream = cuda_stream_view{});
  /** @brief Makes later work on `stream` wait for this event's latest record. No-op if never recorded. */
  void wait(cuda_stream_view stream) const;
  /** @return true when the latest record has completed, or the event was never recorded. */
  [[nodiscard]] bool query() const;
  /** @brief Blocks until the latest record has completed. */
  void synchronize() const;

  [[nodiscard]] cudaEvent_t value() const noexcept { return event_; }
  [[nodiscard]] bool is_valid() const noexcept { return event_ != nullptr; }
  [[nodiscard]] event_flags flags() const noexcept { return flags_; }

  /**
   * @brief Milliseconds from `start`'s latest record to `end`'s.
   * @pre both recorded and completed, neither created with disable_timing.
   * @throws gpumem::logic_error if either event has timing disabled.
   * @throws gpumem::cuda_error if either was never recorded (cudaErrorInvalidResourceHandle) or has not
   *         completed (cudaErrorNotReady).
   */
  [[nodiscard]] static float elapsed_time(event const& start, event const& end);

 private:
  void destroy() noexcept;
  void check_valid() const;

  cudaEvent_t event_{};
  event_flags flags_{event_flags::none};
};

/** @brief event::elapsed_time(start, end), CuPy's spelling. */
[[nodiscard]] inline float get_elapsed_time(event const& start, event const& end)
{
  return event::elapsed_time(start, end);
}

}  // namespace gpumem
