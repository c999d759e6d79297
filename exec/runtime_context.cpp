#include "exec/runtime_context.h"

#include <mutex>

namespace torchtpu::exec {

runtime::Client& client() {
  static std::mutex mu;
  // Deliberately never destroyed: at exit the GPU driver may already be shut down, and destroying
  // a CUDA client then fails noisily. The OS reclaims everything.
  static runtime::Client* instance = nullptr;
  std::lock_guard<std::mutex> lock(mu);
  if (!instance) instance = runtime::Client::create(runtime::Plugin::discover()).release();
  return *instance;
}

const runtime::Device& device(int index) { return client().device(static_cast<size_t>(index)); }

}  // namespace torchtpu::exec
