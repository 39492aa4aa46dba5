// One stream capture of the host backend (CUDA's "capture graph"): the stream-ordered operations captured so
// far, as the nodes of a graph; the streams that take part in it (the origin stream that began it, and every
// stream that joined by waiting on an event recorded in it); and, for each of those, the nodes its next
// operation will depend on (CUDA programming guide, "Stream Capture", "Cross-stream Dependencies and Events").
//
// - capture(): an operation on a member becomes a node that depends on the member's position, and the
//   member's position becomes that node.
// - position(): what an event recorded on a member stands for (a "captured event").
// - join(): a stream that waits on a captured event joins the capture (or, if a member already, adds the
//   event's nodes to its position): this is how a capture forks onto another stream and joins back.
// - invalidate(): an illegal call during the capture; ending it then fails.
// - end(): every member leaves capture mode; the graph is complete ("joined") only if every node leads to
//   the origin stream's position, i.e. every fork was joined back to the origin stream.
//
// Invariant: a node depends only on nodes captured before it (each dependency index < the node's index), so
// capture order is a topological order of the graph.
// A capture is over once end() ran or its origin stream no longer exists (nobody can end it then).
// Thread-safety: every member function may be called from any thread.
#pragma once

#include "stream_queue.hpp"

#include <gpumem/backend/backend.hpp>
#include <gpumem/detail/thread_annotations.hpp>

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace gpumem::detail::host {

class capture_sequence : public std::enable_shared_from_this<capture_sequence> {
 public:
  using node_set = std::vector<std::size_t>;  ///< node indices, ascending, no duplicates

  struct node {
    stream_queue::operation work;
    node_set dependencies;
  };

  /// What end() found.
  struct outcome {
    std::vector<node> nodes;
    std::string invalidated_by;  ///< why the capture was invalidated; empty if it was not
    bool joined{};               ///< every node leads to the origin stream's position
  };

  /// How a call on a member went.
  enum class result { done, invalidated, over };

  /// Begins a capture on `origin` from the calling thread. Call through make(): members need shared_from_this.
  [[nodiscard]] static std::shared_ptr<capture_sequence> make(std::shared_ptr<stream_queue> const& origin,
                                                              capture_mode mode);

  [[nodiscard]] capture_mode mode() const noexcept { return mode_; }
  [[nodiscard]] std::thread::id thread() const noexcept { return thread_; }
  [[nodiscard]] bool is_origin(stream_queue const& stream) const noexcept { return &stream == origin_raw_; }

  /// true once end() ran or the origin stream is gone: the streams are out of capture mode.
  [[nodiscard]] bool over();
  /// true while the capture is not over and an illegal call has invalidated it.
  [[nodiscard]] bool invalidated();
  [[nodiscard]] std::string invalidated_by();
  /// Marks the capture invalid; the first reason is kept. Nothing happens once it is over.
  void invalidate(std::string const& reason);

  /// Appends `work` as a node of member `stream`.
  [[nodiscard]] result capture(stream_queue const& stream, stream_queue::operation work);
  /// Sets `out` to the nodes the next operation of member `stream` depends on.
  [[nodiscard]] result position(stream_queue const& stream, node_set& out);
  /// Makes `stream`'s next node depend on `after` too; a stream not yet a member joins the capture.
  [[nodiscard]] result join(std::shared_ptr<stream_queue> const& stream, node_set const& after);

  /// true if a member (a blocking member, with `blocking_only`) runs on `device`.
  [[nodiscard]] bool involves(int device, bool blocking_only);

  /// Ends the capture and takes every member out of capture mode. @pre !over()
  [[nodiscard]] outcome end();

 private:
  struct member {
    std::weak_ptr<stream_queue> stream;
    node_set next;  // the dependencies of the member's next node
    int device;
    bool blocking;
  };

  capture_sequence(std::shared_ptr<stream_queue> const& origin, capture_mode mode);

  bool over_locked() const GPUMEM_REQUIRES(mutex_);
  bool all_lead_to_origin() const GPUMEM_REQUIRES(mutex_);

  capture_mode const mode_;
  std::thread::id const thread_;
  std::weak_ptr<stream_queue> const origin_;
  stream_queue const* const origin_raw_;  // identity only: never dereferenced

  mutable gpumem::detail::mutex mutex_;
  std::vector<node> nodes_ GPUMEM_GUARDED_BY(mutex_);
  std::unordered_map<stream_queue const*, member> members_ GPUMEM_GUARDED_BY(mutex_);  // keys: identity only
  std::string invalidated_by_ GPUMEM_GUARDED_BY(mutex_);
  bool ended_ GPUMEM_GUARDED_BY(mutex_){false};
};

/// An event record made on a capturing stream (a "captured event"): it stands for `position` in `capture`.
struct captured_record {
  std::weak_ptr<capture_sequence> capture;
  capture_sequence::node_set position;
};

}  // namespace gpumem::detail::host
