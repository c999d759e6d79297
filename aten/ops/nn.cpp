// Neural-network ops training scripts hit directly: softmax family, nll_loss, embedding backward,
// layer norm (forward and backward). Low-precision inputs compute in f32.
#include <cmath>

#include "aten/lowering.h"
#include "aten/ops/lowering_util.h"

namespace torchtpu::aten {
namespace {

using hlo::BinaryOp;
using hlo::Compare;
using hlo::UnaryOp;
using hlo::Value;
using V = std::vector<Value>;

DType accumulator(DType t) { return t == DType::kBF16 || t == DType::kF16 ? DType::kF32 : t; }

int64_t wrap(int64_t dim, int64_t rank) { return dim < 0 ? dim + std::max<int64_t>(rank, 1) : dim; }

struct Math {
  hlo::Builder& b;
  Value add(const Value& x, const Value& y) { return b.binary(BinaryOp::kAdd, x, y); }
  Value sub(const Value& x, const Value& y) { return b.binary(BinaryOp::kSubtract, x, y); }
  Value mul(const Value& x, const Value& y) { return b.binary(BinaryOp::kMultiply, x, y); }
  Value div(const Value& x, const Value& y) { return b.binary(BinaryOp::kDivide, x, y); }
  Value k(double v, const Value& like) { return b.constant(v, like.type); }
  Value reduce(const Value& x, const std::vector<int64_t>& dims, BinaryOp op, double init) {
    return b.reduce({x}, {b.constant(init, {x.type.dtype, {}})}, dims,
                    [op](hlo::Builder& rb, const V& a) { return V{rb.binary(op, a[0], a[1])}; })[0];
  }
  // Reduce over `dims` and broadcast back to x's shape (keepdim + expand).
  Value reduce_keep(const Value& x, const std::vector<int64_t>& dims, BinaryOp op, double init) {
    Value r = reduce(x, dims, op, init);
    std::vector<int64_t> kept;
    for (int64_t d = 0; d < x.type.rank(); ++d)
      if (std::find(dims.begin(), dims.end(), d) == dims.end()) kept.push_back(d);
    return b.broadcast_in_dim(r, x.type.dims, kept);
  }
};

Value softmax(Math& m, const Value& x, int64_t dim, bool log) {
  Value shifted = m.sub(x, m.reduce_keep(x, {dim}, BinaryOp::kMaximum, -INFINITY));
  Value e = m.b.unary(UnaryOp::kExponential, shifted);
  Value sum = m.reduce_keep(e, {dim}, BinaryOp::kAdd, 0);
  return log ? m.sub(shifted, m.b.unary(UnaryOp::kLog, sum)) : m.div(e, sum);
}

// The class weights and mask of each target: weight[target] (or 1), 0 where target == ignore.
Value target_weights(LoweringContext& c, Math& m, const Value& target, DType dtype, int64_t classes,
                     size_t weight_arg, int64_t ignore_index) {
  Value t = cast(c.b, target, DType::kS64);
  Value w;
  if (c.has(weight_arg)) {
    Value weight = cast(c.b, c.raw(weight_arg), dtype);
    std::vector<int64_t> dims = t.type.dims;
    dims.push_back(classes);
    Value onehot = c.b.compare(Compare::kEQ, c.b.iota({DType::kS64, dims}, t.type.rank()),
                               c.b.broadcast_in_dim(t, dims, [&] {
                                 std::vector<int64_t> d;
                                 for (int64_t i = 0; i < t.type.rank(); ++i) d.push_back(i);
                                 return d;
                               }()));
    Value wb = c.b.broadcast_in_dim(weight, dims, {t.type.rank()});
    w = m.reduce(c.b.select(onehot, wb, m.k(0, wb)), {t.type.rank()}, BinaryOp::kAdd, 0);
  } else {
    w = c.b.constant(1, {dtype, t.type.dims});
  }
  Value keep = c.b.compare(Compare::kNE, t, c.b.constant_int(ignore_index, t.type));
  return c.b.select(keep, w, m.k(0, w));
}

// Mask selecting input[..., target[...]] over the class dimension (last of `input_dims`).
Value class_mask(LoweringContext& c, const Value& target, const std::vector<int64_t>& input_dims,
                 int64_t class_dim) {
  Value t = cast(c.b, target, DType::kS64);
  std::vector<int64_t> tdims;
  for (int64_t i = 0; i < static_cast<int64_t>(input_dims.size()); ++i)
    if (i != class_dim) tdims.push_back(i);
  return c.b.compare(Compare::kEQ, c.b.iota({DType::kS64, input_dims}, class_dim),
                     c.b.broadcast_in_dim(t, input_dims, tdims));
}

V nll_loss_forward(LoweringContext& c) {
  // (self, target, weight?, reduction, ignore_index) -> (output, total_weight)
  Math m{c.b};
  Value x = c.raw(0);
  int64_t class_dim = x.type.rank() == 1 ? 0 : 1;
  int64_t reduction = c.arg(3).toInt(), ignore = c.arg(4).toInt();
  Value w = target_weights(c, m, c.raw(1), x.type.dtype, x.type.dims[class_dim], 2, ignore);
  Value picked = m.reduce(c.b.select(class_mask(c, c.raw(1), x.type.dims, class_dim), x, m.k(0, x)),
                          {class_dim}, BinaryOp::kAdd, 0);
  Value losses = m.mul(c.b.unary(UnaryOp::kNegate, picked), w);
  std::vector<int64_t> all;
  for (int64_t i = 0; i < losses.type.rank(); ++i) all.push_back(i);
  Value total_weight = m.reduce(w, all, BinaryOp::kAdd, 0);
  if (reduction == 0) return {losses, total_weight};
  Value sum = m.reduce(losses, all, BinaryOp::kAdd, 0);
  return {reduction == 1 ? m.div(sum, total_weight) : sum, total_weight};
}

V nll_loss_backward(LoweringContext& c) {
  // (grad_output, self, target, weight?, reduction, ignore_index, total_weight) -> grad_input
  Math m{c.b};
  Value x = c.raw(1);
  DType t = c.out().dtype;
  int64_t class_dim = x.type.rank() == 1 ? 0 : 1;
  int64_t reduction = c.arg(4).toInt(), ignore = c.arg(5).toInt();
  Value w = target_weights(c, m, c.raw(2), t, x.type.dims[class_dim], 3, ignore);
  Value g = cast(c.b, c.raw(0), t);
  if (reduction == 1) g = m.div(g, cast(c.b, c.raw(6), t));
  Value scale = reduction == 0 ? m.mul(g, w) : m.mul(c.b.broadcast_in_dim(g, w.type.dims, {}), w);
  std::vector<int64_t> tdims;
  for (int64_t i = 0; i < x.type.rank(); ++i)
    if (i != class_dim) tdims.push_back(i);
  Value spread = c.b.broadcast_in_dim(c.b.unary(UnaryOp::kNegate, scale), x.type.dims, tdims);
  Value zeros = c.b.constant(0, {t, x.type.dims});
  return {c.b.select(class_mask(c, c.raw(2), x.type.dims, class_dim), spread, zeros)};
}

V embedding_dense_backward(LoweringContext& c) {
  // (grad_output, indices, num_weights, padding_idx, scale_grad_by_freq) -> grad_weight
  Math m{c.b};
  Value g = c.in(0);
  Value idx = cast(c.b, c.raw(1), DType::kS64);
  int64_t n = idx.type.element_count(), dim = c.out().dims[1];
  int64_t num_weights = c.arg(2).toInt(), padding = c.arg(3).toInt();
  Value rows = c.b.reshape(g, {n, dim});
  Value flat_idx = c.b.reshape(idx, {n, 1});
  Value keep = c.b.compare(Compare::kNE, flat_idx, c.b.constant_int(padding, flat_idx.type));
  rows = c.b.select(c.b.broadcast_in_dim(c.b.reshape(keep, {n}), {n, dim}, {0}), rows, m.k(0, rows));
  auto add = [](hlo::Builder& rb, const V& a) { return V{rb.binary(BinaryOp::kAdd, a[0], a[1])}; };
  Value zeros = c.b.constant(0, {g.type.dtype, {num_weights, dim}});
  Value grad = c.b.scatter(zeros, flat_idx, rows, {{1}, {0}, {0}, 1}, add);
  if (c.arg(4).toBool()) {
    Value ones = c.b.constant(1, {g.type.dtype, {n}});
    Value counts = c.b.scatter(c.b.constant(0, {g.type.dtype, {num_weights}}), flat_idx, ones,
                               {{}, {0}, {0}, 1}, add);
    counts = m.add(counts, c.b.select(c.b.compare(Compare::kEQ, counts, m.k(0, counts)), m.k(1, counts), m.k(0, counts)));
    grad = m.div(grad, c.b.broadcast_in_dim(counts, {num_weights, dim}, {0}));
  }
  return {grad};
}

std::vector<int64_t> trailing_dims(int64_t rank, int64_t count) {
  std::vector<int64_t> dims;
  for (int64_t d = rank - count; d < rank; ++d) dims.push_back(d);
  return dims;
}

V layer_norm(LoweringContext& c) {
  // (input, normalized_shape, weight?, bias?, eps) -> (out, mean, rstd)
  Math m{c.b};
  Value x = cast(c.b, c.raw(0), accumulator(c.out().dtype));
  auto dims = trailing_dims(x.type.rank(), static_cast<int64_t>(c.int_list(1).size()));
  std::vector<int64_t> batch;
  for (int64_t d = 0; d < x.type.rank() - static_cast<int64_t>(dims.size()); ++d) batch.push_back(d);
  double n = 1;
  for (int64_t d : dims) n *= x.type.dims[d];
  Value sum = m.reduce(x, dims, BinaryOp::kAdd, 0);
  Value mean = m.div(sum, m.k(n, sum));
  Value centered = m.sub(x, c.b.broadcast_in_dim(mean, x.type.dims, batch));
  Value var = m.div(m.reduce(m.mul(centered, centered), dims, BinaryOp::kAdd, 0), m.k(n, mean));
  Value rstd = c.b.unary(UnaryOp::kRsqrt, m.add(var, m.k(c.arg(4).toDouble(), var)));
  Value y = m.mul(centered, c.b.broadcast_in_dim(rstd, x.type.dims, batch));
  if (c.has(2)) y = m.mul(y, c.b.broadcast_in_dim(cast(c.b, c.raw(2), y.type.dtype), x.type.dims, dims));
  if (c.has(3)) y = m.add(y, c.b.broadcast_in_dim(cast(c.b, c.raw(3), y.type.dtype), x.type.dims, dims));
  // mean and rstd keep the normalized dimensions, as size 1.
  return {y, c.b.reshape(mean, c.out(1).dims), c.b.reshape(rstd, c.out(2).dims)};
}

V layer_norm_backward(LoweringContext& c) {
  // (grad_out, input, normalized_shape, mean, rstd, weight?, bias?, output_mask)
  Math m{c.b};
  DType acc = accumulator(c.out().dtype);
  Value g = cast(c.b, c.raw(0), acc), x = cast(c.b, c.raw(1), acc);
  int64_t rank = x.type.rank();
  auto dims = trailing_dims(rank, static_cast<int64_t>(c.int_list(2).size()));
  std::vector<int64_t> batch;
  for (int64_t d = 0; d < rank - static_cast<int64_t>(dims.size()); ++d) batch.push_back(d);
  double n = 1;
  for (int64_t d : dims) n *= x.type.dims[d];
  Value mean = broadcast_to(c.b, cast(c.b, c.raw(3), acc), x.type.dims);
  Value rstd = broadcast_to(c.b, cast(c.b, c.raw(4), acc), x.type.dims);
  Value xhat = m.mul(m.sub(x, mean), rstd);
  Value gw = c.has(5) ? m.mul(g, c.b.broadcast_in_dim(cast(c.b, c.raw(5), acc), x.type.dims, dims)) : g;
  Value mean_gw = m.div(m.reduce_keep(gw, dims, BinaryOp::kAdd, 0), m.k(n, gw));
  Value mean_gwx = m.div(m.reduce_keep(m.mul(gw, xhat), dims, BinaryOp::kAdd, 0), m.k(n, gw));
  Value grad_input = m.mul(rstd, m.sub(m.sub(gw, mean_gw), m.mul(xhat, mean_gwx)));
  Value grad_weight = m.reduce(m.mul(g, xhat), batch, BinaryOp::kAdd, 0);
  Value grad_bias = m.reduce(g, batch, BinaryOp::kAdd, 0);
  return {grad_input, grad_weight, grad_bias};
}

}  // namespace

TORCHTPU_LOWERINGS(nn) {
  register_lowering({"_softmax", "_softmax.out"}, [](LoweringContext& c) {
    Math m{c.b};
    Value x = cast(c.b, c.raw(0), accumulator(c.out().dtype));
    return V{softmax(m, x, wrap(c.arg(1).toInt(), x.type.rank()), false)};
  });
  register_lowering({"_log_softmax", "_log_softmax.out"}, [](LoweringContext& c) {
    Math m{c.b};
    Value x = cast(c.b, c.raw(0), accumulator(c.out().dtype));
    return V{softmax(m, x, wrap(c.arg(1).toInt(), x.type.rank()), true)};
  });
  register_lowering({"_softmax_backward_data", "_softmax_backward_data.out"}, [](LoweringContext& c) {
    Math m{c.b};  // (grad_output, output, dim, input_dtype)
    DType acc = accumulator(c.out().dtype);
    Value g = cast(c.b, c.raw(0), acc), y = cast(c.b, c.raw(1), acc);
    int64_t dim = wrap(c.arg(2).toInt(), y.type.rank());
    return V{m.mul(y, m.sub(g, m.reduce_keep(m.mul(g, y), {dim}, BinaryOp::kAdd, 0)))};
  });
  register_lowering({"_log_softmax_backward_data", "_log_softmax_backward_data.out"}, [](LoweringContext& c) {
    Math m{c.b};
    DType acc = accumulator(c.out().dtype);
    Value g = cast(c.b, c.raw(0), acc), y = cast(c.b, c.raw(1), acc);
    int64_t dim = wrap(c.arg(2).toInt(), y.type.rank());
    Value sum = m.reduce_keep(g, {dim}, BinaryOp::kAdd, 0);
    return V{m.sub(g, m.mul(c.b.unary(UnaryOp::kExponential, y), sum))};
  });
  register_lowering({"nll_loss_forward", "nll_loss_forward.output"}, nll_loss_forward);
  register_lowering({"nll_loss_backward", "nll_loss_backward.grad_input"}, nll_loss_backward);
  register_lowering({"embedding_dense_backward", "embedding_dense_backward.out"}, embedding_dense_backward);
  register_lowering({"native_layer_norm", "native_layer_norm.out"}, layer_norm);
  register_lowering({"native_layer_norm_backward", "native_layer_norm_backward.out"}, layer_norm_backward);
}

}  // namespace torchtpu::aten
