// The compile cache's memory tier: least recently used out at capacity, and the older half out
// when the process's memory mappings pass 3/4 of the kernel's limit (a fake count here).
#include <gtest/gtest.h>

#include <memory>

#include "exec/memory_tier.h"

namespace torchtpu::exec {
namespace {

using Tier = MemoryTier<std::shared_ptr<int>>;

void fill(Tier& tier, int n) {
  for (int i = 0; i < n; ++i) tier.insert("k" + std::to_string(i), std::make_shared<int>(i));
}

TEST(MemoryTier, EvictsTheLeastRecentlyUsedAtCapacity) {
  Tier tier(3, [] { return MemoryMaps{}; });
  fill(tier, 3);
  ASSERT_NE(tier.find("k0"), nullptr);  // k1 is now the least recently used
  tier.insert("k3", std::make_shared<int>(3));
  EXPECT_EQ(tier.size(), 3u);
  EXPECT_EQ(tier.find("k1"), nullptr);
  EXPECT_EQ(*tier.find("k0"), 0);
}

TEST(MemoryTier, KeepsEverythingWhileMappingsAreFarFromTheLimit) {
  Tier tier(4096, [] { return MemoryMaps{1000, 65530}; });
  fill(tier, 2 * Tier::kMapsCheckEvery);
  EXPECT_EQ(tier.size(), 2 * Tier::kMapsCheckEvery);
}

TEST(MemoryTier, DropsTheOlderHalfWhenMappingsPassThreeQuartersOfTheLimit) {
  Tier tier(4096, [] { return MemoryMaps{50000, 65530}; });
  fill(tier, Tier::kMapsCheckEvery);
  EXPECT_EQ(tier.size(), Tier::kMapsCheckEvery / 2);
  EXPECT_EQ(tier.find("k0"), nullptr);  // the oldest went, the newest stayed
  EXPECT_NE(tier.find("k" + std::to_string(Tier::kMapsCheckEvery - 1)), nullptr);
}

TEST(MemoryTier, IgnoresAnUnknownLimit) {
  Tier tier(4096, [] { return MemoryMaps{50000, 0}; });  // no /proc
  fill(tier, Tier::kMapsCheckEvery);
  EXPECT_EQ(tier.size(), Tier::kMapsCheckEvery);
}

}  // namespace
}  // namespace torchtpu::exec
