// host_graph: see host_graph.hpp.
#include "host_graph.hpp"

#include <queue>

namespace gpumem::detail::host {

std::vector<std::size_t> replay_order(std::vector<capture_sequence::node> const& nodes)
{
  std::vector<std::size_t> unmet(nodes.size());  // dependencies of each node that have not run yet
  std::vector<std::vector<std::size_t>> dependents(nodes.size());
  std::priority_queue<std::size_t> ready;        // largest index first: the node captured last
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    unmet[i] = nodes[i].dependencies.size();
    for (std::size_t const d : nodes[i].dependencies) { dependents[d].push_back(i); }
    if (unmet[i] == 0) { ready.push(i); }
  }
  std::vector<std::size_t> order;
  order.reserve(nodes.size());
  while (!ready.empty()) {
    std::size_t const next = ready.top();
    ready.pop();
    order.push_back(next);
    for (std::size_t const d : dependents[next]) {
      if (--unmet[d] == 0) { ready.push(d); }
    }
  }
  return order;
}

host_graph_exec instantiate(host_graph const& graph)
{
  host_graph_exec exec;
  for (std::size_t const i : replay_order(graph.nodes)) { exec.work.push_back(graph.nodes[i].work); }
  return exec;
}

}  // namespace gpumem::detail::host
