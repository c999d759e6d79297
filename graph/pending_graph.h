// The ops recorded but not yet executed (fused and lazy modes), in order, on one device.
#pragma once

#include <atomic>
#include <mutex>
#include <optional>
#include <vector>

#include "graph/window.h"

namespace torchtpu::graph {

class PendingGraph {
 public:
  // Records `node`: its outputs become pending values produced by it.
  void append(NodePtr node);
  size_t size() const { return size_; }  // lock-free: strict mode asks on every op
  // The device of the pending nodes, if any.
  std::optional<int> device() const;
  // Takes every pending node as one window (empty when nothing is pending).
  std::vector<NodePtr> take();

 private:
  mutable std::mutex mu_;
  std::vector<NodePtr> nodes_;
  std::atomic<size_t> size_{0};
  int device_ = 0;
};

}  // namespace torchtpu::graph
