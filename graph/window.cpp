#include "graph/window.h"

#include <stdexcept>
#include <unordered_map>

namespace torchtpu::graph {

Window::Window(std::vector<NodePtr> nodes, Keep keep) : nodes_(std::move(nodes)) {
  std::unordered_map<const Node*, size_t> node_index;
  std::unordered_map<const DeviceValue*, size_t> parameter_index;
  for (size_t n = 0; n < nodes_.size(); ++n) {
    const Node& node = *nodes_[n];
    node_index[&node] = n;
    key_ += std::to_string(node.key.size()) + ':' + node.key + '<';  // length-prefixed: unambiguous
    std::vector<Source>& sources = sources_.emplace_back();
    for (const ValuePtr& in : node.inputs) {
      auto producer = in->producer() ? node_index.find(in->producer()) : node_index.end();
      if (producer != node_index.end()) {
        sources.push_back({true, producer->second, in->output_index()});
        key_ += 'n' + std::to_string(producer->second) + '.' + std::to_string(in->output_index()) + ',';
        continue;
      }
      if (!in->is_materialized())
        throw std::logic_error(node.key + ": input is produced outside the window and never materialized");
      auto [it, fresh] = parameter_index.emplace(in.get(), parameters_.size());
      if (fresh) parameters_.push_back(in);
      sources.push_back({false, it->second, 0});
      key_ += 'p' + std::to_string(it->second) + ',';
    }
    key_ += '>';
  }
  key_ += "=>";
  for (size_t n = 0; n < nodes_.size(); ++n)
    for (size_t o = 0; o < nodes_[n]->outputs.size(); ++o)
      if (ValuePtr v = nodes_[n]->outputs[o].lock(); v && (keep == Keep::kAlive || v->is_held())) {
        results_.push_back(v);
        result_sources_.push_back({n, o});
        key_ += std::to_string(n) + '.' + std::to_string(o) + ',';
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
