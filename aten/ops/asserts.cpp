// torch._assert_async (what torch.compile turns a data-dependent `assert` into, and what code uses
// to check a tensor without a host sync): the one element is checked on the device, and a zero
// raises CPU's RuntimeError at the next host sync, as CUDA's device-side asserts do.
#include "aten/ops/math.h"

namespace torchtpu::aten {
namespace {

Values assert_nonzero(LoweringContext& c) {
  hlo::Builder& b = c.b;
  hlo::Value x = b.reshape(c.input_uncast(0), {});
  c.check_on_device(b.compare(hlo::Compare::kNE, x, b.constant(0, x.type)));
  return {};
}

// CPU's is_nonzero: a tensor's truth needs exactly one element (checked on the host: shapes are).
void one_element(const std::vector<c10::IValue>& args) {
  int64_t n = args.at(0).toTensor().numel();
  TORCH_CHECK(n != 0, "Boolean value of Tensor with no values is ambiguous");
  TORCH_CHECK(n == 1, "Boolean value of Tensor with more than one value is ambiguous");
}

LoweringOptions assert_options(const char* message, int message_arg) {
  LoweringOptions o = with_meta(checked_meta(one_element));
  o.device_check = message;
  o.device_check_message_arg = message_arg;
  o.device_check_runtime_error = true;
  return o;
}

}  // namespace

TORCHTPU_LOWERINGS(asserts) {
  register_lowering({"_assert_async"}, assert_nonzero,
                    assert_options("Expected Tensor with single nonzero value, but got zero", -1));
  register_lowering({"_assert_async.msg"}, assert_nonzero, assert_options("Assertion is failed", 1));
}

}  // namespace torchtpu::aten
