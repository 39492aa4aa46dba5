/**
 * @file graph.hpp
 * A CUDA graph made by stream capture: begin capture on a stream, issue work, end capture, then launch
 * the instantiated graph as often as wanted. Under the host backend the captured stream-ordered calls
 * (copies, fills, host functions, event records and waits) are replayed on launch.
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

}  // namespace gpumem
