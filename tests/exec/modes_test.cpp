// Fused and lazy execution: ops deferred into windows that run as one program, with only the
// values storages still hold materialized, and results equal to strict mode.
#include <gtest/gtest.h>

#include <memory>

#include "exec/compile_cache.h"
#include "exec/executor.h"
#include "exec/metrics.h"
#include "tests/exec/mode_scope.h"

namespace torchtpu::exec {
namespace {

using hlo::Builder;
using testing::ModeScope;
using hlo::Value;

View vec(int64_t n) { return {DType::kF32, {n}, {1}, 0}; }

Lowering times(double k) {
  return [k](Builder& b, const std::vector<Value>& in) {
    return std::vector<Value>{b.binary(hlo::BinaryOp::kMultiply, in[0], b.constant(k, in[0].type))};
  };
}

Lowering add() {
  return [](Builder& b, const std::vector<Value>& in) {
    return std::vector<Value>{b.binary(hlo::BinaryOp::kAdd, in[0], in[1])};
  };
}

std::vector<float> contents(const BufferRef& s) {
  std::vector<float> out(s.nbytes() / sizeof(float));
  download(s, out.data(), "test");
  return out;
}

// y = (x * 2 + x) * 3 through a temporary that is dropped before the host reads y.
std::vector<float> small_chain(int64_t& windows, int64_t& executions) {
  std::vector<float> data{1, 2, 3, 4};
  BufferRef x(0, 16), y(0, 16);
  upload(x, data.data(), DType::kF32);
  int64_t w0 = counters().windows, e0 = counters().executions;
  {
    BufferRef tmp(0, 16);
    run({"times2", times(2), {{&x, vec(4)}}, {{&tmp, vec(4)}}, nullptr});
    run({"add", add(), {{&tmp, vec(4)}, {&x, vec(4)}}, {{&y, vec(4)}}, nullptr});
  }
  run({"times3", times(3), {{&y, vec(4)}}, {{&y, vec(4)}}, nullptr});
  std::vector<float> out = contents(y);
  windows = counters().windows - w0;
  executions = counters().executions - e0;
  return out;
}

TEST(Modes, LazyRunsOneWindowAtTheRead) {
  ModeScope lazy(Mode::kLazy);
  int64_t windows = 0, executions = 0;
  EXPECT_EQ(small_chain(windows, executions), (std::vector<float>{9, 18, 27, 36}));
  EXPECT_EQ(windows, 1);
  EXPECT_EQ(executions, 1);
}

TEST(Modes, StrictRunsEveryOp) {
  ModeScope strict(Mode::kStrict);
  int64_t windows = 0, executions = 0;
  EXPECT_EQ(small_chain(windows, executions), (std::vector<float>{9, 18, 27, 36}));
  EXPECT_EQ(windows, 0);
  EXPECT_EQ(executions, 3);
}

TEST(Modes, FusedRunsOpByOpUntilTheWindowIsCompiledThenOneProgram) {
  ModeScope fused(Mode::kFused);
  int64_t windows = 0, executions = 0;
  EXPECT_EQ(small_chain(windows, executions), (std::vector<float>{9, 18, 27, 36}));
  wait_for_background_compiles();
  EXPECT_EQ(small_chain(windows, executions), (std::vector<float>{9, 18, 27, 36}));
  EXPECT_EQ(windows, 1);
  EXPECT_EQ(executions, 1);
}

TEST(Modes, PendingWorkRunsWhenTheModeChanges) {
  std::vector<float> data{1, 2};
  BufferRef x(0, 8);
  upload(x, data.data(), DType::kF32);
  set_mode(Mode::kLazy);
  run({"times2", times(2), {{&x, vec(2)}}, {{&x, vec(2)}}, nullptr});
  EXPECT_EQ(pending_ops(), 1u);
  set_mode(Mode::kStrict);
  EXPECT_EQ(pending_ops(), 0u);
  EXPECT_EQ(contents(x), (std::vector<float>{2, 4}));
}

TEST(Modes, WindowsAreCachedByStructureNotByData) {
  ModeScope lazy(Mode::kLazy);
  int64_t windows = 0, executions = 0;
  small_chain(windows, executions);
  int64_t compiles = counters().compiles;
  small_chain(windows, executions);
  EXPECT_EQ(counters().compiles, compiles);
}

TEST(Modes, ModeNamesRoundTrip) {
  for (Mode m : {Mode::kDebug, Mode::kStrict, Mode::kFused, Mode::kLazy}) EXPECT_EQ(parse_mode(mode_name(m)), m);
  EXPECT_FALSE(parse_mode("eager").has_value());
}

}  // namespace
}  // namespace torchtpu::exec
