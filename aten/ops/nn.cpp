// Neural-network ops training scripts hit directly: softmax family, nll_loss, distances.
// Low-precision inputs compute in f32.
#include <cmath>

#include "aten/lowering.h"
#include "aten/ops/loss_util.h"
#include "aten/ops/lowering_util.h"
#include "aten/ops/math.h"

namespace torchtpu::aten {
namespace {

// softmax or log_softmax of x (in float32 for low-precision inputs) along dim. CPU's log_softmax
// kernel over the last dimension keeps the sum of exponentials and its log in the input's dtype
// (`stored`): for bfloat16/float16 those two round here too.
Value softmax(Math& m, const Value& x, int64_t dim, bool log, DType stored) {
  if (x.type.rank() == 0) return m.k(log ? 0 : 1, x);
  Value shifted = m.sub(x, m.reduce_keep(x, {dim}, BinaryOp::kMaximum, -INFINITY));
  Value e = m.b.unary(UnaryOp::kExponential, shifted);
  Value sum = m.reduce_keep(e, {dim}, BinaryOp::kAdd, 0);
  if (!log) return m.div(e, sum);
  bool rounds = stored != x.type.dtype && dim == x.type.rank() - 1;
  auto in_stored = [&](const Value& v) { return rounds ? rounded_to(m.b, v, stored) : v; };
  return m.sub(shifted, in_stored(m.b.unary(UnaryOp::kLog, in_stored(sum))));
}

// The class weights and mask of each target: weight[target] (or 1), 0 where target == ignore.
Value target_weights(LoweringContext& c, Math& m, const Value& target, DType dtype, int64_t classes,
                     size_t weight_arg, int64_t ignore_index) {
  Value t = cast(c.b, target, DType::kS64);
  Value w;
  if (c.has(weight_arg)) {
    Value weight = cast(c.b, c.input_uncast(weight_arg), dtype);
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

// Every target is a class or ignore_index: CPU raises IndexError, CUDA asserts on the device.
void check_targets(LoweringContext& c, const Value& target, int64_t classes, int64_t ignore_index) {
  Value t = cast(c.b, target, DType::kS64);
  Value ignored = c.b.compare(Compare::kEQ, t, c.b.constant_int(ignore_index, t.type));
  c.check_on_device(all_true(c.b, c.b.binary(BinaryOp::kOr, in_range(c.b, t, classes), ignored)));
}

Values nll_loss_forward(LoweringContext& c) {
  // (self, target, weight?, reduction, ignore_index) -> (output, total_weight)
  Math m{c.b};
  Value x = c.input_uncast(0);
  int64_t class_dim = x.type.rank() == 1 ? 0 : 1;
  int64_t reduction = c.arg(3).toInt(), ignore = c.arg(4).toInt();
  check_targets(c, c.input_uncast(1), x.type.dims[class_dim], ignore);
  Value w = target_weights(c, m, c.input_uncast(1), x.type.dtype, x.type.dims[class_dim], 2, ignore);
  if (c.padded()) w = c.b.select(c.inside(1), w, m.k(0, w));  // padded targets weigh nothing
  Value picked = m.reduce(c.b.select(class_mask(c, c.input_uncast(1), x.type.dims, class_dim), x, m.k(0, x)),
                          {class_dim}, BinaryOp::kAdd, 0);
  // bfloat16/float16 losses are summed in float32 and rounded once, as CUDA's kernel accumulates
  // (CPU's folds them in bfloat16, further from the exact sum)
  DType dtype = x.type.dtype, acc = accumulator(dtype);
  Value weights = cast(c.b, w, acc);
  Value losses = (-cast(c.b, picked, acc)) * weights;
  std::vector<int64_t> all;
  for (int64_t i = 0; i < losses.type.rank(); ++i) all.push_back(i);
  if (reduction == kNone) return {cast(c.b, losses, dtype), c.b.constant(0, {dtype, {}})};  // CPU leaves it 0
  Value total_weight = m.reduce(weights, all, BinaryOp::kAdd, 0);
  Value sum = m.reduce(losses, all, BinaryOp::kAdd, 0);
  Value loss = reduction == kMean ? sum / total_weight : sum;
  return {cast(c.b, loss, dtype), cast(c.b, total_weight, dtype)};
}

Values nll_loss_backward(LoweringContext& c) {
  // (grad_output, self, target, weight?, reduction, ignore_index, total_weight) -> grad_input
  Math m{c.b};
  Value x = c.input_uncast(1);
  DType t = c.out().dtype;
  int64_t class_dim = x.type.rank() == 1 ? 0 : 1;
  int64_t reduction = c.arg(4).toInt(), ignore = c.arg(5).toInt();
  Value w = target_weights(c, m, c.input_uncast(2), t, x.type.dims[class_dim], 3, ignore);
  Value g = cast(c.b, c.input_uncast(0), t);
  if (reduction == kMean) g = g / cast(c.b, c.input_uncast(6), t);
  Value scale = reduction == kNone ? g * w : c.b.broadcast_in_dim(g, w.type.dims, {}) * w;
  std::vector<int64_t> tdims;
  for (int64_t i = 0; i < x.type.rank(); ++i)
    if (i != class_dim) tdims.push_back(i);
  Value spread = c.b.broadcast_in_dim(-scale, x.type.dims, tdims);
  Value zeros = c.b.constant(0, {t, x.type.dims});
  // ignored targets get no gradient at all: a NaN from 0 / total_weight must not reach them
  Value target = cast(c.b, c.input_uncast(2), DType::kS64);
  Value counted = c.b.broadcast_in_dim(c.b.compare(Compare::kNE, target, c.b.constant_int(ignore, target.type)),
                                       x.type.dims, tdims);
  Value where = c.b.binary(BinaryOp::kAnd, class_mask(c, c.input_uncast(2), x.type.dims, class_dim), counted);
  return {c.b.select(where, spread, zeros)};
}

// Element-wise losses (self, target, reduction, ...): the per-element loss reduced as PyTorch's
// `reduction` says. Computed in f32 for low-precision inputs.

template <typename F>  // f(m, diff = self - target, param) -> per-element loss
Lowering pointwise_loss(F f) {
  return [f](LoweringContext& c) {
    Math m{c.b};
    DType acc = accumulator(c.out().dtype);
    Value x = c.input_as(0, acc), t = c.input_as(1, acc);
    auto dims = broadcast_shape(x.type.dims, t.type.dims);
    Value d = broadcast_to(c.b, x, dims) - broadcast_to(c.b, t, dims);
    return Values{reduce_loss(m, f(m, d, c.num_args() > 3 ? c.arg(3).toDouble() : 0.0), c.arg(2).toInt())};
  };
}

// Backward of a pointwise loss (grad_output, self, target, reduction, ...): grad * f'(diff),
// divided by the element count for a mean.
template <typename F>  // f(m, diff, param) -> d loss / d self
Lowering pointwise_loss_backward(F f) {
  return [f](LoweringContext& c) {
    Math m{c.b};
    DType acc = accumulator(c.out().dtype);
    const auto& dims = c.out().dims;
    Value d = broadcast_to(c.b, c.input_as(1, acc), dims) - broadcast_to(c.b, c.input_as(2, acc), dims);
    Value g = broadcast_to(c.b, c.input_as(0, acc), dims);
    if (c.arg(3).toInt() == kMean) g = g / m.k(static_cast<double>(d.type.element_count()), g);
    return Values{g * f(m, d, c.num_args() > 4 ? c.arg(4).toDouble() : 0.0)};
  };
}

// a_i - b_j for the rows of a [..., P, M] and b [..., R, M] -> [..., P, R, M].
Value pairwise_difference(Math& m, const Value& a, const Value& b) {
  int64_t rank = a.type.rank();
  std::vector<int64_t> dims = a.type.dims;
  dims.insert(dims.end() - 1, b.type.dims[rank - 2]);
  std::vector<int64_t> batch;
  for (int64_t d = 0; d < rank - 2; ++d) batch.push_back(d);
  std::vector<int64_t> a_map = batch, b_map = batch;
  a_map.insert(a_map.end(), {rank - 2, rank});
  b_map.insert(b_map.end(), {rank - 1, rank});
  return m.sub(m.b.broadcast_in_dim(a, dims, a_map), m.b.broadcast_in_dim(b, dims, b_map));
}

// p-norm distances between rows of a [..., P, M] and b [..., R, M] -> [..., P, R].
Value pairwise_distance(Math& m, const Value& a, const Value& b, double p) {
  int64_t rank = a.type.rank();
  Value diff = m.b.unary(UnaryOp::kAbs, pairwise_difference(m, a, b));
  if (p == 0) return m.sum(cast(m.b, m.b.compare(Compare::kNE, diff, m.k(0, diff)), diff.type.dtype), {rank});
  if (std::isinf(p)) return m.reduce(diff, {rank}, BinaryOp::kMaximum, 0);
  if (p == 1) return m.sum(diff, {rank});
  if (p == 2) return m.b.unary(UnaryOp::kSqrt, m.sum(m.mul(diff, diff), {rank}));
  Value s = m.sum(m.b.binary(BinaryOp::kPower, diff, m.k(p, diff)), {rank});
  return m.b.binary(BinaryOp::kPower, s, m.k(1 / p, s));
}

// x1 and x2 with their batch dimensions broadcast to the output's (cdist's batch rules).
std::pair<Value, Value> with_common_batch(LoweringContext& c, const Value& x1, const Value& x2,
                                          const std::vector<int64_t>& batch) {
  auto expand = [&](const Value& v) {
    std::vector<int64_t> dims = batch;
    dims.insert(dims.end(), v.type.dims.end() - 2, v.type.dims.end());
    return broadcast_to(c.b, v, dims);
  };
  return {expand(x1), expand(x2)};
}

Values cdist(LoweringContext& c) {  // (x1, x2, p, compute_mode); batch dims broadcast
  Math m{c.b};
  std::vector<int64_t> batch(c.out().dims.begin(), c.out().dims.end() - 2);
  auto [a, b] = with_common_batch(c, c.input(0), c.input(1), batch);
  return {pairwise_distance(m, a, b, c.arg(2).toDouble())};
}

// The gradient of x1 from distances between rows of a (x1) and b: for each pair, g * d dist / d a,
// which is sign(diff) |diff|^(p-1) / dist^(p-1) (0 where dist is 0), and for p = inf sign(diff)
// where |diff| is the max; summed over b's rows. g and dist: [..., P, R].
Value distance_gradient(Math& m, const Value& g, const Value& a, const Value& b, const Value& dist, double p) {
  Value diff = pairwise_difference(m, a, b);
  int64_t rank = diff.type.rank();
  if (p == 0) return m.k(0, a);
  std::vector<int64_t> pair_dims;
  for (int64_t d = 0; d < rank - 1; ++d) pair_dims.push_back(d);
  Value dist_b = m.b.broadcast_in_dim(dist, diff.type.dims, pair_dims);
  Value g_b = m.b.broadcast_in_dim(g, diff.type.dims, pair_dims);
  Value sign = m.b.unary(UnaryOp::kSign, diff), magnitude = m.b.unary(UnaryOp::kAbs, diff);
  Value slope;
  if (std::isinf(p)) {
    slope = m.b.select(m.b.compare(Compare::kEQ, magnitude, dist_b), sign, m.k(0, sign));
  } else if (p == 1) {
    slope = sign;
  } else {
    Value ratio = m.div(m.b.binary(BinaryOp::kPower, magnitude, m.k(p - 1, magnitude)),
                        m.b.binary(BinaryOp::kPower, dist_b, m.k(p - 1, dist_b)));
    Value zero = m.b.binary(BinaryOp::kOr, m.b.compare(Compare::kEQ, dist_b, m.k(0, dist_b)),
                            m.b.compare(Compare::kEQ, magnitude, m.k(0, magnitude)));  // p < 1: 0^(p-1)
    slope = m.b.select(zero, m.k(0, sign), m.mul(sign, ratio));
  }
  return m.sum(m.mul(g_b, slope), {rank - 2});  // over b's rows
}

// _cdist_backward(grad, x1, x2, p, cdist) -> grad of x1.
Values cdist_backward(LoweringContext& c) {
  Math m{c.b};
  Value g = c.input(0);
  std::vector<int64_t> batch(g.type.dims.begin(), g.type.dims.end() - 2);
  auto [a, b] = with_common_batch(c, c.input(1), c.input(2), batch);
  Value grad = distance_gradient(m, g, a, b, c.input(4), c.arg(3).toDouble());
  return {c.b.reshape(m.sum_to(grad, c.out().dims), c.out().dims)};
}

// _pdist_backward(grad, self, p, pdist): cdist's gradient with the pair values spread into
// symmetric [N, N] matrices (each pair moves both of its rows).
Values pdist_backward(LoweringContext& c) {
  Math m{c.b};
  Value x = c.input(1);
  int64_t n = x.type.dims[0], count = n * (n - 1) / 2;
  if (count == 0) return {c.b.constant(0, c.out())};
  std::vector<int64_t> source(static_cast<size_t>(n * n), count);  // count: the appended 0
  for (int64_t i = 0, k = 0; i < n; ++i)
    for (int64_t j = i + 1; j < n; ++j, ++k) source[i * n + j] = source[j * n + i] = k;
  Value positions = c.b.constant_bytes(source.data(), {DType::kS64, {n * n}});
  auto symmetric = [&](const Value& pairs) {
    Value padded = c.b.concatenate({pairs, c.b.constant(0, {pairs.type.dtype, {1}})}, 0);
    return c.b.reshape(take_along(c.b, padded, 0, positions), {n, n});
  };
  return {distance_gradient(m, symmetric(c.input(0)), x, x, symmetric(c.input(3)), c.arg(2).toDouble())};
}

Values pdist(LoweringContext& c) {  // (self [N, M], p) -> distances of pairs i < j, row-major
  Math m{c.b};
  Value x = c.input(0);
  int64_t n = x.type.dims[0];
  Value all = c.b.reshape(pairwise_distance(m, x, x, c.arg(1).toDouble()), {n * n});
  std::vector<int64_t> pairs;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = i + 1; j < n; ++j) pairs.push_back(i * n + j);
  int64_t count = static_cast<int64_t>(pairs.size());
  if (count == 0) return {c.b.constant(0, c.out())};
  Value idx = c.b.constant_bytes(pairs.data(), {DType::kS64, {count, 1}});
  return {c.b.gather(all, idx, {{}, {0}, {0}, 1}, {1}, {count})};
}

// binary_cross_entropy(self, target, weight?, reduction): logs clamped at -100, as PyTorch.
Values binary_cross_entropy(LoweringContext& c) {
  Math m{c.b};
  DType acc = accumulator(c.out().dtype);
  Value x = c.input_as(0, acc), t = broadcast_to(c.b, c.input_as(1, acc), x.type.dims);
  auto clamped_log = [&](const Value& v) { return m.b.binary(BinaryOp::kMaximum, m.b.unary(UnaryOp::kLog, v), m.k(-100, v)); };
  Value loss = (t * clamped_log(x) + (m.k(1, t) - t) * clamped_log(m.k(1, x) - x)) * m.k(-1, x);
  if (c.has(2)) loss = loss * broadcast_to(c.b, c.input_as(2, acc), x.type.dims);
  Value in_range = m.b.binary(BinaryOp::kAnd, c.b.compare(Compare::kGE, x, m.k(0, x)), c.b.compare(Compare::kLE, x, m.k(1, x)));
  c.check_on_device(all_true(c.b, in_range));
  return {reduce_loss(m, loss, c.arg(3).toInt())};
}

// (grad, self, target, weight?, reduction): grad * w * (x - t) / max(x (1 - x), 1e-12).
Values binary_cross_entropy_backward(LoweringContext& c) {
  Math m{c.b};
  DType acc = accumulator(c.out().dtype);
  const auto& dims = c.out().dims;
  Value x = c.input_as(1, acc), t = broadcast_to(c.b, c.input_as(2, acc), dims);
  Value g = broadcast_to(c.b, c.input_as(0, acc), dims);
  if (c.arg(4).toInt() == kMean) g = g / m.k(static_cast<double>(x.type.element_count()), g);
  Value denominator = c.b.binary(BinaryOp::kMaximum, (m.k(1, x) - x) * x, m.k(1e-12, x));
  Value r = g * ((x - t) / denominator);
  if (c.has(3)) r = r * broadcast_to(c.b, c.input_as(3, acc), dims);
  return {r};
}

// The halves of `x` along `dim` (glu's value and gate).
std::pair<Value, Value> halves(hlo::Builder& b, const Value& x, int64_t dim) {
  std::vector<int64_t> start(x.type.rank(), 0), limit = x.type.dims, step(x.type.rank(), 1);
  int64_t half = x.type.dims[dim] / 2;
  limit[dim] = half;
  Value first = b.slice(x, start, limit, step);
  start[dim] = half;
  limit[dim] = 2 * half;
  return {first, b.slice(x, start, limit, step)};
}

// prelu's kernel (self, weight broadcastable to self) and its backward -> (grad_self, grad_weight).
Values prelu_backward(LoweringContext& c) {
  Math m{c.b};
  Value g = c.elementwise_input(0), x = c.elementwise_input(1), w = c.elementwise_input(2);
  Value positive = c.b.compare(Compare::kGT, x, m.k(0, x));
  Value grad_x = c.b.select(positive, g, w * g);
  Value grad_w = c.b.select(positive, m.k(0, x), x * g);
  return {grad_x, cast(c.b, m.sum_to(grad_w, c.out(1).dims), c.out(1).dtype)};
}

// nll_loss padded: any dimension of the target (and of a per-element gradient), those of `self`
// (argument `self_arg`) but its class dimension.
PaddingRule padded_targets(size_t self_arg, bool needs_sizes) {
  auto paddable = [self_arg](const std::vector<c10::IValue>& args, size_t arg, int64_t dim) {
    if (arg != self_arg) return arg <= self_arg + 1;
    return dim != (args[self_arg].toTensor().dim() == 1 ? 0 : 1);
  };
  return {exec::Fill::kZero, paddable, needs_sizes};
}

// softmax and its backward: rows are the dimensions before the one normalized (argument
// `dim_arg`), read from the arguments before it.
PaddingRule softmax_rows(size_t dim_arg, exec::Fill fill = exec::Fill::kZero) {
  auto rows = [dim_arg](const std::vector<c10::IValue>& args) {
    return c10::maybe_wrap_dim(args[dim_arg].toInt(), args[0].toTensor().dim());
  };
  return rowwise_padding(rows, [dim_arg](size_t arg) { return arg < dim_arg; }, fill);
}

}  // namespace

TORCHTPU_LOWERINGS(nn) {
  register_lowering({"_cdist_forward", "_cdist_forward.out"}, cdist);
  register_lowering({"_cdist_backward", "_cdist_backward.out"}, cdist_backward);
  register_lowering({"_pdist_forward", "_pdist_forward.out"}, pdist);
  register_lowering({"_pdist_backward", "_pdist_backward.out"}, pdist_backward);
  register_lowering({"_softmax", "_softmax.out"}, [](LoweringContext& c) {
    Math m{c.b};
    Value x = cast(c.b, c.input_uncast(0), accumulator(c.out().dtype));
    return Values{softmax(m, x, wrap_dim(c.arg(1).toInt(), x.type.rank()), false, c.out().dtype)};
  }, padded({}, softmax_rows(1, exec::Fill::kLowest)));
  register_lowering({"_log_softmax", "_log_softmax.out"}, [](LoweringContext& c) {
    Math m{c.b};
    Value x = cast(c.b, c.input_uncast(0), accumulator(c.out().dtype));
    return Values{softmax(m, x, wrap_dim(c.arg(1).toInt(), x.type.rank()), true, c.out().dtype)};
  }, padded({}, softmax_rows(1, exec::Fill::kLowest)));
  register_lowering({"_softmax_backward_data", "_softmax_backward_data.out"}, [](LoweringContext& c) {
    Math m{c.b};  // (grad_output, output, dim, input_dtype)
    DType acc = accumulator(c.out().dtype);
    Value g = cast(c.b, c.input_uncast(0), acc), y = cast(c.b, c.input_uncast(1), acc);
    if (y.type.rank() == 0) return Values{m.k(0, g)};
    int64_t dim = wrap_dim(c.arg(2).toInt(), y.type.rank());
    return Values{y * (g - m.reduce_keep(g * y, {dim}, BinaryOp::kAdd, 0))};
  }, padded({}, softmax_rows(2)));  // padded gradients read 0: the sums over a row see only its exact part
  register_lowering({"_log_softmax_backward_data", "_log_softmax_backward_data.out"}, [](LoweringContext& c) {
    Math m{c.b};
    DType acc = accumulator(c.out().dtype);
    Value g = cast(c.b, c.input_uncast(0), acc), y = cast(c.b, c.input_uncast(1), acc);
    if (y.type.rank() == 0) return Values{m.k(0, g)};
    int64_t dim = wrap_dim(c.arg(2).toInt(), y.type.rank());
    Value sum = m.reduce_keep(g, {dim}, BinaryOp::kAdd, 0);
    return Values{g - c.b.unary(UnaryOp::kExponential, y) * sum};
  }, padded({}, softmax_rows(2)));
  // The class dimension is 1 for any rank, so one lowering serves nll_loss and nll_loss2d. Padded,
  // targets past the exact sizes read as class 0 and are given no weight.
  register_lowering({"nll_loss_forward", "nll_loss_forward.output", "nll_loss2d_forward", "nll_loss2d_forward.output"},
                    nll_loss_forward, padded(checked("Target is out of bounds."), padded_targets(0, true)));
  register_lowering({"nll_loss_backward", "nll_loss_backward.grad_input", "nll_loss2d_backward",
                     "nll_loss2d_backward.grad_input"}, nll_loss_backward, padded({}, padded_targets(1, false)));

  register_lowering({"mse_loss", "mse_loss.out"}, pointwise_loss([](Math& m, const Value& d, double) {
    return m.square(d);
  }));
  register_lowering({"mse_loss_backward", "mse_loss_backward.grad_input"},
                    pointwise_loss_backward([](Math& m, const Value& d, double) { return m.mul(m.k(2, d), d); }));
  // smooth_l1 (beta) and huber (delta): quadratic near 0, linear beyond.
  register_lowering({"smooth_l1_loss", "smooth_l1_loss.out"}, pointwise_loss([](Math& m, const Value& d, double beta) {
    Value a = m.b.unary(UnaryOp::kAbs, d);
    if (beta == 0) return a;
    Value quadratic = m.div(m.mul(m.k(0.5, a), m.square(a)), m.k(beta, a));
    return m.b.select(m.b.compare(Compare::kLT, a, m.k(beta, a)), quadratic, m.sub(a, m.k(0.5 * beta, a)));
  }));
  register_lowering({"smooth_l1_loss_backward", "smooth_l1_loss_backward.grad_input"},
                    pointwise_loss_backward([](Math& m, const Value& d, double beta) {
                      Value sign = m.b.unary(UnaryOp::kSign, d);
                      if (beta == 0) return sign;
                      Value inside = m.b.compare(Compare::kLT, m.b.unary(UnaryOp::kAbs, d), m.k(beta, d));
                      return m.b.select(inside, m.div(d, m.k(beta, d)), sign);
                    }));
  register_lowering({"huber_loss", "huber_loss.out"}, pointwise_loss([](Math& m, const Value& d, double delta) {
    Value a = m.b.unary(UnaryOp::kAbs, d);
    Value linear = m.mul(m.k(delta, a), m.sub(a, m.k(0.5 * delta, a)));
    return m.b.select(m.b.compare(Compare::kLT, a, m.k(delta, a)), m.mul(m.k(0.5, a), m.square(a)), linear);
  }));
  register_lowering({"huber_loss_backward", "huber_loss_backward.out"},
                    pointwise_loss_backward([](Math& m, const Value& d, double delta) {
                      return m.b.clamp(m.k(-delta, d), d, m.k(delta, d));
                    }));
  // log_sigmoid = min(x, 0) - log1p(exp(-|x|)); the buffer is CPU's exp(-|x|).
  LoweringOptions probabilities = checked("all elements of input should be between 0 and 1");
  probabilities.device_check_runtime_error = true;
  register_lowering({"binary_cross_entropy", "binary_cross_entropy.out"}, binary_cross_entropy, probabilities);
  register_lowering({"binary_cross_entropy_backward", "binary_cross_entropy_backward.grad_input"},
                    binary_cross_entropy_backward);
  register_lowering({"glu", "glu.out"}, [](LoweringContext& c) {
    Value x = c.input_as(0, accumulator(c.out().dtype));
    auto [a, gate] = halves(c.b, x, wrap_dim(c.arg(1).toInt(), x.type.rank()));
    return Values{a * c.b.unary(UnaryOp::kLogistic, gate)};
  });
  register_lowering({"glu_backward", "glu_backward.grad_input"}, [](LoweringContext& c) {
    Math m{c.b};  // (grad, self, dim)
    DType acc = accumulator(c.out().dtype);
    Value g = c.input_as(0, acc), x = c.input_as(1, acc);
    int64_t dim = wrap_dim(c.arg(2).toInt(), x.type.rank());
    auto [a, gate] = halves(c.b, x, dim);
    Value s = c.b.unary(UnaryOp::kLogistic, gate);
    Value grad_gate = g * a * (s * (m.k(1, s) - s));
    return Values{c.b.concatenate({g * s, grad_gate}, dim)};
  });
  register_lowering({"glu_jvp", "glu_jvp.out"}, [](LoweringContext& c) {
    Math m{c.b};  // (glu, self, tangent, dim): d(a σ(b)) = da σ(b) + a σ(b) (1 - σ(b)) db
    DType acc = accumulator(c.out().dtype);
    Value glu = c.input_as(0, acc), x = c.input_as(1, acc), dx = c.input_as(2, acc);
    int64_t dim = wrap_dim(c.arg(3).toInt(), x.type.rank());
    Value s = c.b.unary(UnaryOp::kLogistic, halves(c.b, x, dim).second);
    auto [da, dgate] = halves(c.b, dx, dim);
    return Values{da * s + glu * (m.k(1, s) - s) * dgate};
  }, with_meta(shaped_like(0)));
  register_lowering({"_prelu_kernel"}, [](LoweringContext& c) {
    Math m{c.b};
    Value x = c.elementwise_input(0);
    return Values{c.b.select(c.b.compare(Compare::kGT, x, m.k(0, x)), x, c.elementwise_input(1) * x)};
  });
  register_lowering({"_prelu_kernel_backward"}, prelu_backward);
  register_lowering({"log_sigmoid_forward", "log_sigmoid_forward.output"}, [](LoweringContext& c) {
    Math m{c.b};
    Value x = c.input_as(0, accumulator(c.out().dtype));
    Value z = m.b.unary(UnaryOp::kExponential, -m.b.unary(UnaryOp::kAbs, x));
    Value out = m.b.binary(BinaryOp::kMinimum, x, m.k(0, x)) - m.b.unary(UnaryOp::kLogPlusOne, z);
    return Values{out, c.out(1).element_count() == 0 ? c.b.constant(0, c.out(1)) : z};
  });
  register_lowering({"log_sigmoid_backward", "log_sigmoid_backward.grad_input"}, [](LoweringContext& c) {
    Math m{c.b};  // (grad_output, self, buffer): grad * (1[x<0] + sign * z / (1 + z)), z = exp(-|x|)
    DType acc = accumulator(c.out().dtype);
    Value g = c.broadcast_to_output(c.input_as(0, acc)), x = c.broadcast_to_output(c.input_as(1, acc));
    Value z = m.b.unary(UnaryOp::kExponential, -m.b.unary(UnaryOp::kAbs, x));
    Value negative = m.b.compare(Compare::kLT, x, m.k(0, x));
    Value ratio = z / (m.k(1, z) + z);
    return Values{g * m.b.select(negative, m.k(1, z) - ratio, ratio)};
  });
}

// The dtypes CPU's kernels refuse that PyTorch's meta kernels let through (aten/dtype_support.h),
// measured against CPU PyTorch 2.11.
TORCHTPU_LOWERINGS(nn_cpu_refusals) {
  // (CPU names its kernel by the dimension, "softmax_lastdim_kernel_impl" for the last one.)
  refuse_on_cpu("_softmax", {Refused::kInteger, "softmax_kernel_impl"});
  refuse_on_cpu("_softmax", {Refused::kBool, "softmax_kernel_impl"});
  refuse_on_cpu("_log_softmax", {Refused::kInteger, "log_softmax_kernel_impl"});
  refuse_on_cpu("_log_softmax", {Refused::kBool, "log_softmax_kernel_impl"});
}

}  // namespace torchtpu::aten
