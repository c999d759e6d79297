// What the executor did, for a profiler: program runs, compiles, cache loads and host<->device
// copies, each with its real start and end and the user's line that caused it. The core only
// reports; the binding (aten/profiler.cpp) turns the reports into torch.profiler events. Nothing
// is built unless a sink is installed: every hook point first checks tracing(), one relaxed load.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "graph/node.h"

namespace torchtpu::runtime {
class Event;
}

namespace torchtpu::exec {

struct TraceEvent {
  enum class Kind { kExecution, kCompile, kCacheLoad, kCopyToDevice, kCopyToHost, kCpuFallback };
  TraceEvent(Kind kind, std::string name, int device = 0) : kind(kind), name(std::move(name)), device(device) {}
  Kind kind;
  std::string name;  // "aten::add", "fused window (12 ops)", "compile", "copy host to device", ...
  int device = 0;
  int64_t start_ns = 0, end_ns = 0;  // trace_clock_ns()
  std::string location;              // the user's "file:line", "" when no Python frame caused it
  int64_t correlation = 0;           // the profiler's id of the host op that issued it (0: none)
  std::vector<std::pair<std::string, std::string>> text;      // details shown with the event
  std::vector<std::pair<std::string, int64_t>> numbers;
};

// Receives events: host-side ones (compiles, loads, copies, fallbacks) on the thread that did the
// work, right after it; executions from whichever thread sees them finish. Must not throw.
using TraceSink = void (*)(TraceEvent&& event);

// Installs (or, with null, removes) the sink. While one is installed tracing() is true.
void set_trace_sink(TraceSink sink);
bool tracing();
void emit(TraceEvent&& event);
// Events handed to a sink so far (a profiler that stopped must not keep receiving them).
int64_t trace_events_emitted();

// The profiler's id of the host op this thread is running (PyTorch's "External id"), so that the
// work the op issues can be linked to it; 0 outside ops. Set by the binding while it traces.
void set_trace_correlation(int64_t id);
int64_t trace_correlation();

// Nanoseconds on CLOCK_REALTIME, the clock torch.profiler stamps its own events with.
int64_t trace_clock_ns();

// The user's line the calling thread is working for (an op, a host read), so that the compiles
// and copies it causes can name it. Set around ops by exec::run and around copies and host
// reads by the binding; the origin must outlive the scope. Costs a thread-local store.
class TraceCause {
 public:
  explicit TraceCause(const graph::Origin* origin);
  ~TraceCause();
  TraceCause(const TraceCause&) = delete;
  TraceCause& operator=(const TraceCause&) = delete;
  static const graph::Origin* current();
  static std::string location();  // current()'s location, or ""

 private:
  const graph::Origin* previous_;
};

// What a program run is: its kind ("op", "fused window", "compiled graph", ...), its first and
// last op where they are graph nodes, how many ops it runs and, for a window, why and where the
// pending graph was cut. Pointers, so that describing a run costs nothing while nobody traces.
struct RunInfo {
  const char* kind = "program";
  const graph::Node* first = nullptr;
  const graph::Node* last = nullptr;
  int64_t ops = 1;
  const std::string* cut = nullptr;
  const graph::Origin* cut_at = nullptr;
};

// Reports the execution `done` tracks once it finishes: from its dispatch to when PJRT said it was
// done, which can be later than it really ended (see place_on_device_timelines).
void trace_execution(const runtime::Event& done, int device, int64_t dispatched_ns, const std::string& what,
                     const RunInfo& info);

// Turns reported executions (dispatch to completion notice) into when each device ran them, as a
// device that runs its programs in dispatch order (a TPU, a GPU stream) does: a program ends by
// the time any later one is reported done, and starts at its dispatch or when the previous one
// ended, whichever is later. Events of other kinds are left alone.
void place_on_device_timelines(std::vector<TraceEvent>& events);

// Reports a host<->device copy of `bytes` that started at `start_ns` and ends now; `reason` says
// why the host reads (item, cpu, print, ...).
void trace_copy(TraceEvent::Kind kind, int device, int64_t start_ns, size_t bytes, const std::string& reason = "");

// Waits (at most `timeout_ms`) until every traced execution has been reported.
void drain_traced_executions(int timeout_ms);

}  // namespace torchtpu::exec
