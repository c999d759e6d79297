#include "exec/metrics.h"

namespace torchtpu::exec {

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
}

}  // namespace torchtpu::exec
