#include "exec/runtime_context.h"

namespace torchtpu::exec {

runtime::Client& client() {
  static std::mutex mu;
  static std::unique_ptr<runtime::Client> instance;  // lives until exit; PJRT objects refer to it
  std::lock_guard<std::mutex> lock(mu);
  if (!instance) instance = runtime::Client::create(runtime::Plugin::discover());
  return *instance;
}

const runtime::Device& device(int index) { return client().device(static_cast<size_t>(index)); }

}  // namespace torchtpu::exec
