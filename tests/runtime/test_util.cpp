#include "tests/runtime/test_util.h"

#include <cstdlib>

namespace torchtpu::testing {

runtime::Client& client() {
  setenv("TORCHTPU_NUM_CPU_DEVICES", "4", /*overwrite=*/0);  // collectives need four CPU devices
  static std::unique_ptr<runtime::Client> c = runtime::Client::create(runtime::Plugin::discover());
  return *c;
}

std::vector<runtime::Buffer> run_single(hlo::Builder& b,
                                        const std::vector<const runtime::Buffer*>& args) {
  runtime::Executable exe = client().compile(b.module_text());
  runtime::ExecuteResult r = exe.execute({args});
  r.done[0].await();
  return std::move(r.outputs[0]);
}

}  // namespace torchtpu::testing
