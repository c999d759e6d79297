// Process-wide counters of what the executor did. Cheap enough to update on every op.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace torchtpu::exec {

struct Counters {
  std::atomic<int64_t> executions{0};  // programs dispatched to a device
  std::atomic<int64_t> debug_ops{0}, strict_ops{0}, fused_ops{0}, lazy_ops{0};  // ops recorded, by mode
  std::atomic<int64_t> windows{0};            // fused/lazy windows executed as one program
  std::atomic<int64_t> window_ops{0};         // ops in those windows
  std::atomic<int64_t> max_window_ops{0};
  std::atomic<int64_t> op_by_op_windows{0};   // windows run op by op while their program compiled
  std::atomic<int64_t> captured_ops{0};        // ops recorded into torch.compile graphs
  std::atomic<int64_t> compiled_graph_runs{0};  // torch.compile graphs executed
  std::atomic<int64_t> donated_buffers{0};      // input buffers a compiled graph or window reused for its results
  std::atomic<int64_t> collectives{0};       // collectives run (compiled across devices or host-staged)
  std::atomic<int64_t> compiles{0};
  std::atomic<int64_t> compile_ns{0};
  std::atomic<int64_t> max_compile_ns{0};
  std::atomic<int64_t> bytes_to_device{0};
  std::atomic<int64_t> async_bytes_to_device{0};  // of those, copied after the call returned
  std::atomic<int64_t> bytes_to_host{0};
  std::atomic<int64_t> padded_ops{0};    // ops run on padded operands (exec/padded_view.h)
  std::atomic<int64_t> padded_bytes{0};  // device bytes held beyond tensors' own by padded storages
  std::atomic<int64_t> peak_padded_bytes{0};  // the most padded_bytes since the last reset
};

Counters& counters();

// A snapshot by name, for Python and reports.
std::map<std::string, int64_t> counters_snapshot();
void reset_counters();

void record_compile(int64_t ns);
// A padded storage now holds `delta` more bytes beyond its tensor's (negative: fewer).
void record_padding_bytes(int64_t delta);
void record_window(int64_t ops);
// A host wait for device data, by reason ("item", "cpu", "print", "control flow", "sync", ...).
void record_sync(const std::string& reason);
std::map<std::string, int64_t> sync_counts();
// Where pending graphs were cut into windows, by reason ("item", "optimizer step", "size limit", ...).
void record_cut(const std::string& reason);
std::map<std::string, int64_t> cut_counts();
// The same op or window compiled again with a change, described (the most recent 100 kept).
void record_recompile(const std::string& description);
std::vector<std::string> recompiles();
int64_t recompile_count();
// Fused/lazy window sizes (ops per window) with how often each was executed.
std::map<int64_t, int64_t> window_sizes();

// Ops that ran on the CPU because they have no lowering yet, with how often.
void record_fallback(const std::string& op);
std::map<std::string, int64_t> fallback_counts();

// Ops that read a padded storage at exact sizes (no padding rule, or one that does not cover the
// call), with how often: each compiles per exact size, the gaps of bounded dynamism.
void record_unpadded(const std::string& op);
std::map<std::string, int64_t> unpadded_counts();

}  // namespace torchtpu::exec
