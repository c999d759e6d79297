#include "exec/metrics.h"

#include <mutex>

namespace torchtpu::exec {

namespace {

struct Fallbacks {
  std::mutex mu;
  std::map<std::string, int64_t> counts;
};

Fallbacks& fallbacks() {
  static Fallbacks f;
  return f;
}

struct DeviceBytes {
  std::atomic<int64_t> live{0};
  std::atomic<int64_t> peak{0};
};

constexpr int kMaxDevices = 64;

DeviceBytes& device_bytes_of(int device) {
  static DeviceBytes bytes[kMaxDevices];
  return bytes[device >= 0 && device < kMaxDevices ? device : 0];
}

}  // namespace

void track_device_bytes(int device, int64_t delta) {
  DeviceBytes& d = device_bytes_of(device);
  int64_t now = d.live += delta;
  int64_t peak = d.peak;
  while (now > peak && !d.peak.compare_exchange_weak(peak, now)) {}
}

int64_t device_bytes(int device) { return device_bytes_of(device).live; }
int64_t peak_device_bytes(int device) { return device_bytes_of(device).peak; }
void reset_peak_device_bytes(int device) { device_bytes_of(device).peak = device_bytes_of(device).live.load(); }

void record_fallback(const std::string& op) {
  std::lock_guard<std::mutex> lock(fallbacks().mu);
  fallbacks().counts[op]++;
}

std::map<std::string, int64_t> fallback_counts() {
  std::lock_guard<std::mutex> lock(fallbacks().mu);
  return fallbacks().counts;
}

Counters& counters() {
  static Counters c;
  return c;
}

std::map<std::string, int64_t> counters_snapshot() {
  const Counters& c = counters();
  return {{"executions", c.executions},           {"compiles", c.compiles},
          {"compile_ns", c.compile_ns},           {"max_compile_ns", c.max_compile_ns},
          {"cache_hits", c.cache_hits},           {"bytes_to_device", c.bytes_to_device},
          {"bytes_to_host", c.bytes_to_host}};
}

void reset_counters() {
  Counters& c = counters();
  for (auto* field : {&c.executions, &c.compiles, &c.compile_ns, &c.max_compile_ns, &c.cache_hits,
                      &c.bytes_to_device, &c.bytes_to_host})
    field->store(0);
  std::lock_guard<std::mutex> lock(fallbacks().mu);
  fallbacks().counts.clear();
}

}  // namespace torchtpu::exec
