// The mapping count the compile cache's memory tier watches: read from /proc, and it moves when the
// process maps memory.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include "exec/memory_maps.h"

namespace torchtpu::exec {
namespace {

TEST(MemoryMaps, CountsTheProcessMappingsAgainstTheKernelLimit) {
  MemoryMaps before = memory_maps();
  ASSERT_GT(before.limit, 0u);  // Linux: vm.max_map_count
  EXPECT_GT(before.in_use, 0u);
  EXPECT_LT(before.in_use, before.limit);
  void* page = mmap(nullptr, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(page, MAP_FAILED);
  EXPECT_GT(memory_maps().in_use, before.in_use);
  munmap(page, 4096);
}

}  // namespace
}  // namespace torchtpu::exec
