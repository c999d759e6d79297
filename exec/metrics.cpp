#include "exec/metrics.h"

#include <mutex>

namespace torchtpu::exec {

namespace {

// The counters that are maps or lists, behind one lock (updated per sync or compile, not per op).
struct Tables {
  std::mutex mu;
  std::map<std::string, int64_t> fallbacks;
  std::map<std::string, int64_t> unpadded;
  std::map<std::string, int64_t> syncs;
  std::map<std::string, int64_t> cuts;
  std::vector<std::string> recompiles;
  int64_t recompile_count = 0;
  std::map<int64_t, int64_t> window_sizes;
};

Tables& tables() {
  static auto* t = new Tables;
  return *t;
}

void raise_max(std::atomic<int64_t>& max, int64_t value) {
  int64_t prev = max;
  while (value > prev && !max.compare_exchange_weak(prev, value)) {}
}

}  // namespace

void record_fallback(const std::string& op) {
  std::lock_guard<std::mutex> lock(tables().mu);
  tables().fallbacks[op]++;
}

std::map<std::string, int64_t> fallback_counts() {
  std::lock_guard<std::mutex> lock(tables().mu);
  return tables().fallbacks;
}

void record_unpadded(const std::string& op) {
  std::lock_guard<std::mutex> lock(tables().mu);
  tables().unpadded[op]++;
}

std::map<std::string, int64_t> unpadded_counts() {
  std::lock_guard<std::mutex> lock(tables().mu);
  return tables().unpadded;
}

void record_compile(int64_t ns) {
  counters().compiles++;
  counters().compile_ns += ns;
  raise_max(counters().max_compile_ns, ns);
}

void record_window(int64_t ops) {
  counters().windows++;
  counters().window_ops += ops;
  raise_max(counters().max_window_ops, ops);
  std::lock_guard<std::mutex> lock(tables().mu);
  tables().window_sizes[ops]++;
}

void record_sync(const std::string& reason) {
  std::lock_guard<std::mutex> lock(tables().mu);
  tables().syncs[reason]++;
}

std::map<std::string, int64_t> sync_counts() {
  std::lock_guard<std::mutex> lock(tables().mu);
  return tables().syncs;
}

void record_cut(const std::string& reason) {
  std::lock_guard<std::mutex> lock(tables().mu);
  tables().cuts[reason]++;
}

std::map<std::string, int64_t> cut_counts() {
  std::lock_guard<std::mutex> lock(tables().mu);
  return tables().cuts;
}

void record_recompile(const std::string& description) {
  std::lock_guard<std::mutex> lock(tables().mu);
  tables().recompile_count++;
  tables().recompiles.push_back(description);
  if (tables().recompiles.size() > 100) tables().recompiles.erase(tables().recompiles.begin());
}

std::vector<std::string> recompiles() {
  std::lock_guard<std::mutex> lock(tables().mu);
  return tables().recompiles;
}

int64_t recompile_count() {
  std::lock_guard<std::mutex> lock(tables().mu);
  return tables().recompile_count;
}

std::map<int64_t, int64_t> window_sizes() {
  std::lock_guard<std::mutex> lock(tables().mu);
  return tables().window_sizes;
}

Counters& counters() {
  static Counters c;
  return c;
}

std::map<std::string, int64_t> counters_snapshot() {
  const Counters& c = counters();
  return {{"executions", c.executions},         {"debug_ops", c.debug_ops},
          {"strict_ops", c.strict_ops},         {"fused_ops", c.fused_ops},
          {"lazy_ops", c.lazy_ops},             {"windows", c.windows},
          {"window_ops", c.window_ops},         {"max_window_ops", c.max_window_ops},
          {"op_by_op_windows", c.op_by_op_windows}, {"captured_ops", c.captured_ops},
          {"compiled_graph_runs", c.compiled_graph_runs}, {"donated_buffers", c.donated_buffers},
          {"collectives", c.collectives},       {"compiles", c.compiles},
          {"compile_ns", c.compile_ns},         {"max_compile_ns", c.max_compile_ns},
          {"bytes_to_device", c.bytes_to_device}, {"async_bytes_to_device", c.async_bytes_to_device},
          {"bytes_to_host", c.bytes_to_host}, {"padded_ops", c.padded_ops},
          {"padded_bytes", c.padded_bytes}, {"peak_padded_bytes", c.peak_padded_bytes}};
}

void record_padding_bytes(int64_t delta) {
  Counters& c = counters();
  int64_t now = c.padded_bytes += delta;
  int64_t peak = c.peak_padded_bytes.load();
  while (now > peak && !c.peak_padded_bytes.compare_exchange_weak(peak, now)) {
  }
}

void reset_counters() {
  Counters& c = counters();
  for (auto* field : {&c.executions, &c.debug_ops, &c.strict_ops, &c.fused_ops, &c.lazy_ops, &c.windows,
                      &c.window_ops, &c.max_window_ops, &c.op_by_op_windows, &c.captured_ops,
                      &c.compiled_graph_runs, &c.donated_buffers, &c.collectives, &c.compiles, &c.compile_ns,
                      &c.max_compile_ns, &c.bytes_to_device, &c.async_bytes_to_device, &c.bytes_to_host,
                      &c.padded_ops})  // padded_bytes is what is held now, not a count
    field->store(0);
  c.peak_padded_bytes.store(c.padded_bytes.load());
  std::lock_guard<std::mutex> lock(tables().mu);
  Tables& t = tables();
  t.fallbacks.clear();
  t.unpadded.clear();
  t.syncs.clear();
  t.cuts.clear();
  t.recompiles.clear();
  t.recompile_count = 0;
  t.window_sizes.clear();
}

}  // namespace torchtpu::exec
