// The process's memory mappings against the kernel's limit (Linux vm.max_map_count, 65530 by
// default). Every loaded XLA CPU executable holds a few mappings of JIT-compiled code, so a process
// that keeps thousands loaded runs out: LLVM's next allocation fails ("Cannot allocate memory")
// and the process crashes inside XLA. The compile cache's memory tier evicts before that.
#pragma once

#include <cstddef>

namespace torchtpu::exec {

struct MemoryMaps {
  size_t in_use = 0;
  size_t limit = 0;  // 0: unknown (no /proc)
};

MemoryMaps memory_maps();

}  // namespace torchtpu::exec
