// Error paths: every failure is a C++ exception that says what went wrong.
#include <gtest/gtest.h>

#include <functional>

#include "tests/runtime/test_util.h"

namespace torchtpu {
namespace {

using hlo::Builder;
using hlo::Value;
using testing::client;

std::string what_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no exception)";
}

TEST(Errors, MalformedStableHloNamesTheParseError) {
  std::string bad = "module { func.func @main() -> tensor<f32> { %0 = \"stablehlo.bogus\"() : () -> tensor<f32> } }";
  try {
    client().compile(bad);
    FAIL() << "expected a compile error";
  } catch (const runtime::PjrtError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("compiling StableHLO"), std::string::npos) << msg;
    EXPECT_NE(msg.find("stablehlo.bogus"), std::string::npos) << msg;
    EXPECT_NE(e.code(), PJRT_Error_Code_OK);
  }
}

TEST(Errors, GarbageTextIsRejected) {
  EXPECT_THROW(client().compile("this is not MLIR"), runtime::PjrtError);
}

runtime::Executable two_input_add() {
  Builder b;
  hlo::TensorType t{DType::kF32, {4}};
  Value x = b.parameter(t), y = b.parameter(t);
  b.results({b.binary(hlo::BinaryOp::kAdd, x, y)});
  return client().compile(b.module_text());
}

TEST(Errors, WrongArgumentCount) {
  auto exe = two_input_add();
  auto x = testing::upload(std::vector<float>{1, 2, 3, 4}, DType::kF32, {4});
  std::string msg = what_of([&] { exe.execute({{&x}}); });
  EXPECT_NE(msg.find("INVALID_ARGUMENT"), std::string::npos) << msg;
}

TEST(Errors, WrongArgumentShape) {
  auto exe = two_input_add();
  auto x = testing::upload(std::vector<float>{1, 2, 3, 4}, DType::kF32, {4});
  auto y = testing::upload(std::vector<float>{1, 2}, DType::kF32, {2});
  std::string msg = what_of([&] {
    auto r = exe.execute({{&x, &y}});
    r.done[0].await();
  });
  EXPECT_NE(msg.find("failed"), std::string::npos) << msg;
  EXPECT_NE(msg, "(no exception)");
}

TEST(Errors, WrongArgumentListCount) {
  auto exe = two_input_add();
  auto x = testing::upload(std::vector<float>{1, 2, 3, 4}, DType::kF32, {4});
  // Compiled for one device, called with two argument lists.
  EXPECT_THROW(exe.execute({{&x, &x}, {&x, &x}}), runtime::PjrtError);
  EXPECT_THROW(exe.execute({}), std::invalid_argument);
}

TEST(Errors, UnknownCustomCallFailsToCompile) {
  Builder b;
  Value x = b.parameter({DType::kF32, {2}});
  b.results(b.custom_call("torchtpu_no_such_target", {x}, {{DType::kF32, {2}}}));
  EXPECT_THROW(client().compile(b.module_text()), runtime::PjrtError);
}

TEST(Errors, BuilderRejectsInconsistentShapes) {
  Builder b;
  Value x = b.parameter({DType::kF32, {2, 3}});
  Value y = b.parameter({DType::kF32, {3, 2}});
  EXPECT_THROW(b.binary(hlo::BinaryOp::kAdd, x, y), std::invalid_argument);
  EXPECT_THROW(b.reshape(x, {4}), std::invalid_argument);
  EXPECT_THROW(b.dot_general(x, x, {{}, {}, {1}, {0}}, DType::kF32), std::invalid_argument);
  EXPECT_THROW(b.slice(x, {0, 0}, {3, 3}, {1, 1}), std::invalid_argument);
  EXPECT_THROW(b.transpose(x, {0}), std::invalid_argument);
}

TEST(Errors, InvalidCompileOptions) {
  runtime::CompileOptions options;
  options.num_replicas = 2;
  options.device_assignment = {{0}};  // one row for two replicas
  EXPECT_THROW(options.encode(), std::invalid_argument);
}

}  // namespace
}  // namespace torchtpu
