#include "exec/trace.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <thread>

#include "runtime/event.h"

namespace torchtpu::exec {
namespace {

std::atomic<TraceSink> installed_sink{nullptr};
std::atomic<int64_t> emitted{0};
std::atomic<int> executions_in_flight{0};
thread_local const graph::Origin* cause = nullptr;
thread_local int64_t correlation = 0;

std::string op_name(const graph::Node& n) { return n.origin ? n.origin->op : n.key.substr(0, n.key.find('|')); }
std::string describe(const graph::Node& n) { return n.origin ? n.origin->describe() : op_name(n); }

// A single op is named by its ATen op; a window, a compiled graph or a collective by what it is.
TraceEvent execution_event(int device, const std::string& what, const RunInfo& info) {
  bool window = info.first && info.ops > 1;
  TraceEvent e(TraceEvent::Kind::kExecution,
               window ? std::string(info.kind) + " (" + std::to_string(info.ops) + " ops)"
                      : info.first ? op_name(*info.first) : what,
               device);
  e.location = info.first && info.first->origin ? info.first->origin->location : TraceCause::location();
  e.correlation = correlation;
  e.text = {{"program", info.kind}};
  if (!info.first) e.text.emplace_back("what", what);  // a compiled graph or collective: its description
  if (window) {
    e.text.emplace_back("first op", describe(*info.first));
    e.text.emplace_back("last op", describe(*info.last));
  }
  if (info.cut) e.text.emplace_back("cut", *info.cut);
  if (info.cut_at && !info.cut_at->location.empty()) e.text.emplace_back("cut at", info.cut_at->location);
  e.numbers = {{"ops", info.ops}};
  return e;
}

}  // namespace

void set_trace_sink(TraceSink sink) { installed_sink.store(sink, std::memory_order_release); }

bool tracing() { return installed_sink.load(std::memory_order_relaxed) != nullptr; }

void emit(TraceEvent&& event) {
  TraceSink sink = installed_sink.load(std::memory_order_acquire);
  if (!sink) return;  // the profiler stopped while the work ran
  emitted.fetch_add(1, std::memory_order_relaxed);
  sink(std::move(event));
}

int64_t trace_events_emitted() { return emitted.load(); }

void set_trace_correlation(int64_t id) { correlation = id; }

int64_t trace_correlation() { return correlation; }

int64_t trace_clock_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

TraceCause::TraceCause(const graph::Origin* origin) : previous_(cause) {
  if (origin) cause = origin;  // an op without an origin still works for the enclosing one
}

TraceCause::~TraceCause() { cause = previous_; }

const graph::Origin* TraceCause::current() { return cause; }

std::string TraceCause::location() { return cause ? cause->location : std::string(); }

void trace_execution(const runtime::Event& done, int device, int64_t dispatched_ns, const std::string& what,
                     const RunInfo& info) {
  // std::function needs a copyable callback; the event moves out of it once.
  auto event = std::make_shared<TraceEvent>(execution_event(device, what, info));
  executions_in_flight++;
  try {
    done.on_ready([event, dispatched_ns](const std::string& error) {
      event->start_ns = dispatched_ns;
      event->end_ns = trace_clock_ns();
      if (!error.empty()) event->text.emplace_back("error", error);
      emit(std::move(*event));
      executions_in_flight--;
    });
  } catch (const std::exception&) {
    executions_in_flight--;  // a profiler must never fail the execution it watches
  }
}

void trace_copy(TraceEvent::Kind kind, int device, int64_t start_ns, size_t bytes, const std::string& reason) {
  bool to_device = kind == TraceEvent::Kind::kCopyToDevice;
  TraceEvent e(kind, to_device ? "copy host to device" : "copy device to host", device);
  e.start_ns = start_ns;
  e.end_ns = trace_clock_ns();
  e.location = TraceCause::location();
  e.correlation = correlation;
  e.numbers = {{"bytes", static_cast<int64_t>(bytes)}};
  if (!reason.empty()) e.text = {{"reason", reason}};
  emit(std::move(e));
}

void place_on_device_timelines(std::vector<TraceEvent>& events) {
  std::map<int, std::vector<TraceEvent*>> by_device;
  for (TraceEvent& e : events)
    if (e.kind == TraceEvent::Kind::kExecution) by_device[e.device].push_back(&e);
  for (auto& [device, runs] : by_device) {
    auto dispatch_order = [](const TraceEvent* a, const TraceEvent* b) { return a->start_ns < b->start_ns; };
    std::stable_sort(runs.begin(), runs.end(), dispatch_order);
    for (size_t i = runs.size() - 1; i-- > 0;) runs[i]->end_ns = std::min(runs[i]->end_ns, runs[i + 1]->end_ns);
    for (size_t i = 1; i < runs.size(); ++i) runs[i]->start_ns = std::max(runs[i]->start_ns, runs[i - 1]->end_ns);
  }
}

void drain_traced_executions(int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (executions_in_flight.load() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

}  // namespace torchtpu::exec
