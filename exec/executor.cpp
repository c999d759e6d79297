#include "exec/executor.h"

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "exec/byte_size.h"
#include "exec/capture.h"
#include "exec/compile_cache.h"
#include "exec/metrics.h"
#include "exec/op_record.h"
#include "exec/padded_view.h"
#include "exec/quick_compile.h"
#include "exec/runtime_context.h"
#include "exec/trace.h"
#include "graph/pending_graph.h"
#include "runtime/error.h"

namespace torchtpu::exec {
namespace {

using graph::NodePtr;
using graph::ValuePtr;
using graph::Window;

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::string(v) != "0";
}

Mode initial_mode() {
  if (env_flag("TORCHTPU_LAUNCH_BLOCKING")) return Mode::kDebug;
  const char* name = std::getenv("TORCHTPU_EAGER_MODE");
  if (!name || !*name) return Mode::kStrict;
  if (auto m = parse_mode(name)) return *m;
  throw std::invalid_argument(std::string("TORCHTPU_EAGER_MODE=") + name +
                              " is not a mode: use debug, strict, fused or lazy");
}

std::atomic<Mode>& current_mode() {
  static std::atomic<Mode> m{initial_mode()};
  return m;
}

size_t max_window_ops() {
  static const size_t n = [] {
    const char* v = std::getenv("TORCHTPU_FUSED_MAX_OPS");
    return v ? std::stoul(v) : size_t{4096};
  }();
  return n;
}

// Completion events of dispatched executions, per device, with what they run (for errors).
class PendingWork {
 public:
  void add(int device, runtime::Event done, std::string what) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& events = by_device_[device];
    while (!events.empty() && events.front().first.is_ready()) {
      check(events.front());
      events.pop_front();
    }
    events.emplace_back(std::move(done), std::move(what));
  }
  void wait(int device) {
    std::deque<std::pair<runtime::Event, std::string>> events;
    {
      std::lock_guard<std::mutex> lock(mu_);
      events.swap(by_device_[device]);
    }
    for (const auto& e : events) check(e);
  }

 private:
  static void check(const std::pair<runtime::Event, std::string>& e) {
    try {
      e.first.await();
    } catch (const runtime::PjrtError& error) {
      throw ExecutionFailed(e.second + " failed on the device: " + error.what());
    }
  }
  std::mutex mu_;
  std::unordered_map<int, std::deque<std::pair<runtime::Event, std::string>>> by_device_;
};

// Process-lifetime objects are deliberately never destroyed: destroying executables and
// buffers at exit, after a GPU driver has shut down, fails noisily. The OS reclaims them.
PendingWork& pending_work() {
  static auto* p = new PendingWork;
  return *p;
}

struct DeferredCheck {
  std::shared_ptr<BufferRef> ok;
  graph::CheckPtr check;
};

class DeferredChecks {
 public:
  void add(DeferredCheck check) {
    std::lock_guard<std::mutex> lock(mu_);
    checks_.push_back(std::move(check));
  }
  // Reads every pending check, so the values carrying them know; throws for the first that failed.
  // The flags' reads are all started before any is awaited: one wait for the lot, not one each.
  void verify() {
    std::vector<DeferredCheck> checks;
    {
      std::lock_guard<std::mutex> lock(mu_);
      checks.swap(checks_);
    }
    std::vector<DeferredCheck*> read;
    for (DeferredCheck& c : checks) {
      const ValuePtr& v = c.ok->value();
      if (v && v->is_materialized()) read.push_back(&c);  // else the checking op itself failed and said so
    }
    std::unique_ptr<bool[]> ok(new bool[read.size()]);
    std::vector<runtime::Event> reads;
    reads.reserve(read.size());
    std::exception_ptr read_failure;
    for (size_t i = 0; i < read.size(); ++i) {
      try {
        reads.push_back(read[i]->ok->value()->buffer()->copy_to_host_async(&ok[i], 1));
      } catch (...) {
        read_failure = std::current_exception();
        break;
      }
    }
    for (const runtime::Event& r : reads) {  // every started read, before `ok` may go away
      try {
        r.await();
      } catch (...) {
        if (!read_failure) read_failure = std::current_exception();
      }
    }
    if (read_failure) std::rethrow_exception(read_failure);
    const graph::DeviceCheck* failed = nullptr;
    for (size_t i = 0; i < read.size(); ++i) {
      read[i]->check->state = ok[i] ? graph::DeviceCheck::kPassed : graph::DeviceCheck::kFailed;
      if (!ok[i] && !failed) failed = read[i]->check.get();
    }
    if (failed) throw CheckFailed(failed->message, failed->index_error);
  }

 private:
  std::mutex mu_;
  std::vector<DeferredCheck> checks_;
};

DeferredChecks& deferred_checks() {
  static auto* d = new DeferredChecks;
  return *d;
}

// Rethrows a PJRT out-of-memory error as OutOfDeviceMemory naming the bytes requested.
[[noreturn]] void rethrow_memory_error(const runtime::PjrtError& e, int device, size_t bytes,
                                       const std::string& what) {
  if (e.code() != PJRT_Error_Code_RESOURCE_EXHAUSTED) throw e;
  throw OutOfDeviceMemory("tpu:" + std::to_string(device) + " is out of memory: tried to allocate " +
                          format_bytes(static_cast<int64_t>(bytes)) + " for " + what + " (" +
                          format_bytes(device_memory(device).allocated) + " held by tensors). " + e.what());
}

// The user's line of an op, or its name when it has none.
template <typename Op>
std::string op_of(const Op& op) {
  return op.origin ? op.origin->describe() : op.key.substr(0, op.key.find('|'));
}

std::string describe(const std::vector<NodePtr>& nodes) {
  if (nodes.size() == 1) return op_of(*nodes[0]);
  return "a fused window of " + std::to_string(nodes.size()) + " ops (from " + op_of(*nodes.front()) +
         " to " + op_of(*nodes.back()) + ")";
}

// What counts as "the same" op or window when deciding whether a compile is a recompilation.
std::string identity_of(const std::vector<NodePtr>& nodes) {
  const graph::Node& first = *nodes.front();
  if (!first.origin || first.origin->location.empty()) return "";
  return (nodes.size() == 1 ? "" : "window@") + first.origin->describe();
}

// Values the nodes produced but nobody kept (or that a failed execution never produced) stay
// unmaterialized: their links to the nodes, which are about to go, are cut when the nodes were run,
// on every path out (a stale link could otherwise wire a later window to a reused address).
class DiscardUnmaterialized {
 public:
  explicit DiscardUnmaterialized(const std::vector<NodePtr>& nodes) : nodes_(nodes) {}
  ~DiscardUnmaterialized() {
    for (const NodePtr& n : nodes_)
      for (const auto& weak : n->outputs)
        if (ValuePtr v = weak.lock(); v && !v->is_materialized()) v->set_producer(nullptr, 0);
  }

 private:
  const std::vector<NodePtr>& nodes_;
};

// Bytes the values hold once produced (what an out-of-memory error names).
size_t bytes_of(const std::vector<ValuePtr>& values) {
  size_t bytes = 0;
  for (const ValuePtr& v : values) bytes += v->length() * element_size(v->dtype());
  return bytes;
}

void execute(const Window& w, runtime::Executable& exe, const std::string& what, const RunInfo& info,
             const std::vector<int64_t>& keep = {}) {
  for (const ValuePtr& p : w.parameters())  // (a window is keyed, and may be compiled, before they are)
    if (!p->is_materialized()) throw std::logic_error(what + ": an input is produced outside the window and never materialized");
  int device = w.results().empty() ? 0 : w.results()[0]->device();
  auto produced = execute_program(exe, device, w.parameters(), bytes_of(w.results()), what, keep, info);
  for (size_t i = 0; i < produced.size(); ++i) w.results()[i]->materialize(std::move(produced[i]));
}

// A window's parameters that no storage holds any more -- the old contents of tensors it updates
// in place: an optimizer's parameters and states -- lend their buffers to results of the same type,
// so that a window does not hold two copies of what it updates (docs/design.md, "Optimizer
// windows donate").
struct Donation {
  std::vector<std::pair<size_t, size_t>> aliases;  // (parameter, result)
  std::string key;  // appended to the window's key: a program that may donate is another program
};

Donation donation_of(const Window& w) {
  std::map<std::pair<DType, int64_t>, std::deque<size_t>> results_of_type;
  for (size_t r = 0; r < w.results().size(); ++r)
    results_of_type[{w.results()[r]->dtype(), w.results()[r]->length()}].push_back(r);
  Donation d;
  for (size_t p = 0; p < w.parameters().size(); ++p) {
    const graph::DeviceValue& old = *w.parameters()[p];
    if (old.is_held()) continue;
    auto free = results_of_type.find({old.dtype(), old.length()});
    if (free == results_of_type.end() || free->second.empty()) continue;
    d.aliases.emplace_back(p, free->second.front());
    free->second.pop_front();
    d.key += "|donate " + std::to_string(p) + ">" + std::to_string(d.aliases.back().second);
  }
  return d;
}

// The donating parameters something outside the window still reads (a compiled graph's pending
// first run, a host copy in flight): XLA copies those instead of reusing their buffers. Inside,
// the window's parameter list and its nodes' inputs hold them.
std::vector<int64_t> still_read(const Window& w, const Donation& d) {
  std::unordered_map<const graph::DeviceValue*, long> inside;
  for (const auto& alias : d.aliases) inside[w.parameters()[alias.first].get()] = 1;
  for (const NodePtr& n : w.nodes())
    for (const ValuePtr& in : n->inputs)
      if (auto it = inside.find(in.get()); it != inside.end()) it->second++;
  std::vector<int64_t> keep;
  for (const auto& alias : d.aliases) {
    const ValuePtr& v = w.parameters()[alias.first];
    if (v.use_count() != inside[v.get()] || v->buffer().use_count() != 1) keep.push_back(static_cast<int64_t>(alias.first));
  }
  return keep;
}

// Host data as the contents of `value` (counted, and traced for a profiler). With `when_read` the
// copy is asynchronous: `when_read` runs once PJRT has read `data`, and synchronize() waits for it.
void materialize_from_host(graph::DeviceValue& value, const void* data, std::function<void()> when_read = nullptr) {
  size_t bytes = value.length() * element_size(value.dtype());
  std::pair<runtime::Buffer, runtime::Event> sent;
  int64_t start = tracing() ? trace_clock_ns() : 0;
  try {
    const runtime::Device& to = exec::device(value.device());
    if (when_read)
      sent = client().to_device_async(data, value.dtype(), {value.length()}, to);
    else
      sent.first = client().to_device(data, value.dtype(), {value.length()}, to);
  } catch (const runtime::PjrtError& e) {
    if (when_read) when_read();
    rethrow_memory_error(e, value.device(), bytes, "a host-to-device copy");
  }
  if (start) trace_copy(TraceEvent::Kind::kCopyToDevice, value.device(), start, bytes);
  counters().bytes_to_device += static_cast<int64_t>(bytes);
  if (when_read) {
    counters().async_bytes_to_device += static_cast<int64_t>(bytes);
    try {
      sent.second.on_ready([when_read](const std::string&) { when_read(); });
    } catch (const runtime::PjrtError&) {  // no callback: wait here instead
      sent.second.await();
      when_read();
    }
    pending_work().add(value.device(), std::move(sent.second), "a host-to-device copy");
  }
  value.materialize(std::make_shared<runtime::Buffer>(std::move(sent.first)));
}

// Zeros uploaded as a zero fill's one result (graph::Node::zero_bytes).
void upload_zeros(graph::DeviceValue& v) {
  std::vector<char> zeros(v.length() * element_size(v.dtype()), 0);
  materialize_from_host(v, zeros.data());
}

// One node as its own program, from the single-op cache. `kind` tells a profiler why it runs alone.
void execute_single(const NodePtr& node, const char* kind = "op") {
  Window w({node}, Window::Keep::kAlive);
  if (w.results().empty()) return;
  TraceCause cause(node->origin.get());  // a compile it needs names the op's line
  std::string what = op_of(*node);
  auto text = [&] { return w.program_text(); };
  auto names = [&] { return ProgramNames{what, identity_of({node})}; };
  auto exe = node->zero_bytes ? cached_executable_or_compile_async(w.key(), text, names)
                              : cached_executable(w.key(), text, names);
  if (!exe) return upload_zeros(*w.results().at(0));  // nobody waits for a compile to make zeros
  execute(w, *exe, what, {kind, node.get(), node.get()});
}

// Compiles the programs of ops about to run op by op on threads of their own, so that two compile
// side by side while the caller records or waits: ops that run op by op are mostly first seen.
class CompileAhead {
 public:
  explicit CompileAhead(const std::vector<NodePtr>& nodes) : nodes_(nodes) {}

  // Starts the compiles of the programs not loaded among the ops from `first` on, in order, as
  // many as compile_ahead takes at once (a later call starts the rest). A lowering's error raises
  // for `first` only: a later op's own run raises it, after the ops before it ran.
  void from(size_t first) {
    if (tracing()) return;  // a profiler's trace names each compile's op and host call: at the op
    for (next_ = std::max(next_, first); next_ < nodes_.size(); ++next_) {
      const NodePtr& node = nodes_[next_];
      if (node->zero_bytes) continue;  // compiled in the background, not waited for
      try {
        Window w({node}, Window::Keep::kAlive);
        if (w.results().empty()) continue;
        auto text = [&] { return w.program_text(); };
        auto names = [&] { return ProgramNames{op_of(*node), identity_of({node})}; };
        if (!compile_ahead(w.key(), text, names)) return;
      } catch (...) {
        if (next_ == first) throw;
      }
    }
  }

 private:
  const std::vector<NodePtr>& nodes_;
  size_t next_ = 0;  // ops before it are loaded or compiling
};

// Strict mode's shortcut (exec/op_record.h): a loaded one-op program run without a node.
void run_bound(const BoundOp& op, const OpCall& call) {
  counters().strict_ops++;
  auto produced = execute_program(*op.exe, op.device, op.parameters, bytes_of(op.results), op_of(call));
  for (size_t i = 0; i < produced.size(); ++i) op.results[i]->materialize(std::move(produced[i]));
}

// True when a debug-mode NaN/Inf check finds a non-finite element in the flat value.
bool has_non_finite(const graph::DeviceValue& v) {
  DType t = v.dtype();
  if (!is_floating(t) && !is_complex(t)) return false;
  std::vector<unsigned char> host(v.length() * element_size(t));
  v.buffer()->copy_to_host(host.data(), host.size());
  auto any = [&](auto sample, auto bad) {
    using T = decltype(sample);
    for (size_t i = 0; i < host.size(); i += sizeof(T)) {
      T x;
      std::memcpy(&x, host.data() + i, sizeof(T));
      if (bad(x)) return true;
    }
    return false;
  };
  if (t == DType::kF16) return any(uint16_t{}, [](uint16_t b) { return (b & 0x7c00) == 0x7c00; });
  if (t == DType::kBF16) return any(uint16_t{}, [](uint16_t b) { return (b & 0x7f80) == 0x7f80; });
  if (t == DType::kF8E4M3FN) return any(uint8_t{}, [](uint8_t b) { return (b & 0x7f) == 0x7f; });
  if (t == DType::kF8E5M2) return any(uint8_t{}, [](uint8_t b) { return (b & 0x7c) == 0x7c; });
  if (t == DType::kF64 || t == DType::kC128) return any(double{}, [](double x) { return !std::isfinite(x); });
  return any(float{}, [](float x) { return !std::isfinite(x); });
}

void check_finite(const graph::Node& node) {
  for (const auto& weak : node.outputs)
    if (ValuePtr v = weak.lock(); v && v->is_materialized() && has_non_finite(*v))
      throw NonFiniteValue(op_of(node) + " produced NaN or Inf (TORCHTPU_CHECK_NANS=1)");
}

// Set by torchtpu.modes.one_program (see set_one_program_block).
std::atomic<bool>& one_program_block() {
  static std::atomic<bool> inside{false};
  return inside;
}

// The pending graph of the deferred modes and the lock that serializes recording into it and
// cutting it (the autograd engine records from its own thread).
struct Deferred {
  std::recursive_mutex mu;
  graph::PendingGraph graph;
  // Strict mode's waiting ops' outputs, one entry per node, held until the node runs: its program
  // is the one compiled for it when it was recorded, every output alive, however many of them its
  // caller has dropped since.
  std::vector<std::vector<ValuePtr>> outputs_held;
};

Deferred& deferred() {
  static auto* d = new Deferred;
  return *d;
}

// Whether a window ends where a training loop's step is cut (python/torchtpu/modes.py: the
// backward pass or the optimizer step begins, the optimizer step ends, an explicit sync). Such a
// window comes back every step: it is compiled at its first run. One cut anywhere else (a host
// read, a matrix-vector product) is compiled at its second: a prompt's prefill runs once, and its
// 90-op window compiled beside the caller's own single-op compiles made a first fused `generate`
// 1.6x slower (docs/design.md, "Windows compiled when they come back").
bool ends_a_step_part(const std::string& reason) {
  return reason == "backward" || reason == "optimizer step start" || reason == "optimizer step" || reason == "sync";
}

// Runs `nodes` one by one, each from the single-op cache, compiling `ahead` (CompileAhead): strict
// mode's waiting ops (their outputs held, to let go of once each ran) and a fused window cut by a
// host read, not one that ends a training step's part: compiling ahead there made a varying-length
// training run's windows ready later (docs/design.md, "Strict mode's first contact"). `kind` tells
// a profiler why.
void execute_op_by_op(const std::vector<NodePtr>& nodes, const char* kind, bool ahead_of_time,
                      std::vector<std::vector<ValuePtr>> outputs_held = {}) {
  CompileAhead ahead(nodes);
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (ahead_of_time) ahead.from(i);
    try {
      execute_single(nodes[i], kind);
    } catch (const runtime::PjrtError& e) {
      throw std::runtime_error(op_of(*nodes[i]) + ": " + e.what());
    }
    if (i < outputs_held.size()) outputs_held[i].clear();
  }
}

// Runs a cut window: one program from the cache; in fused mode, on a miss, op by op from the
// single-op cache while the window's program compiles in the background. `reason`: why the
// pending graph was cut here.
void execute_window(std::vector<NodePtr> nodes, Mode m, const std::string& reason) {
  DiscardUnmaterialized discard(nodes);
  if (m == Mode::kStrict) {
    std::vector<std::vector<ValuePtr>> held = std::exchange(deferred().outputs_held, {});
    return execute_op_by_op(nodes, "op (its program was compiling)", !held.empty(), std::move(held));
  }
  if (nodes.size() == 1) return execute_single(nodes[0]);
  Window w(nodes, Window::Keep::kHeld);
  if (w.results().empty()) return;  // nothing anyone can observe
  const graph::Origin* cut_at = TraceCause::current();  // the host read or op that cut the window
  TraceCause cause(nodes.front()->origin.get());
  std::string what = describe(nodes);
  Donation donation = one_program_block() ? donation_of(w) : Donation{};
  // A compiled graph's first run (compiled while it ran) may still read what the window would
  // donate: the optimizer step after a compiled step's first backward. Waiting for it here keeps
  // which buffers are donated, and so the program, the same from the first step on.
  if (!donation.aliases.empty() && first_runs_in_flight() > 0) wait_for_first_runs();
  auto text = [&] { return w.program_text(donation.aliases); };
  auto names = [&] { return ProgramNames{what, identity_of(nodes)}; };
  std::string key = w.key() + donation.key;
  std::shared_ptr<runtime::Executable> exe;
  try {
    exe = m == Mode::kFused ? cached_executable_or_compile_async(key, text, names, /*skip_many_variants=*/true,
                                                                 /*until_asked_twice=*/!ends_a_step_part(reason))
                            : cached_executable(key, text, names);
  } catch (const runtime::PjrtError&) {
    // A window XLA cannot compile runs op by op: an op that cannot compile alone is then named.
  }
  if (exe) {
    const char* kind = m == Mode::kFused ? "fused window" : "lazy window";
    int64_t ops = static_cast<int64_t>(nodes.size());
    std::vector<int64_t> keep = still_read(w, donation);
    execute(w, *exe, what, {kind, nodes.front().get(), nodes.back().get(), ops, &reason, cut_at}, keep);
    counters().donated_buffers += static_cast<int64_t>(donation.aliases.size() - keep.size());
    record_window(ops);
  } else {
    counters().op_by_op_windows++;
    execute_op_by_op(nodes, "op (its fused window is compiling)", !ends_a_step_part(reason));
  }
}

void flush_locked(Mode m, const std::string& reason) {
  std::vector<NodePtr> nodes = deferred().graph.take();
  if (!nodes.empty()) execute_window(std::move(nodes), m, reason);
}

}  // namespace

Mode mode() { return current_mode(); }

void set_mode(Mode m) {
  flush("mode change");
  current_mode() = m;
}

const char* mode_name(Mode m) {
  switch (m) {
    case Mode::kDebug: return "debug";
    case Mode::kStrict: return "strict";
    case Mode::kFused: return "fused";
    case Mode::kLazy: return "lazy";
  }
  return "?";
}

std::optional<Mode> parse_mode(const std::string& name) {
  for (Mode m : {Mode::kDebug, Mode::kStrict, Mode::kFused, Mode::kLazy})
    if (name == mode_name(m)) return m;
  return std::nullopt;
}

std::vector<std::shared_ptr<runtime::Buffer>> execute_program(runtime::Executable& exe, int device,
                                                              const std::vector<ValuePtr>& args, size_t output_bytes,
                                                              const std::string& what, const std::vector<int64_t>& keep,
                                                              const RunInfo& info) {
  std::vector<const runtime::Buffer*> buffers;
  buffers.reserve(args.size());
  for (const ValuePtr& a : args) buffers.push_back(a->buffer().get());
  int64_t dispatched = tracing() ? trace_clock_ns() : 0;
  runtime::ExecuteResult result;
  try {
    result = exe.execute_on(exec::device(device).raw(), buffers, keep);
  } catch (const runtime::PjrtError& e) {
    rethrow_memory_error(e, device, output_bytes, what);
  }
  counters().executions++;
  if (dispatched) trace_execution(result.done[0], device, dispatched, what, info);
  pending_work().add(device, std::move(result.done[0]), what);
  std::vector<std::shared_ptr<runtime::Buffer>> buffers_out;
  buffers_out.reserve(result.outputs[0].size());
  for (runtime::Buffer& b : result.outputs[0]) buffers_out.push_back(std::make_shared<runtime::Buffer>(std::move(b)));
  return buffers_out;
}

std::vector<std::vector<std::shared_ptr<runtime::Buffer>>> execute_replicated(
    runtime::Executable& exe, const std::vector<int>& devices, const std::vector<std::vector<ValuePtr>>& args,
    const std::string& what) {
  std::vector<std::vector<const runtime::Buffer*>> buffers;
  size_t input_bytes = 0;
  for (const auto& per_device : args) {
    buffers.emplace_back();
    for (const ValuePtr& a : per_device) {
      buffers.back().push_back(a->buffer().get());
      input_bytes += a->length() * element_size(a->dtype());
    }
  }
  int64_t dispatched = tracing() ? trace_clock_ns() : 0;
  runtime::ExecuteResult result;
  try {
    result = exe.execute(buffers);
  } catch (const runtime::PjrtError& e) {
    rethrow_memory_error(e, devices.at(0), input_bytes, what);
  }
  counters().executions++;
  std::vector<std::vector<std::shared_ptr<runtime::Buffer>>> out(devices.size());
  for (size_t d = 0; d < devices.size(); ++d) {
    if (dispatched) trace_execution(result.done[d], devices[d], dispatched, what, {"collective"});
    pending_work().add(devices[d], std::move(result.done[d]), what);
    for (runtime::Buffer& b : result.outputs[d]) out[d].push_back(std::make_shared<runtime::Buffer>(std::move(b)));
  }
  return out;
}

void set_one_program_block(bool inside) { one_program_block() = inside; }

namespace {

// Strict mode waits for a program no more than this many ops: they hold their inputs.
constexpr size_t kMostOpsWaiting = 256;

// Strict mode: an op whose program is loaded runs at once. One whose program is not waits, with
// the ops recorded after it, until a result is read (a host read, a sync) or kMostOpsWaiting wait;
// meanwhile its program compiles (compile_ahead), and then they run op by op, two programs
// compiling at a time: a first-seen workload keeps both cores compiling.
void run_strict(OpCall&& call, int device) {
  std::lock_guard<std::recursive_mutex> lock(deferred().mu);
  graph::PendingGraph& waiting = deferred().graph;
  if (waiting.size() == 0)
    if (std::optional<BoundOp> op = bind_loaded(call)) return run_bound(*op, call);
  NodePtr node = record_op(std::move(call));
  counters().strict_ops++;
  if (node->zero_bytes && waiting.size() == 0) return execute_single(node);  // never waits for a compile
  if (std::optional<int> d = waiting.device(); d && *d != device) flush_locked(Mode::kStrict, "device change");
  CompileAhead({node}).from(0);  // a lowering's error raises here, at the op
  std::vector<ValuePtr>& held = deferred().outputs_held.emplace_back();
  for (const auto& output : node->outputs) held.push_back(output.lock());
  waiting.append(std::move(node));
  if (waiting.size() >= kMostOpsWaiting) flush_locked(Mode::kStrict, "size limit");
}

}  // namespace

void run(OpCall&& call) {
  refuse_if_forked();
  TraceCause cause(call.origin.get());
  if (attach_geometry(call)) counters().padded_ops++;
  if (capturing()) {
    capture_node(record_op(std::move(call)));
    counters().captured_ops++;
    return;
  }
  Mode m = mode();
  int node_device = call.outputs.empty() ? 0 : call.outputs[0].storage->device();
  // (A profiler's trace names each run's node and its compile: the long way.)
  if (m == Mode::kStrict && !tracing()) return run_strict(std::move(call), node_device);
  if (m == Mode::kDebug || m == Mode::kStrict) {
    if (deferred().graph.size() > 0) flush("mode change");
    NodePtr node = record_op(std::move(call));
    (m == Mode::kDebug ? counters().debug_ops : counters().strict_ops)++;
    execute_single(node);
    if (m == Mode::kDebug) {
      synchronize(node_device, "debug mode");
      if (env_flag("TORCHTPU_CHECK_NANS")) check_finite(*node);
    }
    return;
  }
  std::lock_guard<std::recursive_mutex> lock(deferred().mu);
  std::optional<int> device = deferred().graph.device();
  bool alone = m == Mode::kFused && call.matmul && call.outputs.size() == 1 &&
               matrix_vector_result(call.outputs[0].view.sizes);
  NodePtr node = record_op(std::move(call));
  (m == Mode::kFused ? counters().fused_ops : counters().lazy_ops)++;
  if (alone) {  // inside a window, XLA would make its dot a slow loop (exec/quick_compile.h)
    flush_locked(m, "matrix-vector product");
    return execute_single(node);
  }
  if (node->zero_bytes && one_program_block()) return upload_zeros(*node->outputs.at(0).lock());
  if (device && *device != node_device) flush_locked(m, "device change");
  deferred().graph.append(std::move(node));
  if (m == Mode::kFused && deferred().graph.size() >= max_window_ops()) flush_locked(m, "size limit");
}

void flush(const std::string& reason) {
  std::lock_guard<std::recursive_mutex> lock(deferred().mu);
  if (deferred().graph.size() == 0) return;
  Mode m = mode();
  if (m == Mode::kStrict) return flush_locked(m, reason);  // ops that waited for their programs
  record_cut(reason);
  flush_locked(m == Mode::kLazy ? Mode::kLazy : Mode::kFused, reason);
}

size_t pending_ops() { return deferred().graph.size(); }

void synchronize(int device, const std::string& reason) {
  refuse_if_forked();
  flush(reason);
  wait_for_first_runs();
  pending_work().wait(device);
  deferred_checks().verify();
  raise_first_run_failure();
}

void defer_check(std::shared_ptr<BufferRef> ok, std::string message, const std::vector<ValuePtr>& guarded,
                 bool index_error) {
  if (capturing()) capture_check(ok->value(), message, index_error);
  auto check = std::make_shared<graph::DeviceCheck>(std::move(message), index_error);
  for (const ValuePtr& v : guarded)
    if (v) v->depend_on(check);
  deferred_checks().add({std::move(ok), std::move(check)});
  if (mode() == Mode::kDebug && !capturing()) deferred_checks().verify();  // debug: fail at the op
}

void raise_if_failed(const graph::DeviceValue& value) {
  for (const graph::CheckPtr& c : value.checks())
    if (c->state == graph::DeviceCheck::kFailed) throw CheckFailed(c->message, c->index_error);
}

void upload(BufferRef& storage, const void* data, DType dtype) {
  int64_t length = static_cast<int64_t>(storage.nbytes() / element_size(dtype));
  auto value = std::make_shared<graph::DeviceValue>(storage.device(), dtype, length);
  materialize_from_host(*value, data);
  storage.swap(std::move(value));
}

void upload_padded(BufferRef& storage, const void* data, DType dtype, int64_t capacity) {
  std::vector<char> padded(capacity * element_size(dtype), 0);
  std::memcpy(padded.data(), data, std::min(padded.size(), storage.nbytes()));
  auto value = std::make_shared<graph::DeviceValue>(storage.device(), dtype, capacity);
  materialize_from_host(*value, padded.data());
  storage.swap(std::move(value));
}

void upload_async(BufferRef& storage, const void* data, DType dtype, std::function<void()> when_read) {
  int64_t length = static_cast<int64_t>(storage.nbytes() / element_size(dtype));
  auto value = std::make_shared<graph::DeviceValue>(storage.device(), dtype, length);
  materialize_from_host(*value, data, std::move(when_read));
  storage.swap(std::move(value));
}

void download(const BufferRef& storage, void* dst, const std::string& reason) {
  refuse_if_forked();
  const ValuePtr& value = storage.value();
  if (capturing() && value && !value->is_materialized())
    throw std::runtime_error("a torch.compile graph read a tensor's contents on the host (" + reason +
                             "); such code must run outside the compiled graph");
  record_sync(reason);
  flush(reason);
  deferred_checks().verify();  // a failed check means this data may be garbage: say so first
  if (value) raise_if_failed(*value);
  if (!value) {
    std::memset(dst, 0, storage.nbytes());
    return;
  }
  if (!value->is_materialized())
    throw ExecutionFailed("this tensor's contents were never computed: the op that produced them failed earlier");
  int64_t start = 0;
  try {
    if (tracing()) {  // the copy's own time, not the wait for the work that produces the data
      value->buffer()->ready_event().await();
      start = trace_clock_ns();
    }
    size_t held = value->length() * element_size(value->dtype());
    if (held == storage.nbytes()) {
      value->buffer()->copy_to_host(dst, held);
    } else {  // a padded value: its logical bytes come first (exec/padded_view.h)
      std::vector<char> all(held);
      value->buffer()->copy_to_host(all.data(), held);
      std::memcpy(dst, all.data(), storage.nbytes());
    }
  } catch (const runtime::PjrtError& e) {
    pending_work().wait(storage.device());  // name the failed op if that is what happened
    throw;
  }
  if (start) trace_copy(TraceEvent::Kind::kCopyToHost, storage.device(), start, storage.nbytes(), reason);
  counters().bytes_to_host += storage.nbytes();
  raise_first_run_failure();
}

void drop_padding(BufferRef& storage) {
  const ValuePtr& v = storage.value();
  if (!v || v->length() * element_size(v->dtype()) == storage.nbytes()) return;
  DType dtype = v->dtype();
  int64_t length = static_cast<int64_t>(storage.nbytes() / element_size(dtype));
  View whole{dtype, {length}, {1}, 0};
  BufferRef exact(storage.device(), storage.nbytes());
  auto identity = [](hlo::Builder&, const std::vector<hlo::Value>& in) { return std::vector<hlo::Value>{in[0]}; };
  run({"drop_padding", identity, {{&storage, whole}}, {{&exact, whole}}});
  flush("a padded storage read whole");  // its reader needs the buffer itself
  storage.swap(exact.value());
}

}  // namespace torchtpu::exec
