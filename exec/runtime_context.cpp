#include "exec/runtime_context.h"

#include <atomic>
#include <mutex>

#include "exec/compile_cache.h"
#include "runtime/plugin.h"

namespace torchtpu::exec {

namespace {
std::atomic<bool> started{false};
}  // namespace

runtime::Client& client() {
  static std::mutex mu;
  // Deliberately never destroyed: at exit the GPU driver may already be shut down, and destroying
  // a CUDA client then fails noisily. The OS reclaims everything.
  static runtime::Client* instance = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (instance) return *instance;
    instance = runtime::Client::create(runtime::Plugin::discover()).release();
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
