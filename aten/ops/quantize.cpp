// Fake quantization (quantization-aware training: torch.ao's FakeQuantize and
// torch.fake_quantize_per_{tensor,channel}_affine), with CPU's arithmetic:
// q = zero_point + nearbyint(x * (1 / scale)), 1 / scale rounded to float (integer zero points),
// q = nearbyint(x * (1 / scale) + zero_point) (floating-point per-channel zero points);
// out = (clamp(q, quant_min, quant_max) - zero_point) * scale; and the mask
// quant_min <= q <= quant_max that the backward multiplies the gradient by.
#include "aten/ops/lowering_util.h"
#include "aten/ops/math.h"

namespace torchtpu::aten {
namespace {

// 1 / scale, rounded to float as CPU's kernels compute it, in `t`.
Value inverse_scale(hlo::Builder& b, const Value& scale, DType t) {
  return cast(b, b.constant(1, {DType::kF32, scale.type.dims}) / cast(b, scale, DType::kF32), t);
}

// quant_min <= v <= quant_max, elementwise.
Value within(hlo::Builder& b, const Value& v, int64_t qmin, int64_t qmax) {
  return b.binary(BinaryOp::kAnd, b.compare(Compare::kGE, v, b.constant(static_cast<double>(qmin), v.type)),
                  b.compare(Compare::kLE, v, b.constant(static_cast<double>(qmax), v.type)));
}

Value clamp(hlo::Builder& b, const Value& q, int64_t qmin, int64_t qmax) {
  return b.binary(BinaryOp::kMinimum, b.binary(BinaryOp::kMaximum, q, b.constant(static_cast<double>(qmin), q.type)),
                  b.constant(static_cast<double>(qmax), q.type));
}

// scale and zero_point broadcast to x's shape; computed in `acc`: CPU's per-tensor kernels compute
// in float for every dtype, its per-channel ones in double for float64.
Values fake_quantize(LoweringContext& c, const Value& scale, const Value& zero_point, int64_t qmin, int64_t qmax, DType acc) {
  hlo::Builder& b = c.b;
  Value zp = cast(b, zero_point, acc);
  Value scaled = cast(b, c.input_uncast(0), acc) * inverse_scale(b, scale, acc);
  Value q = zp + b.unary(UnaryOp::kRoundNearestEven, scaled);
  Value out = (clamp(b, q, qmin, qmax) - zp) * cast(b, scale, acc);
  return {out, within(b, q, qmin, qmax)};
}

// Floating-point zero points (per channel): the zero point joins before rounding, in float (double
// for float64 input); CPU's kernel then dequantizes in double (its clamp is std::fmin/fmax of an
// integer) and stores through float.
Values fake_quantize_float_zero_point(LoweringContext& c, const Value& scale, const Value& zero_point, int64_t qmin, int64_t qmax) {
  hlo::Builder& b = c.b;
  DType in = c.input_uncast(0).type.dtype, work = in == DType::kF64 ? DType::kF64 : DType::kF32;
  Value scaled = cast(b, c.input_uncast(0), work) * inverse_scale(b, scale, work);
  Value q = b.unary(UnaryOp::kRoundNearestEven, scaled + cast(b, zero_point, work));
  Value dequantized = (cast(b, clamp(b, q, qmin, qmax), DType::kF64) - cast(b, zero_point, DType::kF64)) * cast(b, scale, DType::kF64);
  Value out = in == DType::kF64 ? dequantized : cast(b, cast(b, dequantized, DType::kF32), in);
  return {out, within(b, q, qmin, qmax)};
}

// CPU reads integer per-channel zero points to the host to check they lie in [quant_min,
// quant_max] (floating-point ones it does not check); the program checks them on the device
// instead (an error at the next host sync).
void check_zero_points(LoweringContext& c, const Value& zero_point, int64_t qmin, int64_t qmax) {
  c.check_on_device(all_true(c.b, within(c.b, zero_point, qmin, qmax)));
}

// A one-element tensor (a qparam) broadcast to the output's shape.
Value broadcast_scalar(LoweringContext& c, const Value& v) {
  return c.b.broadcast_in_dim(c.b.reshape(v, {}), c.out(0).dims, {});
}

// Output and mask shaped like self; CPU's argument checks first.
std::vector<c10::IValue> fake_quantize_meta(const c10::FunctionSchema& schema, const std::vector<c10::IValue>& a) {
  size_t bounds = schema.name() == "aten::fake_quantize_per_tensor_affine_cachemask" ? 3 : 4;
  int64_t qmin = a[bounds].toInt(), qmax = a[bounds + 1].toInt();
  TORCH_CHECK(qmin <= qmax, "`quant_min` should be less than or equal to `quant_max`.");
  const at::Tensor& self = a[0].toTensor();
  if (bounds == 3)
    TORCH_CHECK(qmin <= a[2].toInt() && a[2].toInt() <= qmax, "`zero_point` must be between `quant_min` and `quant_max`.");
  if (schema.name() == "aten::fake_quantize_per_channel_affine_cachemask") {
    const at::Tensor &scale = a[1].toTensor(), &zero_point = a[2].toTensor();
    int64_t axis = a[3].toInt();
    TORCH_CHECK(scale.dim() == 1, "scale should be a 1-D tensor");
    TORCH_CHECK(zero_point.dim() == 1, "zero point should be a 1-D tensor");
    TORCH_CHECK(scale.numel() == zero_point.numel(), "scale and zero-point need to have the same dimensions");
    TORCH_CHECK(axis >= 0 && axis < self.dim(), "`axis` must be between 0 and number of dimensions of input");
    TORCH_CHECK(scale.numel() == self.size(axis), "dimensions of scale and zero-point are not consistent with input tensor");
  }
  return {self.new_empty(self.sizes()), self.new_empty(self.sizes(), self.options().dtype(at::kBool))};
}

}  // namespace

TORCHTPU_LOWERINGS(quantize) {
  // (self, scale: float, zero_point: int, quant_min, quant_max)
  register_lowering({"fake_quantize_per_tensor_affine_cachemask"}, [](LoweringContext& c) {
    hlo::Builder& b = c.b;
    Value scale = b.constant(c.arg(1).toDouble(), {DType::kF64, c.out(0).dims});
    Value zp = b.constant(static_cast<double>(c.arg(2).toInt()), {DType::kF64, c.out(0).dims});
    return fake_quantize(c, scale, zp, c.arg(3).toInt(), c.arg(4).toInt(), DType::kF32);
  }, with_meta(fake_quantize_meta));
  // (self, scale, zero_point, fake_quant_enabled, quant_min, quant_max): off, the input and a full mask
  register_lowering({"_fake_quantize_per_tensor_affine_cachemask_tensor_qparams"}, [](LoweringContext& c) {
    hlo::Builder& b = c.b;
    Values on = fake_quantize(c, broadcast_scalar(c, c.input_uncast(1)), broadcast_scalar(c, c.input_uncast(2)), c.arg(4).toInt(), c.arg(5).toInt(),
                              DType::kF32);
    Value enabled = broadcast_scalar(c, b.compare(Compare::kGE, cast(b, c.input_uncast(3), DType::kF32), b.constant(1, {DType::kF32, c.input_uncast(3).type.dims})));
    Value x = cast(b, c.input_uncast(0), on[0].type.dtype);
    return Values{b.select(enabled, on[0], x), b.select(enabled, on[1], b.constant(1, on[1].type))};
  }, with_meta(fake_quantize_meta));
  // (self, scale [n], zero_point [n], axis, quant_min, quant_max)
  LoweringOptions per_channel = with_meta(fake_quantize_meta);
  per_channel.device_check = "`zero_point` must be between `quant_min` and `quant_max`.";
  per_channel.device_check_runtime_error = true;
  register_lowering({"fake_quantize_per_channel_affine_cachemask"}, [](LoweringContext& c) {
    auto along = [&](const Value& v) { return c.b.broadcast_in_dim(v, c.out(0).dims, {c.arg(3).toInt()}); };
    Value scale = along(c.input_uncast(1)), zero_point = along(c.input_uncast(2));
    int64_t qmin = c.arg(4).toInt(), qmax = c.arg(5).toInt();
    if (is_floating(zero_point.type.dtype)) return fake_quantize_float_zero_point(c, scale, zero_point, qmin, qmax);
    check_zero_points(c, c.input_uncast(2), qmin, qmax);
    return fake_quantize(c, scale, zero_point, qmin, qmax, accumulator(c.out(0).dtype));
  }, per_channel);
}

}  // namespace torchtpu::aten
