#include "exec/runtime_context.h"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <stdexcept>
#include <string>

#include "exec/compile_cache.h"
#include "runtime/plugin.h"

namespace torchtpu::exec {

namespace {
std::atomic<bool> started{false};
// Set in a child forked after the client started: the child has a copy of the client's memory but
// none of its threads, so any use of it would wait forever (as CUDA, it refuses instead).
std::atomic<bool> forked_after_start{false};
pid_t started_in = 0;
}  // namespace

void refuse_if_forked() {
  if (forked_after_start.load(std::memory_order_relaxed))
    throw std::runtime_error(
        "the tpu runtime was started in process " + std::to_string(started_in) +
        ", and this process is a fork of it: a forked child cannot use the parent's device. Start "
        "child processes with the 'spawn' method (multiprocessing.set_start_method('spawn'), or "
        "torch.multiprocessing with start_method='spawn'), or fork before the first tpu operation");
}

runtime::Client& client() {
  static std::mutex mu;
  // Deliberately never destroyed: at exit the GPU driver may already be shut down, and destroying
  // a CUDA client then fails noisily. The OS reclaims everything.
  static runtime::Client* instance = nullptr;
  refuse_if_forked();
  {
    std::lock_guard<std::mutex> lock(mu);
    if (instance) return *instance;
    instance = runtime::Client::create(runtime::Plugin::discover()).release();
    started_in = getpid();
    pthread_atfork(nullptr, nullptr, [] { forked_after_start.store(true); });
    started.store(true);
  }
  // While the program builds its model, load what the same command used when it last ran.
  start_prefetching();
  return *instance;
}

bool client_started() { return started.load(); }

bool plugin_present() {
  try {
    return runtime::plugin_file_problem(runtime::find_plugin_path()).empty();
  } catch (const std::exception&) {
    return false;
  }
}

const runtime::Device& device(int index) { return client().device(static_cast<size_t>(index)); }

}  // namespace torchtpu::exec
