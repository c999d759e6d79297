// Margin losses over class scores: multi_margin_loss (one target class per row) and
// multilabel_margin_loss (a -1-terminated list of target classes per row), forward and backward.
// Both compare pairs of scores within a row, so they are computed on [N, C] (a 1-D input is one
// row) and reshaped to PyTorch's output shapes.
#include "aten/lowering.h"
#include "aten/ops/loss_util.h"
#include "aten/ops/lowering_util.h"
#include "aten/ops/math.h"

namespace torchtpu::aten {
namespace {

// x as [N, C] rows.
Value rows(hlo::Builder& b, const Value& x) {
  int64_t c = x.type.rank() == 0 ? 1 : x.type.dims.back();
  return b.reshape(x, {x.type.element_count() / c, c});
}

// The loss's upstream gradient per row, [N]: divided by N for a mean.
Value row_grad(LoweringContext& c, Math& m, const Value& grad, int64_t n, int64_t reduction, DType t) {
  Value g = cast(c.b, grad, t);
  if (reduction == kNone) return c.b.reshape(g, {n});
  if (reduction == kMean) g = m.div(g, c.b.constant(static_cast<double>(n), g.type));
  return c.b.broadcast_in_dim(g, {n}, {});
}

// multi_margin_loss: row n adds, over classes j != y, max(0, margin - x[y] + x[j])^p (times
// weight[y]), divided by C. `dz` is d(row loss)/d x[j] for j != y; x[y] gets minus their sum.
// A per-row value [N] broadcast over the row: [N, C] like `like`.
Value over_row(hlo::Builder& b, const Value& per_row, const Value& like) {
  return b.broadcast_in_dim(per_row, like.type.dims, {0});
}

struct MultiMargin {
  Value x, is_target, z, active, scale;  // scale: weight[y] / C over the row
  int64_t p;  // 1 or 2, a static Scalar

  MultiMargin(LoweringContext& c, Math& m, size_t self, size_t target, size_t p_arg, size_t margin_arg,
              size_t weight_arg)
      : x(rows(c.b, c.input_uncast(self))), p(c.arg(p_arg).toScalar().toLong()) {
    int64_t n = x.type.dims[0], classes = x.type.dims[1];
    Value y = c.b.reshape(cast(c.b, c.input_uncast(target), DType::kS64), {n});
    c.check_on_device(all_in_range(c.b, y, classes));
    is_target = c.b.compare(Compare::kEQ, c.b.iota({DType::kS64, x.type.dims}, 1), over_row(c.b, y, x));
    Value x_target = m.sum(c.b.select(is_target, x, m.k(0, x)), {1});
    Value margin = c.b.broadcast_in_dim(c.input_as(margin_arg, x.type.dtype), x.type.dims, {});  // a runtime Scalar
    z = m.add(m.sub(margin, over_row(c.b, x_target, x)), x);
    active = c.b.binary(BinaryOp::kAnd, c.b.compare(Compare::kGT, z, m.k(0, z)), c.b.unary(UnaryOp::kNot, is_target));
    scale = m.k(1.0 / static_cast<double>(classes), x);
    if (c.has(weight_arg)) {
      Value weight = c.b.broadcast_in_dim(cast(c.b, c.input_uncast(weight_arg), x.type.dtype), x.type.dims, {1});
      scale = m.mul(scale, over_row(c.b, m.sum(c.b.select(is_target, weight, m.k(0, x)), {1}), x));
    }
  }
};

Values multi_margin_loss(LoweringContext& c) {  // (self, target, p, margin, weight?, reduction)
  Math m{c.b};
  MultiMargin mm(c, m, 0, 1, 2, 3, 4);
  Value h = c.b.select(mm.active, mm.z, m.k(0, mm.z));
  if (mm.p == 2) h = h * h;
  Value losses = m.sum(h * mm.scale, {1});
  return {c.b.reshape(reduce_loss(m, losses, c.arg(5).toInt()), c.out().dims)};
}

Values multi_margin_loss_backward(LoweringContext& c) {  // (grad_output, self, target, p, margin, weight?, reduction)
  Math m{c.b};
  MultiMargin mm(c, m, 1, 2, 3, 4, 5);
  int64_t n = mm.x.type.dims[0];
  Value g = over_row(c.b, row_grad(c, m, c.input_uncast(0), n, c.arg(6).toInt(), mm.x.type.dtype), mm.x);
  Value dz = mm.p == 2 ? m.k(2, mm.z) * mm.z : m.k(1, mm.z);
  dz = c.b.select(mm.active, dz * mm.scale * g, m.k(0, mm.z));
  Value to_target = over_row(c.b, -m.sum(dz, {1}), mm.x);
  return {c.b.reshape(c.b.select(mm.is_target, to_target, dz), c.out().dims)};
}

// multilabel_margin_loss: the targets of row n are target[n, :t] up to the first -1; the row adds
// max(0, 1 - x[j] + x[k]) / C over every listed j (a repeated class counts each time) and every
// class k not listed. [N, C(j), C(k)] pairs.
struct MultiLabel {
  // count[n, j]: times j is listed; hinge[n, j, k]: the pair's term; active: its d/dz
  Value x, count, is_target, hinge, active;

  MultiLabel(LoweringContext& c, Math& m, size_t self, size_t target) : x(rows(c.b, c.input_uncast(self))) {
    int64_t n = x.type.dims[0], classes = x.type.dims[1];
    Value t = cast(c.b, rows(c.b, c.input_uncast(target)), DType::kS64);
    Value ok = c.b.binary(BinaryOp::kAnd, c.b.compare(Compare::kGE, t, c.b.constant(-1, t.type)),
                          c.b.compare(Compare::kLT, t, c.b.constant_int(classes, t.type)));
    c.check_on_device(all_true(c.b, ok));
    // listed[n, i]: no -1 at or before i (a running max of "is -1" along the row)
    Value ended = c.b.convert(c.b.compare(Compare::kLT, t, c.b.constant(0, t.type)), DType::kS32);
    hlo::Window w{{1, classes}, {1, 1}, {1, 1}, {1, 1}, {{0, 0}, {classes - 1, 0}}};
    ended = c.b.reduce_window({ended}, {c.b.constant(0, {DType::kS32, {}})}, w, combine_with(BinaryOp::kMaximum))[0];
    Value listed = c.b.compare(Compare::kEQ, ended, c.b.constant(0, ended.type));
    std::vector<int64_t> cube{n, classes, classes};  // [n, i (list position), k (class)]
    Value hit = c.b.binary(BinaryOp::kAnd, c.b.broadcast_in_dim(listed, cube, {0, 1}),
                           c.b.compare(Compare::kEQ, c.b.broadcast_in_dim(t, cube, {0, 1}), c.b.iota({DType::kS64, cube}, 2)));
    count = m.sum(c.b.convert(hit, x.type.dtype), {1});
    is_target = c.b.compare(Compare::kGT, count, m.k(0, count));
    Value xj = c.b.broadcast_in_dim(x, cube, {0, 1}), xk = c.b.broadcast_in_dim(x, cube, {0, 2});
    Value z = m.add(m.sub(m.k(1, xj), xj), xk);
    Value pair = c.b.binary(BinaryOp::kAnd, c.b.compare(Compare::kGT, z, m.k(0, z)),
                            c.b.broadcast_in_dim(c.b.unary(UnaryOp::kNot, is_target), cube, {0, 2}));
    Value weight = m.div(c.b.broadcast_in_dim(count, cube, {0, 1}), m.k(static_cast<double>(classes), z));
    active = c.b.select(pair, weight, m.k(0, z));
    hinge = c.b.select(pair, m.mul(z, weight), m.k(0, z));
  }
};

Values multilabel_margin_loss(LoweringContext& c) {  // (self, target, reduction) -> (output, is_target)
  Math m{c.b};
  MultiLabel ml(c, m, 0, 1);
  Value losses = m.sum(ml.hinge, {1, 2});
  return {c.b.reshape(reduce_loss(m, losses, c.arg(2).toInt()), c.out(0).dims),
          c.b.reshape(c.b.convert(ml.is_target, c.out(1).dtype), c.out(1).dims)};
}

Values multilabel_margin_loss_backward(LoweringContext& c) {  // (grad_output, self, target, reduction, is_target)
  Math m{c.b};
  MultiLabel ml(c, m, 1, 2);
  int64_t n = ml.x.type.dims[0];
  Value g = row_grad(c, m, c.input_uncast(0), n, c.arg(3).toInt(), ml.x.type.dtype);
  Value grad = m.sum(ml.active, {1}) - m.sum(ml.active, {2});  // +as k, -as j
  return {c.b.reshape(grad * c.b.broadcast_in_dim(g, grad.type.dims, {0}), c.out().dims)};
}

// PyTorch's meta kernel gives the unreduced loss of a 1-D input the shape [1]; CPU gives 0-d.
std::vector<c10::IValue> multilabel_meta(const c10::FunctionSchema& schema, const std::vector<c10::IValue>& args) {
  std::vector<c10::IValue> out = meta_kernel(schema.name(), schema.overload_name(), args);
  if (args[0].toTensor().dim() <= 1 && args[2].toInt() == kNone) out[0].toTensor().resize_({});
  return out;
}

}  // namespace

TORCHTPU_LOWERINGS(margin_losses) {
  LoweringOptions multi_margin = checked_runtime("target out of range");
  multi_margin.static_scalars = {2};  // p: 1 or 2 picks the formula
  register_lowering({"multi_margin_loss", "multi_margin_loss.out"}, multi_margin_loss, multi_margin);
  LoweringOptions multi_margin_grad = checked_runtime("target out of range");
  multi_margin_grad.static_scalars = {3};
  multi_margin_grad.meta = shaped_like(1);
  register_lowering({"multi_margin_loss_backward", "multi_margin_loss_backward.grad_input"},
                    multi_margin_loss_backward, multi_margin_grad);
  LoweringOptions multilabel = checked_runtime("multilabel_margin_loss: target out of range");
  multilabel.meta = multilabel_meta;
  register_lowering({"multilabel_margin_loss_forward", "multilabel_margin_loss_forward.output"},
                    multilabel_margin_loss, multilabel);
  LoweringOptions multilabel_grad = checked_runtime("multilabel_margin_loss: target out of range");
  multilabel_grad.meta = shaped_like(1);
  register_lowering({"multilabel_margin_loss_backward", "multilabel_margin_loss_backward.grad_input"},
                    multilabel_margin_loss_backward, multilabel_grad);
}

}  // namespace torchtpu::aten
