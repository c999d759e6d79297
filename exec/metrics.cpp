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

}  // namespace

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
