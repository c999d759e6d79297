#include "exec/executor.h"

#include <chrono>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <unordered_map>

#include "exec/metrics.h"
#include "exec/runtime_context.h"
#include "exec/view_program.h"
#include "runtime/error.h"

namespace torchtpu::exec {
namespace {

// A storage the program touches: one flat parameter (unless fully overwritten) and, if written,
// one flat result.
struct Slot {
  BufferRef* storage;
  DType flat_dtype;
  int64_t flat_length;
  bool read = false;     // the program needs the current contents
  bool written = false;  // the program produces new contents
};

class Plan {
 public:
  explicit Plan(const OpCall& call) : call_(call) {
    for (const Operand& in : call.inputs) slot_for(in, /*full_overwrite=*/false).read = true;
    for (const Operand& out : call.outputs) {
      Slot& s = slot_for(out, overwrites_all(out));
      if (!overwrites_all(out)) s.read = true;
      s.written = true;
    }
  }

  std::string cache_key() const {
    std::string key = call_.key;
    for (const Slot& s : slots_) {
      key += s.read ? "|r" : "|w";
      key += dtype_name(s.flat_dtype);
      key += std::to_string(s.flat_length);
    }
    for (const Operand& in : call_.inputs) append_operand(key, 'i', in);
    for (const Operand& out : call_.outputs) append_operand(key, 'o', out);
    return key;
  }

  std::string program_text() const {
    hlo::Builder b;
    std::vector<hlo::Value> flat(slots_.size());
    for (size_t i = 0; i < slots_.size(); ++i)
      if (slots_[i].read) flat[i] = b.parameter({slots_[i].flat_dtype, {slots_[i].flat_length}});
    std::vector<hlo::Value> inputs;
    for (const Operand& in : call_.inputs) inputs.push_back(read_view(b, flat[index_of(in)], in.view));
    std::vector<hlo::Value> results = call_.lower(b, inputs);
    if (results.size() != call_.outputs.size())
      throw std::logic_error(call_.key + ": lowering returned " + std::to_string(results.size()) +
                             " results for " + std::to_string(call_.outputs.size()) + " outputs");
    for (size_t i = 0; i < results.size(); ++i) {
      const Operand& out = call_.outputs[i];
      size_t s = index_of(out);
      if (overwrites_all(out) && !slots_[s].read)
        flat[s] = b.reshape(results[i], {slots_[s].flat_length});
      else
        flat[s] = write_view(b, flat[s], out.view, results[i]);
    }
    std::vector<hlo::Value> outs;
    for (size_t i = 0; i < slots_.size(); ++i)
      if (slots_[i].written) outs.push_back(flat[i]);
    b.results(outs);
    return b.module_text();
  }

  const std::vector<Slot>& slots() const { return slots_; }

 private:
  static bool overwrites_all(const Operand& o) {
    return o.view.is_contiguous() && o.view.offset == 0 &&
           static_cast<size_t>(o.view.numel()) * element_size(o.view.dtype) == o.storage->nbytes();
  }

  Slot& slot_for(const Operand& o, bool full_overwrite) {
    for (Slot& s : slots_)
      if (s.storage == o.storage) return s;
    // A storage being replaced whole takes the writer's dtype; otherwise keep what it holds.
    DType dtype = o.storage->buffer() && !full_overwrite ? o.storage->buffer_dtype() : o.view.dtype;
    int64_t length = static_cast<int64_t>(o.storage->nbytes() / element_size(dtype));
    slots_.push_back({o.storage, dtype, length});
    return slots_.back();
  }

  size_t index_of(const Operand& o) const {
    for (size_t i = 0; i < slots_.size(); ++i)
      if (slots_[i].storage == o.storage) return i;
    throw std::logic_error("operand storage not planned");
  }

  void append_operand(std::string& key, char kind, const Operand& o) const {
    key += '|';
    key += kind;
    key += std::to_string(index_of(o));
    o.view.append_key(key);
  }

  const OpCall& call_;
  std::vector<Slot> slots_;
};

class ExecutableCache {
 public:
  std::shared_ptr<runtime::Executable> get(const std::string& key, const Plan& plan) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (auto it = entries_.find(key); it != entries_.end()) {
        counters().cache_hits++;
        return it->second;
      }
    }
    auto start = std::chrono::steady_clock::now();
    runtime::CompileOptions options;
    options.portable = true;  // one executable serves every device
    auto exe = std::make_shared<runtime::Executable>(client().compile(plan.program_text(), options));
    int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                     std::chrono::steady_clock::now() - start).count();
    counters().compiles++;
    counters().compile_ns += ns;
    int64_t prev = counters().max_compile_ns;
    while (ns > prev && !counters().max_compile_ns.compare_exchange_weak(prev, ns)) {}
    std::lock_guard<std::mutex> lock(mu_);
    return entries_.emplace(key, exe).first->second;
  }

 private:
  std::mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<runtime::Executable>> entries_;
};

// Process-lifetime objects are deliberately never destroyed: destroying executables and
// buffers at exit, after a GPU driver has shut down, fails noisily. The OS reclaims them.
ExecutableCache& cache() {
  static auto* c = new ExecutableCache;
  return *c;
}

// Completion events of dispatched executions, per device, for synchronize().
class PendingWork {
 public:
  void add(int device, runtime::Event done) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& events = by_device_[device];
    while (!events.empty() && events.front().is_ready()) events.erase(events.begin());
    events.push_back(std::move(done));
  }
  void wait(int device) {
    std::vector<runtime::Event> events;
    {
      std::lock_guard<std::mutex> lock(mu_);
      events.swap(by_device_[device]);
    }
    for (const runtime::Event& e : events) e.await();
  }

 private:
  std::mutex mu_;
  std::unordered_map<int, std::vector<runtime::Event>> by_device_;
};

PendingWork& pending() {
  static auto* p = new PendingWork;
  return *p;
}

struct DeferredCheck {
  std::shared_ptr<BufferRef> ok;
  std::string message;
};

class DeferredChecks {
 public:
  void add(DeferredCheck check) {
    std::lock_guard<std::mutex> lock(mu_);
    checks_.push_back(std::move(check));
  }
  // Reads every pending check; throws for the first that failed (all are consumed).
  void verify() {
    std::vector<DeferredCheck> checks;
    {
      std::lock_guard<std::mutex> lock(mu_);
      checks.swap(checks_);
    }
    for (const DeferredCheck& c : checks) {
      bool ok = true;
      c.ok->buffer()->copy_to_host(&ok, 1);
      if (!ok) throw CheckFailed(c.message);
    }
  }

 private:
  std::mutex mu_;
  std::vector<DeferredCheck> checks_;
};

DeferredChecks& deferred_checks() {
  static auto* d = new DeferredChecks;
  return *d;
}

// The storage's flat buffer, creating zeros for a never-written one.
const runtime::Buffer& materialized(BufferRef& storage, DType dtype) {
  if (!storage.buffer()) {
    std::vector<char> zeros(storage.nbytes(), 0);
    upload(storage, zeros.data(), dtype);
  }
  return *storage.buffer();
}

// Rethrows a PJRT out-of-memory error as OutOfDeviceMemory naming the bytes requested.
[[noreturn]] void rethrow_memory_error(const runtime::PjrtError& e, int device, size_t bytes,
                                       const std::string& what) {
  if (e.code() != PJRT_Error_Code_RESOURCE_EXHAUSTED) throw e;
  throw OutOfDeviceMemory("tpu:" + std::to_string(device) + " is out of memory: tried to allocate " +
                          std::to_string(bytes) + " bytes for " + what + " (" +
                          std::to_string(device_bytes(device)) + " bytes held by tensors). " + e.what());
}

}  // namespace

void run(const OpCall& call) {
  Plan plan(call);
  std::shared_ptr<runtime::Executable> exe = cache().get(plan.cache_key(), plan);

  int device = call.outputs.empty() ? call.inputs.at(0).storage->device()
                                    : call.outputs[0].storage->device();
  std::vector<const runtime::Buffer*> args;
  for (const Slot& s : plan.slots()) {
    if (s.storage->device() != device)
      throw std::invalid_argument(call.key + ": operands are on different devices (tpu:" +
                                  std::to_string(device) + " and tpu:" +
                                  std::to_string(s.storage->device()) + ")");
    if (s.read) args.push_back(&materialized(*s.storage, s.flat_dtype));
  }
  size_t output_bytes = 0;
  for (const Slot& s : plan.slots())
    if (s.written) output_bytes += s.storage->nbytes();
  runtime::ExecuteResult result;
  try {
    result = exe->execute_on(exec::device(device).raw(), args);
  } catch (const runtime::PjrtError& e) {
    rethrow_memory_error(e, device, output_bytes, call.key.substr(0, call.key.find('|')));
  }
  counters().executions++;
  pending().add(device, std::move(result.done[0]));

  size_t next = 0;
  for (const Slot& s : plan.slots())
    if (s.written)
      s.storage->swap(std::make_shared<runtime::Buffer>(std::move(result.outputs[0][next++])),
                      s.flat_dtype);
}

void synchronize(int device) {
  pending().wait(device);
  deferred_checks().verify();
}

void defer_check(std::shared_ptr<BufferRef> ok, std::string message) {
  deferred_checks().add({std::move(ok), std::move(message)});
}

void upload(BufferRef& storage, const void* data, DType dtype) {
  int64_t length = static_cast<int64_t>(storage.nbytes() / element_size(dtype));
  runtime::Buffer b;
  try {
    b = client().to_device(data, dtype, {length}, exec::device(storage.device()));
  } catch (const runtime::PjrtError& e) {
    rethrow_memory_error(e, storage.device(), storage.nbytes(), "a host-to-device copy");
  }
  counters().bytes_to_device += storage.nbytes();
  storage.swap(std::make_shared<runtime::Buffer>(std::move(b)), dtype);
}

void download(const BufferRef& storage, void* dst) {
  deferred_checks().verify();  // a failed check means this data may be garbage: say so first
  if (!storage.buffer()) {
    std::memset(dst, 0, storage.nbytes());
    return;
  }
  storage.buffer()->copy_to_host(dst, storage.nbytes());
  counters().bytes_to_host += storage.nbytes();
}

}  // namespace torchtpu::exec
