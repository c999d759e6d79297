#include "exec/memory_maps.h"

#include <algorithm>
#include <fstream>
#include <iterator>

namespace torchtpu::exec {

MemoryMaps memory_maps() {
  MemoryMaps m;
  std::ifstream limit("/proc/sys/vm/max_map_count");
  if (!(limit >> m.limit)) return {};
  std::ifstream maps("/proc/self/maps");
  m.in_use = static_cast<size_t>(std::count(std::istreambuf_iterator<char>(maps), std::istreambuf_iterator<char>(), '\n'));
  return m;
}

}  // namespace torchtpu::exec
