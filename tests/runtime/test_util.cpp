#include "tests/runtime/test_util.h"

namespace torchtpu::testing {

runtime::Client& client() {
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
