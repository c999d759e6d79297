// Device memory accounting and its limit: storages count from allocation to death, an allocation
// past the limit throws before counting anything, and the limit's spellings parse.
#include <gtest/gtest.h>

#include "exec/buffer_ref.h"
#include "exec/byte_size.h"
#include "exec/device_memory.h"

namespace torchtpu::exec {
namespace {

TEST(DeviceMemory, StoragesCountFromAllocationToDeath) {
  DeviceMemory before = device_memory(0);
  {
    BufferRef never_written(0, 1000);
    EXPECT_EQ(device_memory(0).allocated, before.allocated + 1000);
    EXPECT_EQ(device_memory(0).allocations, before.allocations + 1);
  }
  DeviceMemory after = device_memory(0);
  EXPECT_EQ(after.allocated, before.allocated);
  EXPECT_EQ(after.allocations, before.allocations);
  EXPECT_EQ(after.allocated_total, before.allocated_total + 1000);
  EXPECT_EQ(after.freed_total, before.freed_total + 1000);
}

TEST(DeviceMemory, AnAllocationPastTheLimitThrowsAndCountsNothing) {
  int64_t held = device_memory(0).allocated;
  set_device_memory_limit(0, held + 4096, "a test");
  BufferRef fits(0, 3000);
  DeviceMemory before = device_memory(0);
  try {
    BufferRef too_big(0, 2000);
    FAIL() << "no OutOfDeviceMemory";
  } catch (const OutOfDeviceMemory& e) {
    std::string message = e.what();
    EXPECT_NE(message.find("tried to allocate 1.95 KiB"), std::string::npos) << message;
    EXPECT_NE(message.find("the limit is 4.00 KiB"), std::string::npos) << message;
    EXPECT_NE(message.find("(a test)"), std::string::npos) << message;
  }
  DeviceMemory after = device_memory(0);
  EXPECT_EQ(after.allocated, before.allocated);
  EXPECT_EQ(after.num_ooms, before.num_ooms + 1);
  BufferRef still_fits(0, 1000);  // the device stays usable up to its limit
  set_device_memory_limit(0, std::nullopt, "");
  BufferRef unlimited(0, 1 << 20);
  EXPECT_FALSE(device_memory(0).limit.has_value());
}

TEST(DeviceMemory, PeakResetsToWhatIsHeld) {
  { BufferRef big(0, 1 << 16); }
  EXPECT_GE(device_memory(0).peak, device_memory(0).allocated + (1 << 16));
  reset_peak_device_memory(0);
  EXPECT_EQ(device_memory(0).peak, device_memory(0).allocated);
}

TEST(DeviceMemory, LimitSpellings) {
  EXPECT_EQ(parse_memory_limit("1000000", 1 << 30), 1000000);
  EXPECT_EQ(parse_memory_limit("8GB", 1 << 30), 8000000000);
  EXPECT_EQ(parse_memory_limit("512 MiB", 1 << 30), 512 << 20);
  EXPECT_EQ(parse_memory_limit("0.25", 1 << 30), 1 << 28);
  EXPECT_THROW(parse_memory_limit("lots", 1 << 30), std::invalid_argument);
  EXPECT_THROW(parse_memory_limit("-1", 1 << 30), std::invalid_argument);
  EXPECT_THROW(parse_memory_limit("3 parsecs", 1 << 30), std::invalid_argument);
}

TEST(ByteSize, FormatsLikeCudaErrors) {
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(4096), "4.00 KiB");
  EXPECT_EQ(format_bytes(int64_t(3) << 29), "1.50 GiB");
}

}  // namespace
}  // namespace torchtpu::exec
