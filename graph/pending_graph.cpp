#include "graph/pending_graph.h"

namespace torchtpu::graph {

void PendingGraph::append(NodePtr node) {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t o = 0; o < node->outputs.size(); ++o)
    if (ValuePtr v = node->outputs[o].lock()) {
      v->set_producer(node.get(), o);
      device_ = v->device();
    }
  nodes_.push_back(std::move(node));
  size_ = nodes_.size();
}

std::optional<int> PendingGraph::device() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (nodes_.empty()) return std::nullopt;
  return device_;
}

std::vector<NodePtr> PendingGraph::take() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<NodePtr> taken;
  taken.swap(nodes_);
  size_ = 0;
  return taken;
}

}  // namespace torchtpu::graph
