// Process-wide counters of what the executor did. Cheap enough to update on every op.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <string>

namespace torchtpu::exec {

struct Counters {
  std::atomic<int64_t> executions{0};
  std::atomic<int64_t> compiles{0};
  std::atomic<int64_t> compile_ns{0};
  std::atomic<int64_t> max_compile_ns{0};
  std::atomic<int64_t> cache_hits{0};
  std::atomic<int64_t> bytes_to_device{0};
  std::atomic<int64_t> bytes_to_host{0};
};

Counters& counters();

// A snapshot by name, for Python and reports.
std::map<std::string, int64_t> counters_snapshot();
void reset_counters();

// Bytes of device memory held by tensor storages, per device (like torch.cuda.memory_allocated).
void track_device_bytes(int device, int64_t delta);
int64_t device_bytes(int device);
int64_t peak_device_bytes(int device);
void reset_peak_device_bytes(int device);

// Ops that ran on the CPU because they have no lowering yet, with how often.
void record_fallback(const std::string& op);
std::map<std::string, int64_t> fallback_counts();

}  // namespace torchtpu::exec
