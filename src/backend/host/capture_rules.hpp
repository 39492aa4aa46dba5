// CUDA's rules for calls that meet a stream capture, as the host backend applies them (CUDA programming
// guide, "Stream Capture": "Cross-stream Dependencies and Events", "Prohibited and Unhandled Operations",
// "Invalidation"; cudaStreamCaptureMode; cudaStreamBeginCapture, cudaStreamEndCapture, cudaStreamIsCapturing).
//
// A refused call throws the cuda_error that CUDA returns and invalidates the captures it meets, so that
// ending them fails with cudaErrorStreamCaptureInvalidated. Which captures a call meets:
// - work, event records and waits, synchronisation and queries on a stream: that stream's capture;
// - any use of the legacy default stream: every capture with a blocking stream on its device (the legacy
//   stream implicitly depends on those streams), whatever the mode and the calling thread;
// - a device-wide synchronisation: every capture with a stream on that device, whatever the mode;
// - a potentially unsafe call (cudaMalloc, cudaFree, synchronising or querying a stream that is not
//   capturing or an event not recorded in a capture, as CUDA refuses on a GPU): the calling thread's own captures not begun in relaxed mode, and
//   other threads' captures begun in global mode. Every thread is in CUDA's default (global)
//   thread mode: cudaThreadExchangeStreamCaptureMode is not offered.
// Thread-safety: every member function may be called from any thread.
#pragma once

#include "capture_sequence.hpp"
#include "stream_queue.hpp"

#include <gpumem/backend/backend.hpp>

#include <cuda_runtime_api.h>

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

namespace gpumem::detail::host {

class capture_rules {
 public:
  // ---- beginning and ending a capture -----------------------------------------------------------------
  /// stream_begin_capture. @throws cuda_error as cudaStreamBeginCapture (legacy stream, already capturing).
  void begin(std::shared_ptr<stream_queue> const& origin, capture_mode mode);
  /// stream_end_capture: every stream of the capture leaves capture mode. @return the captured graph's nodes.
  /// @throws cuda_error as cudaStreamEndCapture (not capturing, not the origin stream, wrong thread,
  ///         invalidated, a fork not joined back).
  [[nodiscard]] std::vector<capture_sequence::node> end(stream_queue& origin);
  /// stream_is_capturing: true while `stream` takes part in a capture that has not been invalidated.
  /// @throws cuda_error (cudaErrorStreamCaptureImplicit) for the legacy stream while a blocking stream of its
  ///         device is capturing; that capture stays valid.
  [[nodiscard]] bool is_capturing(stream_queue& stream);

  // ---- calls on one stream ----------------------------------------------------------------------------
  /// Stream-ordered `work` on `stream`. @return true when it became a node of the stream's capture; false
  /// when the stream is not capturing (the caller runs it).
  [[nodiscard]] bool capture_work(stream_queue& stream, stream_queue::operation const& work, char const* call);
  /// event_record on `stream`: the record a capturing stream makes (a captured event); nullopt when the
  /// stream is not capturing (the caller records for real).
  [[nodiscard]] std::optional<captured_record> capture_event_record(stream_queue& stream);
  /// stream_wait_event on an event whose latest record is `captured` (nullopt: recorded outside any capture,
  /// or never). @return true when the wait was a fork or join of a capture; false when the caller waits for
  /// real. @throws cuda_error where CUDA refuses the wait.
  [[nodiscard]] bool wait_event(std::shared_ptr<stream_queue> const& stream,
                                std::optional<captured_record> const& captured);
  /// A call that CUDA refuses on a capturing stream (`code`, `why` added to the message), or on the legacy
  /// stream while a blocking stream of its device is capturing.
  void refuse_if_capturing(stream_queue& stream, char const* call, cudaError_t code, char const* why = "");
  /// Querying, synchronising or timing an event whose latest record is `captured`: cudaErrorCapturedEvent
  /// while its capture is in progress (which invalidates it), cudaErrorInvalidValue once it has ended.
  [[noreturn]] static void refuse_captured_event(captured_record const& captured, char const* call);

  // ---- calls beyond one stream ------------------------------------------------------------------------
  /// Any use of `stream` when it is the legacy default stream.
  void check_legacy_use(stream_queue const& stream, char const* call);
  void check_device_synchronize(int device);
  /// A potentially unsafe call (cudaMalloc, cudaFree).
  void check_unsafe_call(char const* call);

 private:
  using captures = std::vector<std::shared_ptr<capture_sequence>>;

  /// The capture `stream` takes part in, or null when it is not in capture mode.
  [[nodiscard]] static std::shared_ptr<capture_sequence> active(stream_queue& stream);
  /// Invalidates `affected`, then throws `code`.
  [[noreturn]] static void refuse(captures const& affected, cudaError_t code, std::string const& what);
  /// Throws cudaErrorStreamCaptureInvalidated unless `result` is done.
  static void expect_done(capture_sequence& capture, capture_sequence::result result, char const* call);
  /// The live captures for which `meets` holds; drops those that are over.
  [[nodiscard]] captures select(std::function<bool(capture_sequence&)> const& meets);

  std::mutex mutex_;
  captures live_;  // guarded by mutex_: every capture begun and not found over yet
};

}  // namespace gpumem::detail::host
