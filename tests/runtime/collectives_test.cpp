// Compiled StableHLO collectives across the client's devices (4 on the CPU plugin in CTest).
#include <gtest/gtest.h>

#include "tests/runtime/test_util.h"

namespace torchtpu {
namespace {

using hlo::Builder;
using hlo::Value;
using testing::client;
using testing::download;

constexpr int64_t kN = 4;

// Runs a replicated program on kN devices; input for device d is `make_input(d)`.
std::vector<std::vector<float>> run_replicated(Builder& b, int64_t len,
                                               std::vector<float> (*make_input)(int64_t)) {
  if (client().devices().size() < kN) throw std::runtime_error("collective tests need 4 devices");
  runtime::CompileOptions options;
  options.num_replicas = kN;
  for (int64_t d = 0; d < kN; ++d) options.device_assignment.push_back({client().device(d).id()});
  runtime::Executable exe = client().compile(b.module_text(kN, 1), options);
  EXPECT_EQ(exe.devices().size(), static_cast<size_t>(kN));

  std::vector<runtime::Buffer> inputs;
  for (int64_t d = 0; d < kN; ++d) inputs.push_back(testing::upload(make_input(d), DType::kF32, {len}, d));
  std::vector<std::vector<const runtime::Buffer*>> args;
  for (auto& in : inputs) args.push_back({&in});
  runtime::ExecuteResult r = exe.execute(args);
  std::vector<std::vector<float>> out;
  for (int64_t d = 0; d < kN; ++d) {
    r.done[d].await();
    EXPECT_EQ(r.outputs[d][0].device(), client().device(d).raw());
    out.push_back(download<float>(r.outputs[d][0]));
  }
  return out;
}

// Device d holds [d*10, d*10+1, d*10+2, d*10+3].
std::vector<float> ramp(int64_t d) {
  return {d * 10.0f, d * 10.0f + 1, d * 10.0f + 2, d * 10.0f + 3};
}

hlo::RegionBody add_body() {
  return [](Builder& b, const std::vector<Value>& a) {
    return std::vector<Value>{b.binary(hlo::BinaryOp::kAdd, a[0], a[1])};
  };
}

const Builder::ReplicaGroups kAll{{0, 1, 2, 3}};

TEST(Collectives, AllReduceSum) {
  Builder b;
  Value x = b.parameter({DType::kF32, {4}});
  b.results({b.all_reduce(x, kAll, add_body())});
  for (const auto& out : run_replicated(b, 4, ramp))
    EXPECT_EQ(out, (std::vector<float>{60, 64, 68, 72}));
}

TEST(Collectives, AllGather) {
  Builder b;
  Value x = b.parameter({DType::kF32, {4}});
  b.results({b.all_gather(x, 0, kAll)});
  std::vector<float> want;
  for (int64_t d = 0; d < kN; ++d) for (float v : ramp(d)) want.push_back(v);
  for (const auto& out : run_replicated(b, 4, ramp)) EXPECT_EQ(out, want);
}

TEST(Collectives, ReduceScatter) {
  Builder b;
  Value x = b.parameter({DType::kF32, {4}});
  b.results({b.reduce_scatter(x, 0, kAll, add_body())});
  auto out = run_replicated(b, 4, ramp);
  for (int64_t d = 0; d < kN; ++d) EXPECT_EQ(out[d], (std::vector<float>{60.0f + 4 * d}));
}

TEST(Collectives, AllToAll) {
  Builder b;
  Value x = b.parameter({DType::kF32, {4}});
  b.results({b.all_to_all(x, 0, 0, kAll)});
  // Device d receives element d of every device, in device order.
  auto out = run_replicated(b, 4, ramp);
  for (int64_t d = 0; d < kN; ++d)
    EXPECT_EQ(out[d], (std::vector<float>{0.0f + d, 10.0f + d, 20.0f + d, 30.0f + d}));
}

TEST(Collectives, CollectivePermuteRing) {
  Builder b;
  Value x = b.parameter({DType::kF32, {4}});
  b.results({b.collective_permute(x, {{0, 1}, {1, 2}, {2, 3}, {3, 0}})});
  auto out = run_replicated(b, 4, ramp);
  for (int64_t d = 0; d < kN; ++d) EXPECT_EQ(out[d], ramp((d + kN - 1) % kN));
}

}  // namespace
}  // namespace torchtpu
