// A run of pending nodes cut from the graph, to execute as one program.
#pragma once

#include <string>
#include <vector>

#include "graph/node.h"

namespace torchtpu::graph {

class Window {
 public:
  // Which node outputs the program returns: those a storage still holds (a fused window: the
  // rest are intermediates), or every one still referenced at all (a node run on its own, whose
  // outputs later nodes may read).
  enum class Keep { kHeld, kAlive };

  // `nodes` in recording order. Inputs produced by earlier nodes of the window are wired
  // internally; all others (values materialized by the time the program runs) become program parameters in first-use order.
  Window(std::vector<NodePtr> nodes, Keep keep);

  const std::vector<NodePtr>& nodes() const { return nodes_; }
  const std::vector<ValuePtr>& parameters() const { return parameters_; }
  // Values the program returns, in node order.
  const std::vector<ValuePtr>& results() const { return results_; }

  // Structural: node keys, wiring and which outputs are results. Equal keys mean equal programs,
  // so a training step that repeats finds its compiled window; no text is built for the key.
  const std::string& key() const { return key_; }
  // `aliases`: (parameter, result) pairs whose buffers the program may share (donation).
  std::string program_text(const std::vector<std::pair<size_t, size_t>>& aliases = {}) const;

 private:
  struct Source {  // where a node input comes from
    bool internal;   // an earlier node's output, else a parameter
    size_t index;    // parameter index, or producing node index
    size_t output;   // output index within the producing node
  };
  std::vector<NodePtr> nodes_;
  std::vector<std::vector<Source>> sources_;  // per node, per input
  std::vector<ValuePtr> parameters_;
  std::vector<ValuePtr> results_;
  std::vector<std::pair<size_t, size_t>> result_sources_;  // (node, output)
  std::string key_;
};

}  // namespace torchtpu::graph
