// torch.compile's capture at the executor level: ops recorded into one program, rerun on new
// storages, with write-backs, constants, fresh random states and abandoned captures.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include "exec/capture.h"
#include "exec/executor.h"
#include "exec/metrics.h"
#include "tests/exec/storage_util.h"

namespace torchtpu::exec {
namespace {

using hlo::Builder;
using hlo::Value;

using testing::contents;
using testing::storage_of;

// A capture's first run compiles on a background thread. The process must not exit under it: the
// XLA plugin's lazily made statics (made by that compile, so destroyed before the executor's exit
// hook waits) would go while it runs. Python waits at interpreter shutdown; here each test's
// process waits when its tests end.
class WaitForFirstRuns : public ::testing::Environment {
 public:
  void TearDown() override { wait_for_first_runs(); }
};
const auto* const wait_at_exit = ::testing::AddGlobalTestEnvironment(new WaitForFirstRuns);

View flat(int64_t n) { return {DType::kF32, {n}, {1}, 0}; }

Lowering binary(hlo::BinaryOp op) {
  return [op](Builder& b, const std::vector<Value>& in) { return std::vector<Value>{b.binary(op, in[0], in[1])}; };
}

// y = x * w; w += x (an input written in place)
void record_step(BufferRef& x, BufferRef& w, BufferRef& y) {
  run({"mul", binary(hlo::BinaryOp::kMultiply), {{&x, flat(3)}, {&w, flat(3)}}, {{&y, flat(3)}}});
  run({"add", binary(hlo::BinaryOp::kAdd), {{&w, flat(3)}, {&x, flat(3)}}, {{&w, flat(3)}}});
}

TEST(Capture, RecordsOneProgramAndRerunsItOnNewStorages) {
  auto x = storage_of({1, 2, 3}), w = storage_of({10, 10, 10});
  BufferRef y(0, 3 * sizeof(float));
  int64_t runs_before = counters().executions;
  begin_capture({{x.get(), DType::kF32}, {w.get(), DType::kF32}});
  EXPECT_TRUE(capturing());
  record_step(*x, *w, y);
  EXPECT_EQ(counters().executions, runs_before);  // recorded, not run
  auto graph = end_capture({&y}, "step", "");
  EXPECT_FALSE(capturing());
  EXPECT_EQ(graph->num_ops(), 2u);
  EXPECT_EQ(contents(y), (std::vector<float>{10, 20, 30}));  // the capture's own call ran
  EXPECT_EQ(contents(*w), (std::vector<float>{11, 12, 13}));

  auto x2 = storage_of({2, 2, 2}), w2 = storage_of({1, 1, 1});
  std::vector<GraphInput> inputs{{x2.get(), DType::kF32}, {w2.get(), DType::kF32}};
  EXPECT_EQ(graph->mismatch(inputs), "");
  int64_t before = counters().executions;
  std::vector<graph::ValuePtr> outs = graph->run(inputs);
  EXPECT_EQ(counters().executions, before + 1);  // one program, no per-op dispatch
  BufferRef y2(0, 3 * sizeof(float));
  y2.swap(outs.at(0));
  EXPECT_EQ(contents(y2), (std::vector<float>{2, 2, 2}));
  EXPECT_EQ(contents(*w2), (std::vector<float>{3, 3, 3}));  // written back
}

TEST(Capture, InputsBoundDifferentlyAreAMismatch) {
  auto x = storage_of({1, 2, 3}), w = storage_of({1, 1, 1});
  BufferRef y(0, 3 * sizeof(float));
  begin_capture({{x.get(), DType::kF32}, {w.get(), DType::kF32}});
  record_step(*x, *w, y);
  auto graph = end_capture({&y}, "step", "");
  auto small = storage_of({1, 2});
  EXPECT_NE(graph->mismatch({{small.get(), DType::kF32}, {w.get(), DType::kF32}}).find("8 bytes"), std::string::npos);
  EXPECT_NE(graph->mismatch({{x.get(), DType::kF32}, {x.get(), DType::kF32}}).find("contents of input 0"),
            std::string::npos);
}

TEST(Capture, AbortRestoresTheInputs) {
  auto x = storage_of({1, 2, 3}), w = storage_of({5, 5, 5});
  BufferRef y(0, 3 * sizeof(float));
  begin_capture({{x.get(), DType::kF32}, {w.get(), DType::kF32}});
  record_step(*x, *w, y);
  abort_capture();
  EXPECT_FALSE(capturing());
  EXPECT_EQ(contents(*w), (std::vector<float>{5, 5, 5}));
}

TEST(Capture, ReadingCapturedDataOnTheHostIsAnError) {
  auto x = storage_of({1, 2, 3}), w = storage_of({1, 1, 1});
  BufferRef y(0, 3 * sizeof(float));
  begin_capture({{x.get(), DType::kF32}, {w.get(), DType::kF32}});
  record_step(*x, *w, y);
  std::vector<float> host(3);
  EXPECT_THROW(download(y, host.data()), std::runtime_error);
  abort_capture();
}

TEST(Capture, RandomStatesAreDrawnAgainOnEveryRun) {
  auto x = storage_of({0, 0});
  BufferRef state(0, 2 * sizeof(uint64_t)), y(0, 2 * sizeof(float));
  uint64_t next = 7;
  begin_capture({{x.get(), DType::kF32}});
  std::array<uint64_t, 2> first{next++, 0};
  upload(state, first.data(), DType::kU64);
  capture_random_state(state.value(), [&next] { return std::array<uint64_t, 2>{next++, 0}; });
  // y = x + float(state[0]): shows which state the program read
  run({"add_state",
       [](Builder& b, const std::vector<Value>& in) {
         Value s = b.slice(in[1], {0}, {1}, {1});
         Value f = b.convert(b.reshape(s, {}), DType::kF32);
         return std::vector<Value>{b.binary(hlo::BinaryOp::kAdd, in[0], b.broadcast_in_dim(f, {2}, {}))};
       },
       {{x.get(), flat(2)}, {&state, {DType::kU64, {2}, {1}, 0}}},
       {{&y, flat(2)}}});
  auto graph = end_capture({&y}, "random", "");
  EXPECT_EQ(contents(y), (std::vector<float>{7, 7}));
  for (float expected : {8.0f, 9.0f}) {
    BufferRef out(0, 2 * sizeof(float));
    out.swap(graph->run({{x.get(), DType::kF32}}).at(0));
    EXPECT_EQ(contents(out), (std::vector<float>{expected, expected}));
  }
}

// Emits x + 1 once `go` is set (or after 10 s): shows whether the caller waited for the compile.
Lowering add_one_after(const std::atomic<bool>& go, std::atomic<bool>& emitted) {
  return [&go, &emitted](Builder& b, const std::vector<Value>& in) {
    for (int i = 0; i < 1000 && !go; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    emitted = true;
    Value one = b.constant(1.0, {DType::kF32, {3}});
    return std::vector<Value>{b.binary(hlo::BinaryOp::kAdd, in[0], one)};
  };
}

TEST(Capture, TheFirstRunCompilesWhileTheCallerGoesOn) {
  auto x = storage_of({1, 2, 3});
  BufferRef y(0, 3 * sizeof(float));
  std::atomic<bool> go{false}, emitted{false};
  begin_capture({{x.get(), DType::kF32}});
  run({"add_one_after_go", add_one_after(go, emitted), {{x.get(), flat(3)}}, {{&y, flat(3)}}});
  auto graph = end_capture({&y}, "waits for go", "");
  EXPECT_FALSE(emitted);  // end_capture returned before the program was built
  go = true;
  EXPECT_EQ(contents(y), (std::vector<float>{2, 3, 4}));  // the read waits for the first run
  EXPECT_TRUE(emitted);
}

TEST(Capture, AFailedFirstRunKeepsTheWrittenInputsAndTheNextSyncRaisesIt) {
  auto x = storage_of({1, 2, 3}), w = storage_of({10, 10, 10});
  BufferRef y(0, 3 * sizeof(float));
  begin_capture({{x.get(), DType::kF32}, {w.get(), DType::kF32}});
  record_step(*x, *w, y);
  run({"broken",
       [](Builder&, const std::vector<Value>&) -> std::vector<Value> {
         throw std::runtime_error("broken has no program");
       },
       {{&y, flat(3)}},
       {{&y, flat(3)}}});
  auto graph = end_capture({&y}, "broken step", "");
  try {
    synchronize(0);
    ADD_FAILURE() << "synchronize did not raise the failed first run";
  } catch (const ExecutionFailed& e) {
    EXPECT_NE(std::string(e.what()).find("broken step failed: broken has no program"), std::string::npos) << e.what();
  }
  EXPECT_EQ(contents(*w), (std::vector<float>{10, 10, 10}));  // not lost, and raised only once
  EXPECT_THROW(contents(y), std::runtime_error);
  EXPECT_THROW(graph->run({{x.get(), DType::kF32}, {w.get(), DType::kF32}}), std::runtime_error);
}

}  // namespace
}  // namespace torchtpu::exec
