#include "graph/window.h"

#include <algorithm>
#include <stdexcept>
#include <unordered_map>

#include "graph/key_text.h"

namespace torchtpu::graph {

Window::Window(std::vector<NodePtr> nodes, Keep keep) : nodes_(std::move(nodes)) {
  // A one-op window (every op in strict mode) has no producer inside and few parameters: it
  // finds them by scanning, without building hash maps.
  const bool single = nodes_.size() == 1;
  std::unordered_map<const Node*, size_t> node_index;
  std::unordered_map<const DeviceValue*, size_t> parameter_index;
  auto parameter = [&](const ValuePtr& in) {
    if (in->is_scalar()) {
      parameters_.push_back(in);
      return parameters_.size() - 1;
    }
    if (single) {
      size_t p = std::find(parameters_.begin(), parameters_.end(), in) - parameters_.begin();
      if (p == parameters_.size()) parameters_.push_back(in);
      return p;
    }
    auto [it, fresh] = parameter_index.emplace(in.get(), parameters_.size());
    if (fresh) parameters_.push_back(in);
    return it->second;
  };
  for (size_t n = 0; n < nodes_.size(); ++n) {
    const Node& node = *nodes_[n];
    if (!single) node_index[&node] = n;
    constexpr size_t kNumber = KeyWriter::kNumberRoom;
    KeyWriter w(key_, node.key.size() + 2 * kNumber + 3 + node.inputs.size() * (2 * kNumber + 3));
    w.number(node.key.size()) << ':' << node.key << '<';  // length-prefixed: unambiguous
    std::vector<Source>& sources = sources_.emplace_back();
    for (const ValuePtr& in : node.inputs) {
      auto producer = in->producer() && !single ? node_index.find(in->producer()) : node_index.end();
      if (producer != node_index.end()) {
        sources.push_back({true, producer->second, in->output_index()});
        w << 'n';
        w.number(producer->second) << '.';
        w.number(in->output_index()) << ',';
        continue;
      }
      size_t p = parameter(in);
      sources.push_back({false, p, 0});
      w << 'p';
      w.number(p) << ',';
    }
    w << '>';
  }
  key_ += "=>";
  for (size_t n = 0; n < nodes_.size(); ++n)
    for (size_t o = 0; o < nodes_[n]->outputs.size(); ++o)
      if (ValuePtr v = nodes_[n]->outputs[o].lock(); v && (keep == Keep::kAlive || v->is_held())) {
        results_.push_back(v);
        result_sources_.push_back({n, o});
        append_number(key_, n);
        key_ += '.';
        append_number(key_, o);
        key_ += ',';
      }
}

std::string Window::program_text(const std::vector<std::pair<size_t, size_t>>& aliases) const {
  hlo::Builder b;
  for (const auto& [param, result] : aliases) b.alias_parameter(param, result);
  std::vector<hlo::Value> params;
  for (const ValuePtr& p : parameters_) params.push_back(b.parameter({p->dtype(), {p->length()}}));
  std::vector<std::vector<hlo::Value>> produced(nodes_.size());
  for (size_t n = 0; n < nodes_.size(); ++n) {
    std::vector<hlo::Value> inputs;
    for (const Source& s : sources_[n])
      inputs.push_back(s.internal ? produced[s.index].at(s.output) : params[s.index]);
    produced[n] = nodes_[n]->emit(b, inputs);
    if (produced[n].size() != nodes_[n]->outputs.size())
      throw std::logic_error(nodes_[n]->key + ": emitted " + std::to_string(produced[n].size()) +
                             " values for " + std::to_string(nodes_[n]->outputs.size()) + " outputs");
  }
  std::vector<hlo::Value> results;
  for (auto [n, o] : result_sources_) results.push_back(produced[n][o]);
  b.results(results);
  return b.module_text();
}

}  // namespace torchtpu::graph
