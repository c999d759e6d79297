// The executor's reports to a profiler: executions, compiles and copies with their times, sizes
// and the user's line that caused them; nothing at all while no sink is installed.
#include <gtest/gtest.h>

#include <algorithm>
#include <mutex>
#include <vector>

#include "exec/executor.h"
#include "exec/trace.h"
#include "tests/exec/mode_scope.h"

namespace torchtpu::exec {
namespace {

using hlo::Builder;
using testing::ModeScope;
using hlo::Value;
using Kind = TraceEvent::Kind;

View vec(int64_t n) { return {DType::kF32, {n}, {1}, 0}; }

// Each test multiplies by a factor of its own, so its first run compiles.
Lowering times(double k) {
  return [k](Builder& b, const std::vector<Value>& in) {
    return std::vector<Value>{b.binary(hlo::BinaryOp::kMultiply, in[0], b.constant(k, in[0].type))};
  };
}

std::mutex received_mu;
std::vector<TraceEvent> received;

void collect(TraceEvent&& e) {
  std::lock_guard<std::mutex> lock(received_mu);
  received.push_back(std::move(e));
}

// Installs the collecting sink for a test's lifetime and hands over what it received.
class Recording {
 public:
  Recording() {
    received.clear();
    set_trace_sink(collect);
  }
  ~Recording() { set_trace_sink(nullptr); }
  std::vector<TraceEvent> events() {
    drain_traced_executions(5000);
    std::lock_guard<std::mutex> lock(received_mu);
    return received;
  }
};

std::vector<TraceEvent> of_kind(const std::vector<TraceEvent>& events, Kind kind) {
  std::vector<TraceEvent> out;
  std::copy_if(events.begin(), events.end(), std::back_inserter(out),
               [&](const TraceEvent& e) { return e.kind == kind; });
  return out;
}

int64_t number(const TraceEvent& e, const std::string& key) {
  for (const auto& [k, v] : e.numbers)
    if (k == key) return v;
  return -1;
}

std::string text(const TraceEvent& e, const std::string& key) {
  for (const auto& [k, v] : e.text)
    if (k == key) return v;
  return "";
}

std::shared_ptr<const graph::Origin> origin(const std::string& op, const std::string& location) {
  auto o = std::make_shared<graph::Origin>();
  o->op = op;
  o->location = location;
  return o;
}

TEST(Trace, NothingIsReportedWithoutASink) {
  ASSERT_FALSE(tracing());
  int64_t before = trace_events_emitted();
  std::vector<float> data{1, 2, 3, 4}, out(4);
  BufferRef x(0, 16), y(0, 16);
  upload(x, data.data(), DType::kF32);
  run({"times5", times(5), {{&x, vec(4)}}, {{&y, vec(4)}}, origin("test::times", "user.py:1")});
  download(y, out.data(), "test");
  EXPECT_EQ(out[3], 20);
  EXPECT_EQ(trace_events_emitted(), before);
}

TEST(Trace, StrictOpReportsItsCopiesCompileAndExecutionWithTheUsersLine) {
  ModeScope strict(Mode::kStrict);
  Recording recording;
  std::vector<float> data{1, 2, 3, 4}, out(4);
  BufferRef x(0, 16), y(0, 16);
  auto line = origin("test::times", "user.py:7");
  int64_t before = trace_clock_ns();
  {
    TraceCause cause(line.get());  // as the binding does around a host-to-device copy
    upload(x, data.data(), DType::kF32);
  }
  run({"times7", times(7), {{&x, vec(4)}}, {{&y, vec(4)}}, line});
  {
    TraceCause cause(line.get());
    download(y, out.data(), "item");
  }
  EXPECT_EQ(out[0], 7);
  std::vector<TraceEvent> events = recording.events();

  auto to_device = of_kind(events, Kind::kCopyToDevice);
  ASSERT_EQ(to_device.size(), 1u);
  EXPECT_EQ(number(to_device[0], "bytes"), 16);
  EXPECT_EQ(to_device[0].location, "user.py:7");

  // Compiled (ctest turns the disk tier off), or loaded from the disk tier of an earlier run.
  auto compiles = of_kind(events, Kind::kCompile), loads = of_kind(events, Kind::kCacheLoad);
  compiles.insert(compiles.end(), loads.begin(), loads.end());
  ASSERT_EQ(compiles.size(), 1u);
  EXPECT_EQ(text(compiles[0], "cache"), compiles[0].kind == Kind::kCompile ? "miss" : "disk");
  EXPECT_EQ(compiles[0].location, "user.py:7");
  EXPECT_GT(compiles[0].end_ns, compiles[0].start_ns);

  auto executions = of_kind(events, Kind::kExecution);
  ASSERT_EQ(executions.size(), 1u);
  EXPECT_EQ(executions[0].name, "test::times");
  EXPECT_EQ(text(executions[0], "program"), "op");
  EXPECT_EQ(executions[0].location, "user.py:7");
  EXPECT_GE(executions[0].start_ns, before);
  EXPECT_GE(executions[0].end_ns, executions[0].start_ns);

  auto to_host = of_kind(events, Kind::kCopyToHost);
  ASSERT_EQ(to_host.size(), 1u);
  EXPECT_EQ(number(to_host[0], "bytes"), 16);
  EXPECT_EQ(text(to_host[0], "reason"), "item");
  EXPECT_GE(to_host[0].start_ns, executions[0].end_ns);  // the copy waits for the data, untimed
}

TEST(Trace, LazyWindowIsOneExecutionNamingItsOpsAndTheCut) {
  ModeScope lazy(Mode::kLazy);
  std::vector<float> data{1, 2, 3, 4}, out(4);
  BufferRef x(0, 16), y(0, 16);
  upload(x, data.data(), DType::kF32);
  Recording recording;
  run({"times11", times(11), {{&x, vec(4)}}, {{&y, vec(4)}}, origin("test::first", "user.py:10")});
  run({"times13", times(13), {{&y, vec(4)}}, {{&y, vec(4)}}, origin("test::last", "user.py:11")});
  auto read = origin("aten::item", "user.py:12");
  {
    TraceCause cause(read.get());
    download(y, out.data(), "item");
  }
  EXPECT_EQ(out[0], 143);
  auto executions = of_kind(recording.events(), Kind::kExecution);
  ASSERT_EQ(executions.size(), 1u);
  const TraceEvent& w = executions[0];
  EXPECT_EQ(w.name, "lazy window (2 ops)");
  EXPECT_EQ(number(w, "ops"), 2);
  EXPECT_EQ(w.location, "user.py:10");
  EXPECT_EQ(text(w, "first op"), "test::first at user.py:10");
  EXPECT_EQ(text(w, "last op"), "test::last at user.py:11");
  EXPECT_EQ(text(w, "cut"), "item");
  EXPECT_EQ(text(w, "cut at"), "user.py:12");
}

TEST(Trace, WorkIsLinkedToTheHostOpThatIssuedIt) {
  ModeScope strict(Mode::kStrict);
  std::vector<float> data{1, 2, 3, 4};
  BufferRef x(0, 16), y(0, 16);
  Recording recording;
  set_trace_correlation(42);
  upload(x, data.data(), DType::kF32);
  run({"times17", times(17), {{&x, vec(4)}}, {{&y, vec(4)}}, origin("test::times", "user.py:20")});
  set_trace_correlation(0);
  std::vector<TraceEvent> events = recording.events();
  ASSERT_EQ(events.size(), 3u);  // copy, compile, execution
  for (const TraceEvent& e : events) EXPECT_EQ(e.correlation, 42) << e.name;
}

TEST(Trace, StoppedSinkReceivesNothingMore) {
  int64_t before;
  {
    Recording recording;
    before = trace_events_emitted();
  }
  EXPECT_FALSE(tracing());
  std::vector<float> data{1, 2, 3, 4};
  BufferRef x(0, 16);
  upload(x, data.data(), DType::kF32);
  EXPECT_EQ(trace_events_emitted(), before);
}

TraceEvent reported(Kind kind, int device, int64_t start, int64_t end) {
  TraceEvent e(kind, "x", device);
  e.start_ns = start;
  e.end_ns = end;
  return e;
}

TEST(Trace, ExecutionsArePlacedInDispatchOrderOnEachDevice) {
  // Device 0: the first program was reported done late (at 100), after the two dispatched after it
  // (done at 50 and 60): it ended by 50; the second then ran from 50 to 50, the third from 50 to 60.
  std::vector<TraceEvent> events{reported(Kind::kExecution, 0, 0, 100), reported(Kind::kExecution, 1, 5, 30),
                                 reported(Kind::kExecution, 0, 20, 60), reported(Kind::kCopyToHost, 0, 1, 2),
                                 reported(Kind::kExecution, 0, 10, 50)};
  place_on_device_timelines(events);
  auto span = [&](size_t i) { return std::make_pair(events[i].start_ns, events[i].end_ns); };
  EXPECT_EQ(span(0), std::make_pair(int64_t{0}, int64_t{50}));
  EXPECT_EQ(span(4), std::make_pair(int64_t{50}, int64_t{50}));
  EXPECT_EQ(span(2), std::make_pair(int64_t{50}, int64_t{60}));
  EXPECT_EQ(span(1), std::make_pair(int64_t{5}, int64_t{30}));  // another device: its own timeline
  EXPECT_EQ(span(3), std::make_pair(int64_t{1}, int64_t{2}));    // not an execution
}

TEST(Trace, CausesNestAndAnOpWithoutOriginKeepsTheEnclosingOne) {
  auto outer = origin("aten::outer", "user.py:1");
  auto inner = origin("aten::inner", "user.py:2");
  EXPECT_EQ(TraceCause::current(), nullptr);
  {
    TraceCause a(outer.get());
    {
      TraceCause b(inner.get());
      EXPECT_EQ(TraceCause::location(), "user.py:2");
      TraceCause c(nullptr);
      EXPECT_EQ(TraceCause::location(), "user.py:2");
    }
    EXPECT_EQ(TraceCause::location(), "user.py:1");
  }
  EXPECT_EQ(TraceCause::current(), nullptr);
}

}  // namespace
}  // namespace torchtpu::exec
