// Normalization layers: batch norm (training and eval, running statistics updated in place),
// group norm, layer norm and weight norm, forward and backward. Statistics are computed in f32 for
// low-precision inputs.
#include <ATen/ops/_native_batch_norm_legit.h>
#include <ATen/ops/_native_batch_norm_legit_no_training.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/native_batch_norm_backward.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/native_layer_norm.h>
#include <ATen/AccumulateType.h>
#include <torch/library.h>

#include "aten/lowering.h"
#include "aten/ops/lowering_util.h"
#include "aten/ops/math.h"

namespace torchtpu::aten {
namespace {

std::vector<int64_t> all_but_channels(int64_t rank) {
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < rank; ++d) dims.push_back(d);
  return dims;
}

// y = x * alpha + beta per channel, alpha = invstd * weight, beta = bias - mean * alpha: CPU's
// formula. `stat`: the dtype CPU keeps the statistics in (the input's, for bfloat16/half inputs
// with parameters of the same dtype), to which they are rounded before they are used.
Value normalize(LoweringContext& c, Math& m, const Value& x, Value mean, Value invstd, size_t weight_arg,
                size_t bias_arg, DType stat) {
  mean = cast(c.b, cast(c.b, mean, stat), x.type.dtype);
  invstd = cast(c.b, cast(c.b, invstd, stat), x.type.dtype);
  Value alpha = c.has(weight_arg) ? m.mul(invstd, cast(c.b, c.input_uncast(weight_arg), x.type.dtype)) : invstd;
  Value beta = c.has(bias_arg) ? m.sub(cast(c.b, c.input_uncast(bias_arg), x.type.dtype), m.mul(mean, alpha))
                               : -m.mul(mean, alpha);
  return m.add(m.mul(x, m.channel(alpha, x)), m.channel(beta, x));
}

// The dtype of batch norm's statistics on CPU: float when the input is bfloat16/half and a
// parameter (weight, bias, running statistics) is float ("mixed types"), else the input's.
at::ScalarType stat_dtype(const at::Tensor& x, const std::vector<std::optional<at::Tensor>>& params) {
  at::ScalarType t = x.scalar_type();
  if (t != at::kHalf && t != at::kBFloat16) return t;
  for (const std::optional<at::Tensor>& p : params)
    if (p && p->defined() && p->scalar_type() == at::kFloat) return at::kFloat;
  return t;
}

// Batch norm's meta results on CPU: the output in the input's layout (channels-last stays so),
// per-channel statistics when training (`stats`), else empty.
std::vector<c10::IValue> batch_norm_meta(const std::vector<c10::IValue>& args, bool training,
                                         std::initializer_list<size_t> params) {
  const at::Tensor& x = args[0].toTensor();
  std::vector<std::optional<at::Tensor>> p;
  for (size_t i : params) p.push_back(args[i].toOptional<at::Tensor>());
  at::ScalarType t = stat_dtype(x, p);
  int64_t channels = training ? (x.dim() > 1 ? x.size(1) : 1) : 0;
  auto stat = [&] { return at::empty({channels}, x.options().dtype(t)); };
  return {at::empty_like(x, x.suggest_memory_format()), stat(), stat()};
}

// A statistic for output `i`, or zeros when PyTorch returns an empty tensor there (eval mode).
Value stat_output(LoweringContext& c, const Value& v, size_t i) {
  if (c.out(i).element_count() == v.type.element_count()) return c.b.reshape(v, c.out(i).dims);
  return c.b.constant(0, c.out(i));
}

// _native_batch_norm_legit(input, weight?, bias?, running_mean!, running_var!, training,
// momentum, eps) -> written (running_mean, running_var), then (out, save_mean, save_invstd).
Values batch_norm_with_stats(LoweringContext& c) {
  Math m{c.b};
  Value x = cast(c.b, c.input_uncast(0), accumulator(c.out(2).dtype));
  Value rm = cast(c.b, c.input_uncast(3), x.type.dtype), rv = cast(c.b, c.input_uncast(4), x.type.dtype);
  double momentum = c.arg(6).toDouble(), eps = c.arg(7).toDouble();
  if (!c.arg(5).toBool()) {
    Value invstd = c.b.unary(UnaryOp::kRsqrt, rv + m.k(eps, rv));
    Value y = normalize(c, m, x, rm, invstd, 1, 2, x.type.dtype);  // running statistics: as they are
    return {rm, rv, y, stat_output(c, rm, 3), stat_output(c, invstd, 4)};
  }
  auto dims = all_but_channels(x.type.rank());
  double n = static_cast<double>(x.type.element_count() / x.type.dims[1]);
  auto [mean, var] = m.moments(x, dims);
  Value invstd = c.b.unary(UnaryOp::kRsqrt, var + m.k(eps, var));
  Value new_rm = rm * m.k(1 - momentum, rm) + mean * m.k(momentum, mean);
  Value unbiased = var * m.k(n / std::max(n - 1, 1.0), var);
  Value new_rv = rv * m.k(1 - momentum, rv) + unbiased * m.k(momentum, var);
  return {new_rm, new_rv, normalize(c, m, x, mean, invstd, 1, 2, c.out(3).dtype), stat_output(c, mean, 3),
          stat_output(c, invstd, 4)};
}

// _native_batch_norm_legit.no_stats(input, weight?, bias?, training, momentum, eps)
Values batch_norm_no_stats(LoweringContext& c) {
  Math m{c.b};
  Value x = cast(c.b, c.input_uncast(0), accumulator(c.out(0).dtype));
  auto dims = all_but_channels(x.type.rank());
  auto [mean, var] = m.moments(x, dims);
  Value invstd = c.b.unary(UnaryOp::kRsqrt, var + m.k(c.arg(5).toDouble(), var));
  return {normalize(c, m, x, mean, invstd, 1, 2, c.out(1).dtype), stat_output(c, mean, 1),
          stat_output(c, invstd, 2)};
}

// _native_batch_norm_legit_no_training(input, weight?, bias?, running_mean, running_var,
// momentum, eps)
Values batch_norm_eval(LoweringContext& c) {
  Math m{c.b};
  Value x = cast(c.b, c.input_uncast(0), accumulator(c.out(0).dtype));
  Value rm = cast(c.b, c.input_uncast(3), x.type.dtype), rv = cast(c.b, c.input_uncast(4), x.type.dtype);
  Value invstd = c.b.unary(UnaryOp::kRsqrt, rv + m.k(c.arg(6).toDouble(), rv));
  return {normalize(c, m, x, rm, invstd, 1, 2, x.type.dtype), stat_output(c, rm, 1),
          stat_output(c, invstd, 2)};
}

// native_batch_norm_backward(grad_out, input, weight?, running_mean?, running_var?, save_mean?,
// save_invstd?, train, eps, output_mask)
Values batch_norm_backward(LoweringContext& c) {
  Math m{c.b};
  DType acc = accumulator(c.out(0).dtype);
  Value g = cast(c.b, c.input_uncast(0), acc), x = cast(c.b, c.input_uncast(1), acc);
  auto dims = all_but_channels(x.type.rank());
  bool train = c.arg(7).toBool();
  Value mean = cast(c.b, c.input_uncast(train ? 5 : 3), acc);
  Value invstd = train ? cast(c.b, c.input_uncast(6), acc)
                       : c.b.unary(UnaryOp::kRsqrt, cast(c.b, c.input_uncast(4), acc) + c.b.constant(c.arg(8).toDouble(), {acc, mean.type.dims}));
  Value xhat = (x - m.channel(mean, x)) * m.channel(invstd, x);
  Value w = c.has(2) ? m.channel(cast(c.b, c.input_uncast(2), acc), x) : m.k(1, x);
  Value gw = g * w;
  Value grad_input = train ? m.channel(invstd, x) * (gw - m.channel(m.mean(gw, dims), x) - xhat * m.channel(m.mean(gw * xhat, dims), x))
                           : gw * m.channel(invstd, x);
  return {grad_input, m.sum(g * xhat, dims), m.sum(g, dims)};
}

// Group norm works on x viewed as [N, G, C/G * HxW].
Values group_norm(LoweringContext& c) {
  // (input, weight?, bias?, N, C, HxW, group, eps) -> (out, mean [N, G], rstd [N, G])
  Math m{c.b};
  Value x = cast(c.b, c.input_uncast(0), accumulator(c.out(0).dtype));
  int64_t n = c.arg(3).toInt(), ch = c.arg(4).toInt(), hw = c.arg(5).toInt(), g = c.arg(6).toInt();
  Value grouped = c.b.reshape(x, {n, g, ch / g * hw});
  auto [mean, var] = m.moments(grouped, {2});
  Value rstd = c.b.unary(UnaryOp::kRsqrt, var + m.k(c.arg(7).toDouble(), var));
  Value centered = grouped - m.expand_back(mean, grouped, {2});
  Value y = c.b.reshape(centered * m.expand_back(rstd, grouped, {2}), {n, ch, hw});
  if (c.has(1)) y = y * c.b.broadcast_in_dim(cast(c.b, c.input_uncast(1), y.type.dtype), y.type.dims, {1});
  if (c.has(2)) y = y + c.b.broadcast_in_dim(cast(c.b, c.input_uncast(2), y.type.dtype), y.type.dims, {1});
  return {c.b.reshape(y, x.type.dims), mean, rstd};
}

Values group_norm_backward(LoweringContext& c) {
  // (grad_out, input, mean, rstd, weight?, N, C, HxW, group, output_mask)
  Math m{c.b};
  DType acc = accumulator(c.out(0).dtype);
  int64_t n = c.arg(5).toInt(), ch = c.arg(6).toInt(), hw = c.arg(7).toInt(), g = c.arg(8).toInt();
  Value go = c.b.reshape(cast(c.b, c.input_uncast(0), acc), {n, ch, hw});
  Value x = c.b.reshape(cast(c.b, c.input_uncast(1), acc), {n, ch, hw});
  Value mean = cast(c.b, c.input_uncast(2), acc), rstd = cast(c.b, c.input_uncast(3), acc);
  // Per-channel view of the per-group statistics.
  auto per_channel = [&](const Value& stat) {
    Value s = c.b.broadcast_in_dim(stat, {n, g, ch / g}, {0, 1});
    return c.b.broadcast_in_dim(c.b.reshape(s, {n, ch}), {n, ch, hw}, {0, 1});
  };
  Value xhat = (x - per_channel(mean)) * per_channel(rstd);
  Value gw = c.has(4) ? go * c.b.broadcast_in_dim(cast(c.b, c.input_uncast(4), acc), {n, ch, hw}, {1}) : go;
  auto group_mean = [&](const Value& v) {
    Value grouped = c.b.reshape(v, {n, g, ch / g * hw});
    return per_channel(m.mean(grouped, {2}));
  };
  Value grad_input = per_channel(rstd) * (gw - group_mean(gw) - xhat * group_mean(gw * xhat));
  return {c.b.reshape(grad_input, c.out(0).dims), m.sum(go * xhat, {0, 2}), m.sum(go, {0, 2})};
}

std::vector<int64_t> trailing_dims(int64_t rank, int64_t count) {
  std::vector<int64_t> dims;
  for (int64_t d = rank - count; d < rank; ++d) dims.push_back(d);
  return dims;
}

Values layer_norm(LoweringContext& c) {
  // (input, normalized_shape, weight?, bias?, eps) -> (out, mean, rstd)
  Math m{c.b};
  Value x = cast(c.b, c.input_uncast(0), accumulator(c.out().dtype));
  auto dims = trailing_dims(x.type.rank(), static_cast<int64_t>(c.int_list(1).size()));
  auto [mean, var] = m.moments(x, dims);
  Value centered = x - m.expand_back(mean, x, dims);
  Value rstd = c.b.unary(UnaryOp::kRsqrt, var + m.k(c.arg(4).toDouble(), var));
  Value y = centered * m.expand_back(rstd, x, dims);
  if (c.has(2)) y = y * c.b.broadcast_in_dim(cast(c.b, c.input_uncast(2), y.type.dtype), x.type.dims, dims);
  if (c.has(3)) y = y + c.b.broadcast_in_dim(cast(c.b, c.input_uncast(3), y.type.dtype), x.type.dims, dims);
  // mean and rstd keep the normalized dimensions, as size 1.
  return {y, c.b.reshape(mean, c.out(1).dims), c.b.reshape(rstd, c.out(2).dims)};
}

Values layer_norm_backward(LoweringContext& c) {
  // (grad_out, input, normalized_shape, mean, rstd, weight?, bias?, output_mask)
  Math m{c.b};
  DType acc = accumulator(c.out().dtype);
  Value g = cast(c.b, c.input_uncast(0), acc), x = cast(c.b, c.input_uncast(1), acc);
  int64_t rank = x.type.rank();
  auto dims = trailing_dims(rank, static_cast<int64_t>(c.int_list(2).size()));
  std::vector<int64_t> batch;
  for (int64_t d = 0; d < rank - static_cast<int64_t>(dims.size()); ++d) batch.push_back(d);
  double n = 1;
  for (int64_t d : dims) n *= x.type.dims[d];
  Value mean = broadcast_to(c.b, cast(c.b, c.input_uncast(3), acc), x.type.dims);
  Value rstd = broadcast_to(c.b, cast(c.b, c.input_uncast(4), acc), x.type.dims);
  Value xhat = (x - mean) * rstd;
  Value gw = c.has(5) ? g * c.b.broadcast_in_dim(cast(c.b, c.input_uncast(5), acc), x.type.dims, dims) : g;
  Value mean_gw = m.reduce_keep(gw, dims, BinaryOp::kAdd, 0) / m.k(n, gw);
  Value mean_gwx = m.reduce_keep(gw * xhat, dims, BinaryOp::kAdd, 0) / m.k(n, gw);
  Value grad_input = rstd * (gw - mean_gw - xhat * mean_gwx);
  Value grad_weight = m.reduce(g * xhat, batch, BinaryOp::kAdd, 0);
  Value grad_bias = m.reduce(g, batch, BinaryOp::kAdd, 0);
  return {grad_input, grad_weight, grad_bias};
}

// native_batch_norm mutates running statistics its schema does not mark as written; route it
// through the _native_batch_norm_legit ops, whose schemas say so.
std::tuple<at::Tensor, at::Tensor, at::Tensor> native_batch_norm(
    const at::Tensor& input, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var,
    bool training, double momentum, double eps) {
  bool has_stats = running_mean && running_mean->defined() && running_var && running_var->defined();
  if (!has_stats) return at::_native_batch_norm_legit(input, weight, bias, training, momentum, eps);
  if (!training) {  // the CPU kernel returns empty statistics in eval mode
    at::Tensor out = std::get<0>(at::_native_batch_norm_legit_no_training(
        input, weight, bias, *running_mean, *running_var, momentum, eps));
    at::Tensor empty = at::empty({0}, input.options().dtype(stat_dtype(input, {weight, bias, running_mean, running_var})));
    return {out, empty, empty.clone()};
  }
  at::Tensor rm = *running_mean, rv = *running_var;
  return at::_native_batch_norm_legit(input, weight, bias, rm, rv, training, momentum, eps);
}

// The newer training pair (_batch_norm_with_update, batch_norm_backward): the same computations,
// with CPU's empty `reserve` buffer.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> batch_norm_with_update(
    const at::Tensor& input, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    at::Tensor& running_mean, at::Tensor& running_var, double momentum, double eps) {
  auto [out, mean, invstd] = at::_native_batch_norm_legit(input, weight, bias, running_mean, running_var,
                                                          /*training=*/true, momentum, eps);
  return {out, mean, invstd, at::empty({0}, input.options().dtype(at::kByte))};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> new_batch_norm_backward(
    const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& weight,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var,
    const std::optional<at::Tensor>& save_mean, const std::optional<at::Tensor>& save_var, bool update, double eps,
    std::array<bool, 3> output_mask, const at::Tensor&) {
  return at::native_batch_norm_backward(grad_out, input, weight, running_mean, running_var, save_mean, save_var, update,
                                        eps, output_mask);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("native_batch_norm", native_batch_norm);
  m.impl("_batch_norm_with_update", batch_norm_with_update);
  m.impl("batch_norm_backward", new_batch_norm_backward);
}

// _weight_norm_interface(v, g, dim) -> (w, norms): w = v * (g / ||v||), the 2-norm over every
// dimension but `dim` (the first or the last: PyTorch calls it for those), as CPU's kernel.
Values weight_norm(LoweringContext& c) {
  Math m{c.b};
  DType acc = accumulator(c.out().dtype);
  Value v = cast(c.b, c.input_uncast(0), acc), g = cast(c.b, c.input_uncast(1), acc);
  std::vector<int64_t> dims = dims_except(v.type.rank(), wrap_dim(c.arg(2).toInt(), v.type.rank()));
  Value norm = c.b.unary(UnaryOp::kSqrt, m.sum(m.square(v), dims));
  Value scale = c.b.reshape(g, norm.type.dims) / norm;
  Value w = v * m.expand_back(scale, v, dims);
  return {cast(c.b, w, c.out(0).dtype), cast(c.b, c.b.reshape(norm, c.out(1).dims), c.out(1).dtype)};
}

// (grad_w, v, g, norms, dim) -> (grad_v, grad_g): with s = sum(grad_w * v) over the norm's
// dimensions, grad_g = s / norm and grad_v = (g / norm) * (grad_w - v * s / norm^2), as CPU's.
Values weight_norm_backward(LoweringContext& c) {
  Math m{c.b};
  DType acc = accumulator(c.out().dtype);
  Value gw = cast(c.b, c.input_uncast(0), acc), v = cast(c.b, c.input_uncast(1), acc);
  std::vector<int64_t> dims = dims_except(v.type.rank(), wrap_dim(c.arg(4).toInt(), v.type.rank()));
  Value s = m.sum(gw * v, dims);
  Value norm = c.b.reshape(cast(c.b, c.input_uncast(3), acc), s.type.dims), g = c.b.reshape(cast(c.b, c.input_uncast(2), acc), s.type.dims);
  Value grad_g = s / norm;
  Value along = m.expand_back(s / (norm * norm), v, dims);
  Value grad_v = m.expand_back(g / norm, v, dims) * (gw - v * along);
  return {cast(c.b, grad_v, c.out(0).dtype), cast(c.b, c.b.reshape(grad_g, c.out(1).dims), c.out(1).dtype)};
}

// layer_norm(input, normalized_shape, ...): the first of the input's normalized dimensions.
int64_t normalized_from(const std::vector<c10::IValue>& args) {
  return args[0].toTensor().dim() - static_cast<int64_t>(args[1].toIntList().size());
}

}  // namespace

TORCHTPU_LOWERINGS(normalization) {
  // Statistics as the CPU kernel returns them (PyTorch's meta kernel claims per-channel float ones
  // in eval mode too, where CPU's are empty, and float for bfloat16/half inputs, as CUDA's).
  LoweringOptions training_stats, no_stats, eval_stats;
  training_stats.meta = [](const c10::FunctionSchema&, const std::vector<c10::IValue>& args) {
    return batch_norm_meta(args, args[5].toBool(), {1, 2, 3, 4});
  };
  no_stats.meta = [](const c10::FunctionSchema&, const std::vector<c10::IValue>& args) {
    return batch_norm_meta(args, true, {1, 2});
  };
  eval_stats.meta = [](const c10::FunctionSchema&, const std::vector<c10::IValue>& args) {
    return batch_norm_meta(args, false, {1, 2, 3, 4});
  };
  register_lowering({"_native_batch_norm_legit", "_native_batch_norm_legit.out"}, batch_norm_with_stats,
                    training_stats);
  register_lowering({"_native_batch_norm_legit.no_stats", "_native_batch_norm_legit.no_stats_out"},
                    batch_norm_no_stats, no_stats);
  register_lowering({"_native_batch_norm_legit_no_training", "_native_batch_norm_legit_no_training.out"},
                    batch_norm_eval, eval_stats);
  register_lowering({"native_batch_norm_backward", "native_batch_norm_backward.out"}, batch_norm_backward);
  register_lowering({"native_group_norm", "native_group_norm.out"}, group_norm);
  register_lowering({"native_group_norm_backward", "native_group_norm_backward.out"}, group_norm_backward);
  // mean and rstd in the input's dtype, as CPU and CUDA (PyTorch's meta kernel says float for
  // bfloat16/half): float only with float affine parameters (mixed types)
  LoweringOptions layer_norm_dtypes;
  layer_norm_dtypes.meta = [](const c10::FunctionSchema&, const std::vector<c10::IValue>& args) {
    const at::Tensor& x = args[0].toTensor();
    auto [y, mean, rstd] = at::native_layer_norm(x, args[1].toIntVector(), args[2].toOptional<at::Tensor>(),
                                                 args[3].toOptional<at::Tensor>(), args[4].toDouble());  // checks
    auto is_float = [](const c10::IValue& p) { return p.isTensor() && p.toTensor().scalar_type() == at::kFloat; };
    bool mixed = at::isReducedFloatingType(x.scalar_type()) && (is_float(args[2]) || is_float(args[3]));
    auto stat = [&](const at::Tensor& t) { return at::empty(t.sizes(), t.options().dtype(mixed ? at::kFloat : x.scalar_type())); };
    return std::vector<c10::IValue>{y, stat(mean), stat(rstd)};
  };
  // Rows are independent: the input's leading dimensions may be padded, never the normalized ones.
  layer_norm_dtypes.padding = rowwise_padding(normalized_from, [](size_t arg) { return arg == 0; });
  layer_norm_dtypes.padding->paddable = [](const std::vector<c10::IValue>& args, size_t arg, int64_t dim) {
    return arg == 0 && dim < normalized_from(args);
  };
  register_lowering({"native_layer_norm", "native_layer_norm.out"}, layer_norm, layer_norm_dtypes);
  // (grad_out, input, normalized_shape, mean, rstd, ...): padded rows read grad_out 0, so they add
  // nothing to the weight's and bias's gradients.
  register_lowering({"native_layer_norm_backward", "native_layer_norm_backward.out"}, layer_norm_backward,
                    padded({}, {exec::Fill::kZero, [](const std::vector<c10::IValue>& args, size_t arg, int64_t dim) {
                      int64_t rows = args[1].toTensor().dim() - static_cast<int64_t>(args[2].toIntList().size());
                      return (arg <= 1 || arg == 3 || arg == 4) && dim < rows;
                    }}));
  register_lowering({"_weight_norm_interface", "_weight_norm_interface.out"}, weight_norm);
  register_lowering({"_weight_norm_interface_backward", "_weight_norm_interface_backward.out"}, weight_norm_backward);
}

}  // namespace torchtpu::aten
