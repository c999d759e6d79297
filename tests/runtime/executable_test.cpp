// Executables: serialization round trip, portable execution on any device, concurrent use.
#include <gtest/gtest.h>

#include <thread>

#include "tests/runtime/test_util.h"

namespace torchtpu {
namespace {

using hlo::Builder;
using hlo::Value;
using testing::client;
using testing::download;

std::string affine_program() {
  Builder b;
  hlo::TensorType t{DType::kF32, {8}};
  Value x = b.parameter(t);
  b.results({b.binary(hlo::BinaryOp::kAdd, b.binary(hlo::BinaryOp::kMultiply, x, b.constant(3.0, t)),
                      b.constant(1.0, t))});
  return b.module_text();
}

std::vector<float> iota8(float offset) {
  std::vector<float> v(8);
  for (int i = 0; i < 8; ++i) v[i] = offset + i;
  return v;
}

TEST(Executable, SerializeDeserializeGivesSameResults) {
  runtime::Executable exe = client().compile(affine_program());
  EXPECT_EQ(exe.num_outputs(), 1u);
  EXPECT_FALSE(exe.name().empty());
  std::string bytes = exe.serialize();
  ASSERT_FALSE(bytes.empty());
  runtime::Executable loaded = client().deserialize(bytes);
  EXPECT_EQ(loaded.num_outputs(), 1u);

  auto x = testing::upload(iota8(0), DType::kF32, {8});
  auto a = exe.execute({{&x}});
  auto b = loaded.execute({{&x}});
  EXPECT_EQ(download<float>(a.outputs[0][0]), download<float>(b.outputs[0][0]));
  EXPECT_EQ(download<float>(b.outputs[0][0])[7], 22.0f);
}

TEST(Executable, CorruptSerializedBytesAreAnError) {
  std::string bytes = client().compile(affine_program()).serialize();
  EXPECT_THROW(client().deserialize(bytes.substr(0, bytes.size() / 2)), runtime::PjrtError);
  EXPECT_THROW(client().deserialize("not an executable"), runtime::PjrtError);
}

TEST(Executable, PortableRunsOnEveryDevice) {
  runtime::CompileOptions options;
  options.portable = true;
  runtime::Executable exe = client().compile(affine_program(), options);
  for (size_t d = 0; d < client().devices().size(); ++d) {
    auto x = testing::upload(iota8(static_cast<float>(d)), DType::kF32, {8}, d);
    auto r = exe.execute_on(client().device(d).raw(), {&x});
    EXPECT_EQ(r.outputs[0][0].device(), client().device(d).raw());
    EXPECT_EQ(download<float>(r.outputs[0][0])[0], 3.0f * d + 1);
  }
}

TEST(Executable, ManyThreadsExecuteConcurrently) {
  runtime::Executable exe = client().compile(affine_program());
  constexpr int kThreads = 8, kIters = 50;
  std::vector<std::thread> threads;
  std::vector<int> wrong(kThreads, 0);
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kIters; ++i) {
        auto x = testing::upload(iota8(static_cast<float>(t * 1000 + i)), DType::kF32, {8});
        auto r = exe.execute({{&x}});
        auto y = download<float>(r.outputs[0][0]);
        for (int k = 0; k < 8; ++k) wrong[t] += y[k] != 3.0f * (t * 1000 + i + k) + 1;
      }
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(wrong[t], 0) << "thread " << t;
}

TEST(Executable, ManyThreadsCompileConcurrently) {
  std::vector<std::thread> threads;
  std::vector<float> got(4);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      Builder b;
      Value x = b.parameter({DType::kF32, {1}});
      b.results({b.binary(hlo::BinaryOp::kAdd, x, b.constant(t, {DType::kF32, {1}}))});
      auto exe = client().compile(b.module_text());
      auto in = testing::upload(std::vector<float>{100}, DType::kF32, {1});
      got[t] = download<float>(exe.execute({{&in}}).outputs[0][0])[0];
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(got, (std::vector<float>{100, 101, 102, 103}));
}

}  // namespace
}  // namespace torchtpu
