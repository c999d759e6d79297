// The two ops torch.amp.GradScaler("tpu") runs every step: unscale the gradients while noting any
// inf/NaN, and grow or back off the loss scale. Both stay on the device: the scaler reads
// found_inf once per step, as on CUDA.
#include "aten/lowering.h"
#include "aten/ops/math.h"

namespace torchtpu::aten {
namespace {

// (self: Tensor[] (written), found_inf (written), inv_scale) -> self * inv_scale..., found_inf
Values unscale_and_check(LoweringContext& c) {
  Math m{c.b};
  const Values& grads = c.list(0);
  Values out;
  Value found = c.b.constant(0, {DType::kBool, {}});
  for (size_t k = 0; k < grads.size(); ++k) {
    Value g = cast(c.b, grads[k], accumulator(grads[k].type.dtype));
    Value finite = all_true(c.b, c.b.unary(UnaryOp::kIsFinite, g));
    found = c.b.binary(BinaryOp::kOr, found, c.b.unary(UnaryOp::kNot, finite));
    Value inv_scale = broadcast_to(c.b, cast(c.b, c.input_uncast(2), g.type.dtype), g.type.dims);
    out.push_back(g * inv_scale);
  }
  Value previous = c.input_uncast(1);
  out.push_back(c.b.select(found, m.k(1, previous), previous));
  return out;
}

// (scale (written), growth_tracker (written), found_inf, growth_factor, backoff_factor,
//  growth_interval) -> scale, growth_tracker
Values update_scale(LoweringContext& c) {
  Math m{c.b};
  Value scale = c.input_uncast(0), tracker = c.input_uncast(1);
  Value found = c.b.compare(Compare::kGT, cast(c.b, c.input_uncast(2), scale.type.dtype), m.k(0, scale));
  Value successful = tracker + m.k(1, tracker);
  Value grow = c.b.binary(BinaryOp::kAnd, c.b.unary(UnaryOp::kNot, found),
                          c.b.compare(Compare::kGE, successful, c.b.constant_int(c.arg(5).toInt(), tracker.type)));
  Value grown = scale * m.k(c.arg(3).toDouble(), scale);
  grown = c.b.select(c.b.unary(UnaryOp::kIsFinite, grown), grown, scale);  // never grow to inf
  Value new_scale = c.b.select(found, scale * m.k(c.arg(4).toDouble(), scale),
                               c.b.select(grow, grown, scale));
  Value reset = c.b.binary(BinaryOp::kOr, found, grow);
  return {new_scale, c.b.select(reset, m.k(0, tracker), successful)};
}

}  // namespace

TORCHTPU_LOWERINGS(amp) {
  register_lowering({"_amp_foreach_non_finite_check_and_unscale_"}, unscale_and_check);
  register_lowering({"_amp_update_scale_"}, update_scale);
}

}  // namespace torchtpu::aten
