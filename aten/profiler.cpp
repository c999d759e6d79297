// Kineto formats numeric details with fmt, which PyTorch's libraries do not export: compile it here.
#define FMT_HEADER_ONLY
#include "aten/profiler.h"

#include <kineto/libkineto.h>
#include <kineto/output_base.h>

#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "exec/trace.h"

namespace torchtpu::aten {
namespace {

using libkineto::ActivityType;
using Kind = exec::TraceEvent::Kind;

// The rows of a device's process in the timeline (kineto's "resources").
enum Row : int32_t { kPrograms = 0, kCopies = 1, kCompiles = 2 };

// Kineto's names for what the device did: programs are kernels (category "kernel"), copies are
// memcpys ("gpu_memcpy"), compiles and CPU fallbacks are the backend's host runtime.
ActivityType activity_type(Kind kind) {
  switch (kind) {
    case Kind::kExecution: return ActivityType::CONCURRENT_KERNEL;
    case Kind::kCopyToDevice:
    case Kind::kCopyToHost: return ActivityType::GPU_MEMCPY;
    default: return ActivityType::PRIVATEUSE1_RUNTIME;
  }
}

// `s` made safe inside a JSON string: kineto quotes details without escaping them (and turns
// backslashes into slashes), so quotes become apostrophes and control characters spaces.
std::string json_safe(std::string s) {
  for (char& c : s) {
    if (c == '"') c = '\'';
    if (c == '\\') c = '/';
    if (static_cast<unsigned char>(c) < 0x20) c = ' ';
  }
  return s;
}

// The event's details: the "args" a trace viewer shows with it.
void add_details(libkineto::GenericTraceActivity& activity, const exec::TraceEvent& e) {
  if (!e.location.empty()) activity.addMetadataQuoted("user line", json_safe(e.location));
  for (const auto& [key, value] : e.text) activity.addMetadataQuoted(key, json_safe(value));
  for (const auto& [key, value] : e.numbers) activity.addMetadata(key, value);
}

class Session;

// The recording session, if any, and the lock its events are kept under (executions report from
// PJRT's threads, compiles from compile threads).
std::mutex recording_mu;
Session* recording = nullptr;
// The ids of the host ops this thread is inside, innermost last.
thread_local std::vector<int64_t> correlations;

void deliver(exec::TraceEvent&& event);

// One profiling run: collects the executor's events between start() and stop(), then hands them
// to kineto as activities.
class Session : public libkineto::IActivityProfilerSession {
 public:
  explicit Session(std::set<ActivityType> types)
      : types_(std::move(types)), trace_(std::make_unique<libkineto::CpuTraceBuffer>()) {
    trace_->span = libkineto::TraceSpan(0, 0, "torchtpu");
    trace_->span.iteration = 0;
  }
  ~Session() override {
    std::lock_guard<std::mutex> lock(recording_mu);
    if (recording == this) {
      exec::set_trace_sink(nullptr);
      recording = nullptr;
    }
  }

  void start() override {
    {
      std::lock_guard<std::mutex> lock(recording_mu);
      recording = this;
      trace_->span.startTime = exec::trace_clock_ns();
    }
    exec::set_trace_sink(deliver);
  }

  void stop() override {
    // The profiler synchronized the device first; the executions it waited for may still be
    // reporting from PJRT's threads.
    exec::drain_traced_executions(2000);
    exec::set_trace_sink(nullptr);
    std::lock_guard<std::mutex> lock(recording_mu);
    if (recording == this) recording = nullptr;
    trace_->span.endTime = exec::trace_clock_ns();
    exec::place_on_device_timelines(events_);
    for (size_t i = 0; i < events_.size(); ++i) trace_->activities.push_back(activity_of(events_[i], threads_[i]));
    events_.clear();
    threads_.clear();
  }

  // With recording_mu held. Kept as reported until the run stops: executions are placed on the
  // device's timeline once all of them are known.
  void record(exec::TraceEvent&& e) {
    if (!types_.count(activity_type(e.kind))) return;
    threads_.push_back(e.kind == Kind::kCpuFallback ? libkineto::systemThreadId() : 0);
    events_.push_back(std::move(e));
  }

  std::vector<std::string> errors() override { return {}; }

  void processTrace(libkineto::ActivityLogger& logger) override {
    if (!trace_) return;  // already handed over
    for (const auto& activity : trace_->activities) logger.handleGenericActivity(*activity);
  }

  // Links each event to the host op that issued it (the trace's "External id"), as CUDA's kernels
  // are linked to the ops that launched them.
  void processTrace(libkineto::ActivityLogger& logger, libkineto::getLinkedActivityCallback linked, int64_t,
                    int64_t) override {
    if (!trace_) return;
    for (const auto& activity : trace_->activities)
      if (activity->id != 0) activity->linked = linked(activity->id);
    processTrace(logger);
  }

  // PyTorch announces each host op it records; the device work issued inside takes its id.
  void pushCorrelationId(uint64_t id) override {
    correlations.push_back(static_cast<int64_t>(id));
    exec::set_trace_correlation(correlations.back());
  }
  void popCorrelationId() override {
    if (!correlations.empty()) correlations.pop_back();
    exec::set_trace_correlation(correlations.empty() ? 0 : correlations.back());
  }

  // Kineto takes one process name per session: the first device's (a second device's rows still
  // carry their names).
  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    return std::make_unique<libkineto::DeviceInfo>(0, libkineto::kExceedMaxPid, "tpu:0", "torchtpu");
  }

  std::vector<libkineto::ResourceInfo> getResourceInfos() override {
    std::vector<libkineto::ResourceInfo> rows;
    for (int d : devices_) {
      std::string device = "tpu:" + std::to_string(d) + " ";
      rows.emplace_back(d, kPrograms, kPrograms, device + "programs");
      rows.emplace_back(d, kCopies, kCopies, device + "host<->device copies");
      if (d == 0) rows.emplace_back(d, kCompiles, kCompiles, "compiles");
    }
    return rows;
  }

  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override { return std::move(trace_); }

 private:
  // Device work goes on rows of the device's process, a CPU fallback on the host thread that ran it.
  std::unique_ptr<libkineto::GenericTraceActivity> activity_of(const exec::TraceEvent& e, int32_t host_thread) {
    ActivityType type = activity_type(e.kind);
    auto activity = std::make_unique<libkineto::GenericTraceActivity>(trace_->span, type, json_safe(e.name));
    add_details(*activity, e);
    activity->id = static_cast<int32_t>(e.correlation);  // linked to its host op in processTrace
    activity->startTime = e.start_ns;
    activity->endTime = e.end_ns;
    if (e.kind == Kind::kCpuFallback) {
      activity->device = libkineto::processId();
      activity->resource = host_thread;
    } else {
      bool on_device = e.kind != Kind::kCompile && e.kind != Kind::kCacheLoad;  // compiles serve every device
      activity->device = on_device ? e.device : 0;
      activity->resource = e.kind == Kind::kExecution ? kPrograms : on_device ? kCopies : kCompiles;
      activity->addMetadata("device", activity->device);  // as CUDA's kernels and copies say (TensorBoard reads it)
      activity->addMetadata("stream", activity->resource);
      devices_.insert(static_cast<int>(activity->device));
    }
    activity->threadId = activity->resource;
    return activity;
  }

  std::set<ActivityType> types_;
  std::unique_ptr<libkineto::CpuTraceBuffer> trace_;
  std::vector<exec::TraceEvent> events_;
  std::vector<int32_t> threads_;  // the host thread of each event (CPU fallbacks)
  std::set<int> devices_;
};

void deliver(exec::TraceEvent&& event) {
  std::lock_guard<std::mutex> lock(recording_mu);
  if (recording) recording->record(std::move(event));
}

class Profiler : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override {
    static const std::string name = "torchtpu";
    return name;
  }

  const std::set<ActivityType>& availableActivities() const override {
    static const std::set<ActivityType> types{ActivityType::CONCURRENT_KERNEL, ActivityType::GPU_MEMCPY,
                                              ActivityType::PRIVATEUSE1_RUNTIME};
    return types;
  }

  // ProfilerActivity.PrivateUse1 asks for the device's kernels and copies; ProfilerActivity.CPU
  // alone does not, and then nothing is recorded.
  std::unique_ptr<libkineto::IActivityProfilerSession> configure(const std::set<ActivityType>& types,
                                                                 const libkineto::Config&) override {
    if (!types.count(ActivityType::CONCURRENT_KERNEL) && !types.count(ActivityType::GPU_MEMCPY)) return nullptr;
    return std::make_unique<Session>(types);
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(int64_t, int64_t,
                                                                 const std::set<ActivityType>& types,
                                                                 const libkineto::Config& config) override {
    return configure(types, config);
  }
};

}  // namespace

void register_profiler() {
  libkineto::api().registerProfilerFactory([] { return std::make_unique<Profiler>(); });
}

}  // namespace torchtpu::aten
