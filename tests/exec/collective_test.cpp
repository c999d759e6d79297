// Collectives across this process's devices at the executor level (CTest gives it 4 CPU devices):
// storages on different devices combined by one replicated program, after pending work is flushed.
#include <gtest/gtest.h>

#include <memory>

#include "exec/collective.h"
#include "exec/executor.h"
#include "exec/metrics.h"
#include "exec/runtime_context.h"

namespace torchtpu::exec {
namespace {

std::unique_ptr<BufferRef> on_device(int device, const std::vector<float>& data) {
  auto s = std::make_unique<BufferRef>(device, data.size() * sizeof(float));
  upload(*s, data.data(), DType::kF32);
  return s;
}

std::vector<float> read(const graph::ValuePtr& v) {
  BufferRef s(v->device(), v->length() * sizeof(float));
  s.swap(v);
  std::vector<float> out(v->length());
  download(s, out.data());
  return out;
}

class CollectiveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (client().devices().size() < 2) GTEST_FAIL() << "needs TORCHTPU_NUM_CPU_DEVICES >= 2";
    a = on_device(0, {1, 2, 3, 4});
    b = on_device(1, {10, 20, 30, 40});
  }
  std::unique_ptr<BufferRef> a, b;
};

TEST_F(CollectiveTest, AllReduceSumsAcrossDevicesAndCounts) {
  int64_t before = counters().collectives;
  auto out = run_collective({CollectiveKind::kAllReduce}, {a.get(), b.get()}, DType::kF32, "all_reduce");
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0]->device(), 0);
  EXPECT_EQ(out[1]->device(), 1);
  EXPECT_EQ(read(out[0]), (std::vector<float>{11, 22, 33, 44}));
  EXPECT_EQ(read(out[1]), (std::vector<float>{11, 22, 33, 44}));
  EXPECT_EQ(counters().collectives, before + 1);
}

TEST_F(CollectiveTest, MaxAndReduceScatter) {
  Collective max{CollectiveKind::kAllReduce, ReduceKind::kMax};
  EXPECT_EQ(read(run_collective(max, {a.get(), b.get()}, DType::kF32, "max")[0]), (std::vector<float>{10, 20, 30, 40}));
  Collective rs{CollectiveKind::kReduceScatter, ReduceKind::kSum};
  auto out = run_collective(rs, {a.get(), b.get()}, DType::kF32, "reduce_scatter");
  EXPECT_EQ(read(out[0]), (std::vector<float>{11, 22}));
  EXPECT_EQ(read(out[1]), (std::vector<float>{33, 44}));
}

TEST_F(CollectiveTest, GatherAllToAllAndPermute) {
  auto gathered = run_collective({CollectiveKind::kAllGather}, {a.get(), b.get()}, DType::kF32, "all_gather");
  EXPECT_EQ(read(gathered[1]), (std::vector<float>{1, 2, 3, 4, 10, 20, 30, 40}));
  auto exchanged = run_collective({CollectiveKind::kAllToAll}, {a.get(), b.get()}, DType::kF32, "all_to_all");
  EXPECT_EQ(read(exchanged[0]), (std::vector<float>{1, 2, 10, 20}));
  EXPECT_EQ(read(exchanged[1]), (std::vector<float>{3, 4, 30, 40}));
  Collective send{CollectiveKind::kPermute, ReduceKind::kSum, {{0, 1}}};
  auto sent = run_collective(send, {a.get(), b.get()}, DType::kF32, "send");
  EXPECT_EQ(read(sent[1]), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(read(sent[0]), (std::vector<float>{0, 0, 0, 0}));  // no source sends to replica 0
}

TEST_F(CollectiveTest, UnequalSizesAreAClearError) {
  auto small = on_device(1, {1, 2});
  try {
    run_collective({CollectiveKind::kAllReduce}, {a.get(), small.get()}, DType::kF32, "all_reduce");
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("equal sizes"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace torchtpu::exec
