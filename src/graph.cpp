// graph (graph.hpp).
#include <gpumem/error.hpp>
#include <gpumem/graph.hpp>

#include <utility>

namespace gpumem {

graph::~graph() noexcept { reset(); }

graph::graph(graph&& other) noexcept
  : graph_{std::exchange(other.graph_, nullptr)},
    exec_{std::exchange(other.exec_, nullptr)},
    capture_stream_{std::exchange(other.capture_stream_, nullptr)},
    capturing_{std::exchange(other.capturing_, false)}
{
}

graph& graph::operator=(graph&& other) noexcept
{
  if (this != &other) {
    reset();
    graph_ = std::exchange(other.graph_, nullptr);
    exec_ = std::exchange(other.exec_, nullptr);
    capture_stream_ = std::exchange(other.capture_stream_, nullptr);
    capturing_ = std::exchange(other.capturing_, false);
  }
  return *this;
}

void graph::reset() noexcept
{
  auto& backend = detail::get_backend();
  if (capturing_) {
    try {  // abandon an unfinished capture so the stream is usable again
      backend.graph_destroy(backend.stream_end_capture(capture_stream_));
    } catch (...) {
    }
    capturing_ = false;
  }
  if (exec_ != nullptr) { backend.graph_exec_destroy(std::exchange(exec_, nullptr)); }
  if (graph_ != nullptr) { backend.graph_destroy(std::exchange(graph_, nullptr)); }
}

void graph::capture_begin(cuda_stream_view stream, capture_mode mode)
{
  expects(!capturing_, "this graph is already capturing; call capture_end() first");
  reset();
  detail::get_backend().stream_begin_capture(stream.value(), mode);
  capture_stream_ = stream.value();
  capturing_ = true;
}

void graph::capture_end()
{
  expects(capturing_, "capture_end() without capture_begin()");
  auto& backend = detail::get_backend();
  try {
    graph_ = backend.stream_end_capture(capture_stream_);
  } catch (cuda_error const&) {
    capturing_ = false;  // CUDA takes every stream of a capture out of capture mode, also when ending fails
    throw;
  }
  capturing_ = false;
  exec_ = backend.graph_instantiate(graph_);
}

void graph::launch(cuda_stream_view stream) const
{
  expects(exec_ != nullptr, "launch() of a graph that has not been captured (capture_begin/capture_end)");
  detail::get_backend().graph_launch(exec_, stream.value());
}

void discard_capture(cuda_stream_view stream)
{
  detail::backend& backend = detail::get_backend();
  backend.graph_destroy(backend.stream_end_capture(stream.value()));
}

}  // namespace gpumem
