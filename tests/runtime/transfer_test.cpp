// Host <-> device transfers for every dtype, synchronous and asynchronous.
#include <gtest/gtest.h>

#include <future>
#include <numeric>

#include "tests/runtime/test_util.h"

namespace torchtpu {
namespace {

using testing::client;

// Round-trips distinct bytes of every element type; the bytes must come back unchanged.
class DTypeRoundTrip : public ::testing::TestWithParam<DType> {};

TEST_P(DTypeRoundTrip, BytesSurvive) {
  DType dtype = GetParam();
  std::vector<int64_t> dims{3, 5};
  size_t size = 15 * element_size(dtype);
  std::vector<uint8_t> host(size);
  for (size_t i = 0; i < size; ++i) host[i] = static_cast<uint8_t>(i * 7 + 3);
  if (dtype == DType::kBool)
    for (size_t i = 0; i < size; ++i) host[i] = i % 3 == 0;  // PRED bytes are 0 or 1

  runtime::Buffer b = client().to_device(host.data(), dtype, dims, client().device(0));
  EXPECT_EQ(b.dtype(), dtype);
  EXPECT_EQ(b.dims(), dims);
  EXPECT_EQ(b.byte_size(), size);
  std::vector<uint8_t> back(size);
  b.copy_to_host(back.data(), size);
  EXPECT_EQ(back, host);
}

INSTANTIATE_TEST_SUITE_P(AllTypes, DTypeRoundTrip,
                         ::testing::Values(DType::kF32, DType::kF64, DType::kBF16, DType::kF16,
                                           DType::kS8, DType::kS16, DType::kS32, DType::kS64,
                                           DType::kU8, DType::kBool, DType::kC64, DType::kC128),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(Transfer, AsyncWithEvents) {
  std::vector<float> host(1 << 16);
  std::iota(host.begin(), host.end(), 0.0f);
  auto [buffer, done] = client().to_device_async(host.data(), DType::kF32,
                                                 {static_cast<int64_t>(host.size())},
                                                 client().device(0));
  done.await();  // host memory may be reused from here on
  buffer.ready_event().await();
  std::vector<float> back(host.size());
  runtime::Event copied = buffer.copy_to_host_async(back.data(), back.size() * sizeof(float));
  copied.await();
  EXPECT_TRUE(copied.is_ready());
  EXPECT_EQ(back, host);
}

TEST(Transfer, OnReadyCallbackFires) {
  std::vector<int32_t> host{1, 2, 3};
  runtime::Buffer b = testing::upload(host, DType::kS32, {3});
  std::promise<std::string> fired;
  b.ready_event().on_ready([&](const std::string& error) { fired.set_value(error); });
  EXPECT_EQ(fired.get_future().get(), "");
}

TEST(Transfer, ScalarAndEmpty) {
  std::vector<double> scalar{2.5};
  runtime::Buffer s = testing::upload(scalar, DType::kF64, {});
  EXPECT_TRUE(s.dims().empty());
  EXPECT_EQ(testing::download<double>(s), scalar);

  std::vector<float> none;
  runtime::Buffer e = testing::upload(none, DType::kF32, {0, 4});
  EXPECT_EQ(e.element_count(), 0);
  EXPECT_EQ(e.dims(), (std::vector<int64_t>{0, 4}));
}

TEST(Transfer, ToEveryDevice) {
  for (size_t d = 0; d < client().devices().size(); ++d) {
    std::vector<int64_t> host{static_cast<int64_t>(d), 42};
    runtime::Buffer b = testing::upload(host, DType::kS64, {2}, d);
    EXPECT_EQ(b.device(), client().device(d).raw());
    EXPECT_EQ(testing::download<int64_t>(b), host);
  }
}

// DMA mapping is optional in PJRT: a plugin without it answers false; one with it maps, transfers
// from the mapped memory and unmaps.
TEST(Transfer, FromDmaMappedHostMemory) {
  std::vector<float> host(1024);
  std::iota(host.begin(), host.end(), 0.0f);
  bool mapped = client().dma_map(host.data(), host.size() * sizeof(float));
  runtime::Buffer b = client().to_device(host.data(), DType::kF32, {1024}, client().device(0));
  std::vector<float> back(1024);
  b.copy_to_host(back.data(), back.size() * sizeof(float));
  EXPECT_EQ(back, host);
  if (mapped) client().dma_unmap(host.data());
}

TEST(Transfer, WrongHostSizeIsRejected) {
  runtime::Buffer b = testing::upload(std::vector<float>{1, 2, 3}, DType::kF32, {3});
  std::vector<float> small(2);
  EXPECT_THROW(b.copy_to_host(small.data(), small.size() * sizeof(float)), std::invalid_argument);
}

}  // namespace
}  // namespace torchtpu
