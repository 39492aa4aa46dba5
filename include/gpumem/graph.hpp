/**
 * @file graph.hpp
 * A CUDA graph made by stream capture: begin capture on a stream, issue work, end capture, then launch
 * the instantiated graph as often as wanted.
 *
 * Capture follows CUDA's rules on both backends (CUDA programming guide, "Stream Capture"):
 * - Work on other streams joins the graph through events: record an event on a capturing stream and make
 *   another stream wait on it (a fork), and that stream's later work is captured too, after the recorded
 *   point; record an event on it and wait on it from the capturing stream (a join) before capture_end(),
 *   or capture_end() fails with cudaErrorStreamCaptureUnjoined. Launch runs the whole graph with its
 *   dependencies.
 * - A call that CUDA forbids during a capture (synchronising or querying a capturing stream, the device or
 *   an event recorded in the capture; using the legacy default stream while a blocking stream captures;
 *   cudaMalloc/cudaFree where the capture mode prohibits them; waiting on an event recorded outside the
 *   capture) throws the cuda_error CUDA gives and invalidates the capture: capture_end() then fails with
 *   cudaErrorStreamCaptureInvalidated.
 * Under the host backend a launch runs the nodes one at a time on the launch stream, in an order that keeps
 * every dependency; stream-ordered pool allocations (graph memory nodes) are not emulated there
 * (cudaErrorNotSupported).
 */
#pragma once

#include <gpumem/backend/backend.hpp>
#include <gpumem/cuda_stream_view.hpp>
#include <gpumem/export.hpp>

#include <cuda_runtime_api.h>

namespace gpumem {

/**
 * @brief An owning captured graph and its executable instance. Movable, not copyable.
 * Thread-safety: not synchronised. Stream-ordering: launch() runs the graph's work in order on `stream`.
 * Usage: `graph g; g.capture_begin(s); ...work on s...; g.capture_end(); g.launch(s);`
 */
class GPUMEM_EXPORT graph {
 public:
  graph() = default;
  ~graph() noexcept;
  graph(graph&& other) noexcept;
  graph& operator=(graph&& other) noexcept;
  graph(graph const&) = delete;
  graph& operator=(graph const&) = delete;

  /**
   * @brief Starts capturing `stream`'s work into this graph (replacing any graph it held).
   * @throws gpumem::logic_error if this graph is already capturing.
   * @throws gpumem::cuda_error if the stream cannot be captured (the legacy default stream cannot).
   */
  void capture_begin(cuda_stream_view stream, capture_mode mode = capture_mode::global);
  /**
   * @brief Ends the capture and instantiates the graph.
   * @throws gpumem::logic_error if capture_begin was not called.
   * @throws gpumem::cuda_error as cudaStreamEndCapture: cudaErrorStreamCaptureInvalidated (a forbidden call
   *         during the capture), cudaErrorStreamCaptureUnjoined (a forked stream not joined back),
   *         cudaErrorStreamCaptureWrongThread (a capture not begun in relaxed mode ended on another thread).
   *         After any failure the capture is over (as CUDA ends it) and is_capturing() is false.
   */
  void capture_end();
  /**
   * @brief Runs the graph on `stream`.
   * @throws gpumem::logic_error if the graph has not been captured.
   */
  void launch(cuda_stream_view stream) const;

  [[nodiscard]] bool is_capturing() const noexcept { return capturing_; }
  [[nodiscard]] bool is_instantiated() const noexcept { return exec_ != nullptr; }
  [[nodiscard]] cudaGraph_t value() const noexcept { return graph_; }
  [[nodiscard]] cudaGraphExec_t exec() const noexcept { return exec_; }

 private:
  void reset() noexcept;

  cudaGraph_t graph_{};
  cudaGraphExec_t exec_{};
  cudaStream_t capture_stream_{};
  bool capturing_{false};
};

/**
 * @brief Ends the capture under way on `stream` (begun by anyone) and discards its graph.
 * @throws gpumem::cuda_error as cudaStreamEndCapture: cudaErrorIllegalState when `stream` is not capturing.
 */
GPUMEM_EXPORT void discard_capture(cuda_stream_view stream);

}  // namespace gpumem
