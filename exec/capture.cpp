#include "exec/capture.h"

#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <unordered_map>

#include "exec/compile_cache.h"
#include "exec/executor.h"
#include "exec/interrupt.h"
#include "exec/metrics.h"
#include "exec/op_record.h"
#include "graph/pending_graph.h"

namespace torchtpu::exec {
namespace {

using graph::NodePtr;
using graph::ValuePtr;

struct Capture {
  std::vector<GraphInput> inputs;
  std::vector<ValuePtr> input_values;  // each input's contents when the capture began
  std::vector<std::string> signature;  // and how they were bound
  graph::PendingGraph recorded;  // the recorded ops (taken as `nodes` when the capture ends)
  std::vector<NodePtr> nodes;
  std::unordered_map<const graph::DeviceValue*, RandomDraw> random_states;
  struct Check {
    ValuePtr ok;
    std::string message;
    bool index_error;
  };
  std::vector<Check> checks;
};

// Thread-local: autograd's worker thread captures a backward graph while other threads keep
// dispatching eagerly.
thread_local std::unique_ptr<Capture> active;

Capture& current() {
  if (!active) throw std::logic_error("no torch.compile capture is active on this thread");
  return *active;
}

// What identifies an input's binding: its flat size and dtype, and the first input it shares
// contents with (a program reads shared contents through one parameter).
std::vector<std::string> signature_of(const std::vector<GraphInput>& inputs) {
  std::vector<std::string> sig;
  std::unordered_map<const graph::DeviceValue*, size_t> first;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const ValuePtr& v = inputs[i].storage->value();
    std::string s = std::to_string(inputs[i].storage->nbytes()) + " bytes";
    if (v) {
      s += " of ";
      s += dtype_name(v->dtype());
      auto [it, fresh] = first.emplace(v.get(), i);
      if (!fresh) s += ", the contents of input " + std::to_string(it->second);
    }
    sig.push_back(s);
  }
  return sig;
}

// Cuts the recorded nodes' links to values they did not produce (see executor.cpp).
void discard_unmaterialized(const std::vector<NodePtr>& nodes) {
  for (const NodePtr& n : nodes)
    for (const auto& weak : n->outputs)
      if (ValuePtr v = weak.lock(); v && !v->is_materialized()) v->set_producer(nullptr, 0);
}

// The inputs get back the contents they had before the capture (its ops will never run).
void restore_inputs(const Capture& c) {
  for (size_t i = 0; i < c.inputs.size(); ++i)
    if (c.inputs[i].storage->value() != c.input_values[i]) c.inputs[i].storage->swap(c.input_values[i]);
}

// A never-written storage reads as zeros; a program parameter needs them as a buffer.
// A padded one (exec/padded_view.h) must have exactly its bytes, as the program's parameter has.
void materialize_unwritten(const std::vector<GraphInput>& inputs) {
  for (const GraphInput& in : inputs) drop_padding(*in.storage);
  for (const GraphInput& in : inputs)
    if (!in.storage->value()) {
      std::vector<char> zeros(in.storage->nbytes(), 0);
      upload(*in.storage, zeros.data(), in.dtype);
    }
}

size_t output_bytes(const CompiledGraph::Plan& plan) {
  size_t bytes = 0;
  for (size_t k = 0; k < plan.result_dtypes.size(); ++k) bytes += plan.result_lengths[k] * element_size(plan.result_dtypes[k]);
  return bytes;
}

// Maps the capture's values to where they come from on a run.
class SourceMap {
 public:
  SourceMap(const Capture& c, const graph::Window& w) : capture_(c) {
    for (size_t i = 0; i < c.input_values.size(); ++i) inputs_.emplace(c.input_values[i].get(), i);
    for (size_t k = 0; k < w.results().size(); ++k) results_.emplace(w.results()[k].get(), k);
  }

  ValueSource of(const ValuePtr& v) const {
    ValueSource s;
    if (auto r = results_.find(v.get()); r != results_.end()) {
      s.kind = ValueSource::Kind::kResult;
      s.index = r->second;
    } else if (auto i = inputs_.find(v.get()); i != inputs_.end()) {
      s.kind = ValueSource::Kind::kInput;
      s.index = i->second;
    } else if (auto d = capture_.random_states.find(v.get()); d != capture_.random_states.end()) {
      s.kind = ValueSource::Kind::kRandom;
      s.draw = d->second;
    } else {
      s.constant = v;
    }
    return s;
  }

  std::optional<size_t> result(const ValuePtr& v) const {
    auto r = results_.find(v.get());
    return r == results_.end() ? std::nullopt : std::optional<size_t>(r->second);
  }

 private:
  const Capture& capture_;
  std::unordered_map<const graph::DeviceValue*, size_t> inputs_, results_;
};

// (parameter, result) pairs where an input's new contents (a result) can reuse the buffer of its
// old contents (a parameter of the same type): an optimizer's parameters and states, BatchNorm
// statistics.
std::vector<std::pair<size_t, size_t>> donation_aliases(const CompiledGraph::Plan& plan, const graph::Window& w) {
  std::vector<std::pair<size_t, size_t>> aliases;
  std::vector<bool> result_taken(w.results().size());
  for (const auto& [input, source] : plan.writebacks) {
    if (source.kind != ValueSource::Kind::kResult || result_taken[source.index]) continue;
    for (size_t p = 0; p < plan.parameters.size(); ++p) {
      const ValueSource& param = plan.parameters[p];
      const graph::DeviceValue& old = *w.parameters()[p];
      const graph::DeviceValue& now = *w.results()[source.index];
      if (param.kind == ValueSource::Kind::kInput && param.index == input && old.dtype() == now.dtype() &&
          old.length() == now.length()) {
        aliases.emplace_back(p, source.index);
        result_taken[source.index] = true;
        break;
      }
    }
  }
  return aliases;
}

// Compiled graphs' first runs, run one after another on a thread of their own (one compile at a
// time beside the caller: on few cores, concurrent XLA compiles slow each other and the caller's
// own small compiles), and the first failure among them that no host sync has raised yet. A run
// waits only for values of runs queued before it.
class FirstRuns;
FirstRuns& first_runs();

class FirstRuns {
 public:
  void start(std::function<void()> job) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!worker_started_) {
      worker_started_ = true;
      running_compiles();  // makes the compile cache, whose exit hook must run after this one
      std::atexit([] { first_runs().wait(); });
      std::thread([this] { work(); }).detach();  // lives as long as the process
    }
    running_++;
    queue_.push_back(std::move(job));
    wakeup_.notify_one();
  }
  void wait() {
    std::unique_lock<std::mutex> lock(mu_);
    idle_.wait(lock, [&] { return running_ == 0; });
  }
  int running() {
    std::lock_guard<std::mutex> lock(mu_);
    return running_;
  }
  void fail(std::string message) {
    std::lock_guard<std::mutex> lock(mu_);
    if (failure_.empty()) failure_ = std::move(message);
  }
  void raise() {
    std::string failure;
    {
      std::lock_guard<std::mutex> lock(mu_);
      failure.swap(failure_);
    }
    if (!failure.empty()) throw ExecutionFailed(failure);
  }

 private:
  void work() {
    never_interrupt_this_thread();
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        wakeup_.wait(lock, [&] { return !queue_.empty(); });
        job = std::move(queue_.front());
        queue_.pop_front();
      }
      job();  // catches its own errors
      job = nullptr;  // drops what the run held before it counts as done
      std::lock_guard<std::mutex> lock(mu_);
      if (--running_ == 0) idle_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable wakeup_, idle_;
  std::deque<std::function<void()>> queue_;
  int running_ = 0;  // queued or running
  bool worker_started_ = false;
  std::string failure_;
};

FirstRuns& first_runs() {
  static auto* r = new FirstRuns;  // never destroyed: threads may still report at exit
  return *r;
}

std::shared_future<std::shared_ptr<runtime::Executable>> ready(std::shared_ptr<runtime::Executable> exe) {
  std::promise<std::shared_ptr<runtime::Executable>> p;
  p.set_value(std::move(exe));
  return p.get_future().share();
}

std::string message_of(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown error";
  }
}

// The compile and the first execution of a captured graph, for the capture's own call.
struct FirstRun {
  std::shared_ptr<graph::Window> w;
  std::string key;
  CompiledGraph::Plan plan;
  std::vector<std::pair<size_t, size_t>> aliases;
  std::string identity;

  std::shared_ptr<runtime::Executable> compile() const {
    return cached_executable(key, [&] { return w->program_text(aliases); },
                             [&] { return ProgramNames{plan.what, identity}; }, Tier::kOptimized);
  }

  // The buffers of the window's results. The capture still holds the inputs' old contents, so
  // nothing is donated.
  std::vector<std::shared_ptr<runtime::Buffer>> execute(runtime::Executable& exe) const {
    std::vector<int64_t> keep(plan.donatable.begin(), plan.donatable.end());
    auto produced = execute_program(exe, plan.device, w->parameters(), output_bytes(plan), plan.what, keep,
                                    {"compiled graph", nullptr, nullptr, static_cast<int64_t>(plan.num_ops)});
    counters().compiled_graph_runs++;
    return produced;
  }

  // Compiles and executes on a thread of its own; the results arrive when it is done. On a
  // failure an input's new contents fall back to its old ones (same dtype and size), the other
  // results raise the error, and so does the next host sync.
  CompiledGraph::ExecutableFuture start_in_background(const Capture& c) const {
    const std::vector<ValuePtr>& results = w->results();
    std::vector<ValuePtr> old_contents(results.size());
    for (const auto& [input, source] : plan.writebacks) {
      const ValuePtr& old = c.input_values[input];
      const ValuePtr& now = results[source.index];
      if (source.kind == ValueSource::Kind::kResult && old && old->dtype() == now->dtype() &&
          old->length() == now->length())
        old_contents[source.index] = old;
    }
    auto arrivals = std::make_shared<std::vector<std::promise<void>>>(results.size());
    for (size_t k = 0; k < results.size(); ++k) results[k]->arrive_later((*arrivals)[k].get_future().share());
    auto compiled = std::make_shared<std::promise<std::shared_ptr<runtime::Executable>>>();
    CompiledGraph::ExecutableFuture exe_future = compiled->get_future().share();
    first_runs().start([run = *this, arrivals, compiled, old_contents] {
      const std::vector<ValuePtr>& results = run.w->results();
      std::shared_ptr<runtime::Executable> exe;
      try {
        exe = run.compile();
        compiled->set_value(exe);
        auto produced = run.execute(*exe);
        for (size_t k = 0; k < produced.size(); ++k) results[k]->deliver(std::move(produced[k]));
        for (auto& arrival : *arrivals) arrival.set_value();
      } catch (...) {
        std::exception_ptr error = std::current_exception();
        if (!exe) compiled->set_exception(error);
        for (size_t k = 0; k < results.size(); ++k) {
          try {
            if (!old_contents[k]) throw std::runtime_error("no old contents");
            results[k]->deliver(old_contents[k]->buffer());  // may raise an earlier run's failure
            (*arrivals)[k].set_value();
          } catch (...) {
            (*arrivals)[k].set_exception(error);
          }
        }
        first_runs().fail(run.plan.what + " failed: " + message_of(error) +
                          " (the inputs it writes kept their contents)");
      }
    });
    return exe_future;
  }
};

}  // namespace

std::string CompiledGraph::mismatch(const std::vector<GraphInput>& inputs) const {
  if (inputs.size() != plan_.signature.size())
    return std::to_string(inputs.size()) + " inputs where the graph was captured with " +
           std::to_string(plan_.signature.size());
  std::vector<std::string> now = signature_of(inputs);
  for (size_t i = 0; i < now.size(); ++i) {
    if (inputs[i].storage->device() != plan_.device)
      return "input " + std::to_string(i) + " is on tpu:" + std::to_string(inputs[i].storage->device()) +
             ", the graph was captured on tpu:" + std::to_string(plan_.device);
    // A never-written input reads as zeros in any dtype (run() materializes it).
    bool same = inputs[i].storage->value() ? now[i] == plan_.signature[i] : plan_.signature[i].rfind(now[i], 0) == 0;
    if (!same)
      return "input " + std::to_string(i) + " is " + now[i] + ", captured as " + plan_.signature[i];
  }
  return "";
}

ValuePtr CompiledGraph::value_of(const ValueSource& s, const std::vector<GraphInput>& inputs,
                                 const std::vector<ValuePtr>& results) const {
  switch (s.kind) {
    case ValueSource::Kind::kInput: return inputs[s.index].storage->value();
    case ValueSource::Kind::kResult: return results[s.index];
    case ValueSource::Kind::kConstant: return s.constant;
    case ValueSource::Kind::kRandom: {
      std::array<uint64_t, 2> state = s.draw();
      BufferRef scratch(plan_.device, sizeof(state));
      upload(scratch, state.data(), DType::kU64);
      return scratch.value();
    }
  }
  return nullptr;
}

std::vector<ValuePtr> CompiledGraph::run(const std::vector<GraphInput>& inputs) const {
  for (const GraphInput& in : inputs) {
    const ValuePtr& v = in.storage->value();
    if (v && !v->is_materialized()) {  // produced by pending eager ops (fused, lazy)
      flush("compiled graph input");
      break;
    }
  }
  materialize_unwritten(inputs);
  std::vector<ValuePtr> args;
  for (const ValueSource& p : plan_.parameters) args.push_back(value_of(p, inputs, {}));
  // Donate an input's buffer only when its storage and `args` are all that hold it: a pending
  // op, another tensor's contents or a saved value still reading it keeps it.
  std::vector<int64_t> keep;
  for (size_t p : plan_.donatable)
    if (args[p].use_count() != 2 || args[p]->buffer().use_count() != 1) keep.push_back(static_cast<int64_t>(p));
  std::vector<graph::CheckPtr> inherited = unsettled_checks(args);
  auto buffers = execute_program(*exe_.get(), plan_.device, args, output_bytes(plan_), plan_.what, keep,
                                 {"compiled graph", nullptr, nullptr, static_cast<int64_t>(plan_.num_ops)});
  std::vector<ValuePtr> results;
  for (size_t k = 0; k < buffers.size(); ++k) {
    results.push_back(std::make_shared<graph::DeviceValue>(plan_.device, plan_.result_dtypes[k], plan_.result_lengths[k]));
    results.back()->materialize(std::move(buffers[k]));
    results.back()->inherit(inherited);
  }
  counters().compiled_graph_runs++;
  counters().donated_buffers += static_cast<int64_t>(plan_.donatable.size() - keep.size());
  std::vector<ValuePtr> outputs;
  for (const ValueSource& o : plan_.outputs) outputs.push_back(value_of(o, inputs, results));
  for (const auto& [input, source] : plan_.writebacks) inputs[input].storage->swap(value_of(source, inputs, results));
  std::vector<ValuePtr> produced = outputs;  // what a failed check makes unreadable
  for (const auto& [input, source] : plan_.writebacks) produced.push_back(inputs[input].storage->value());
  for (const auto& [result, message, index_error] : plan_.checks) {
    auto ok = std::make_shared<BufferRef>(plan_.device, 1);
    ok->swap(results[result]);
    defer_check(std::move(ok), message, produced, index_error);
  }
  return outputs;
}

void begin_capture(const std::vector<GraphInput>& inputs) {
  if (active) throw std::logic_error("a torch.compile capture is already active on this thread");
  flush("torch.compile capture");
  auto c = std::make_unique<Capture>();
  c->inputs = inputs;
  materialize_unwritten(inputs);
  for (const GraphInput& in : inputs) c->input_values.push_back(in.storage->value());
  c->signature = signature_of(inputs);
  active = std::move(c);
}

bool capturing() { return active != nullptr; }

void capture_node(NodePtr node) { current().recorded.append(std::move(node)); }

void capture_random_state(const ValuePtr& state, RandomDraw draw) {
  current().random_states.emplace(state.get(), std::move(draw));
}

void capture_check(const ValuePtr& ok, const std::string& message, bool index_error) {
  current().checks.push_back({ok, message, index_error});
}

void abort_capture() {
  if (!active) return;
  std::unique_ptr<Capture> c = std::move(active);
  restore_inputs(*c);
  discard_unmaterialized(c->recorded.take());
}

std::shared_ptr<CompiledGraph> end_capture(const std::vector<BufferRef*>& outputs, const std::string& what,
                                           const std::string& identity) {
  std::unique_ptr<Capture> c = std::move(active);
  if (!c) throw std::logic_error("no torch.compile capture is active on this thread");
  c->nodes = c->recorded.take();
  struct Discard {
    const std::vector<NodePtr>& nodes;
    ~Discard() { discard_unmaterialized(nodes); }
  } discard{c->nodes};

  auto w = std::make_shared<graph::Window>(c->nodes, graph::Window::Keep::kHeld);
  SourceMap sources(*c, *w);
  CompiledGraph::Plan plan;
  for (const ValuePtr& p : w->parameters()) plan.parameters.push_back(sources.of(p));
  for (const ValuePtr& r : w->results()) {
    plan.result_dtypes.push_back(r->dtype());
    plan.result_lengths.push_back(r->length());
  }
  for (size_t i = 0; i < c->inputs.size(); ++i)
    if (c->inputs[i].storage->value() != c->input_values[i])
      plan.writebacks.emplace_back(i, sources.of(c->inputs[i].storage->value()));
  for (BufferRef* o : outputs)  // a never-written output (an empty zeros_like) stays so: a null constant
    plan.outputs.push_back(o->value() ? sources.of(o->value()) : ValueSource{});
  for (const auto& [ok, message, index_error] : c->checks)
    if (auto r = sources.result(ok)) plan.checks.push_back({*r, message, index_error});
  std::vector<std::pair<size_t, size_t>> aliases = donation_aliases(plan, *w);
  for (const auto& alias : aliases) plan.donatable.push_back(alias.first);
  plan.signature = std::move(c->signature);
  plan.device = c->inputs.empty() ? (w->results().empty() ? 0 : w->results()[0]->device())
                                  : c->inputs[0].storage->device();
  plan.num_ops = c->nodes.size();
  plan.what = what;

  FirstRun run{w, w->key(), plan, aliases, identity};
  for (const auto& [param, result] : aliases)  // programs that may donate differ from the same window's eager one
    run.key += "|donate " + std::to_string(param) + ">" + std::to_string(result);
  if (mode() == Mode::kDebug) {  // synchronous: errors at the user's line, inputs restored
    try {
      auto exe = run.compile();
      auto produced = run.execute(*exe);
      for (size_t k = 0; k < produced.size(); ++k) w->results()[k]->materialize(std::move(produced[k]));
      return std::make_shared<CompiledGraph>(ready(exe), std::move(plan));
    } catch (...) {
      restore_inputs(*c);
      throw;
    }
  }
  return std::make_shared<CompiledGraph>(run.start_in_background(*c), std::move(plan));
}

void wait_for_first_runs() { first_runs().wait(); }
int first_runs_in_flight() { return first_runs().running(); }
void raise_first_run_failure() { first_runs().raise(); }

}  // namespace torchtpu::exec
