// The host backend's graphs: what stream_end_capture returns (cudaGraph_t) and what graph_instantiate makes
// of it (cudaGraphExec_t).
//
// An executable graph runs its nodes one at a time on the launch stream, in a topological order of the
// graph: every dependency captured across streams is kept, and the launch as a whole is ordered on the
// launch stream like any other work. Among the nodes ready to run, the one captured last goes first: a graph
// that lacks a join (two branches touching the same data with no dependency between them) then tends to
// give a wrong result on the CPU too, rather than a right one by the luck of capture order.
#pragma once

#include "capture_sequence.hpp"
#include "stream_queue.hpp"

#include <cstddef>
#include <vector>

namespace gpumem::detail::host {

struct host_graph {
  std::vector<capture_sequence::node> nodes;  // in capture order
};

struct host_graph_exec {
  std::vector<stream_queue::operation> work;  // in the order a launch runs them
};

/// The order in which an executable graph runs `nodes` (see the file comment).
/// @pre every dependency of a node has a smaller index than the node
[[nodiscard]] std::vector<std::size_t> replay_order(std::vector<capture_sequence::node> const& nodes);

/// The executable form of `graph`.
[[nodiscard]] host_graph_exec instantiate(host_graph const& graph);

}  // namespace gpumem::detail::host
