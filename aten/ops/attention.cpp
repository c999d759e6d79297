// Scaled dot-product attention as one op forward and one backward. For tpu tensors
// F.scaled_dot_product_attention picks PyTorch's "overrideable" fused backend (the choice below)
// instead of its math decomposition (15 ops forward and about 9 backward, the causal mask built
// on every call); the fused pair lowers here. Low-precision inputs compute in float32.
#include <ATen/SDPBackend.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/ops/empty_like.h>

#include <cmath>

#include "aten/lowering.h"
#include "aten/ops/math.h"

namespace torchtpu::aten {
namespace {

bool attention_dtype(const at::Tensor& t) {
  return t.scalar_type() == at::kFloat || t.scalar_type() == at::kBFloat16 || t.scalar_type() == at::kHalf ||
         t.scalar_type() == at::kDouble;
}

// The fused op covers 4-d query/key/value with as many heads each, no dropout, and a float or
// boolean mask (PyTorch turns a boolean one into an additive bias first); anything else, or
// sdpa_kernel() without the overrideable backend, takes the math decomposition. So does a graph
// traced for torch.compile (fake or functional tensors: Python dispatch): the whole graph fuses
// there anyway, and its dynamic-size bucketing knows the math path's ops.
int64_t choose_backend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                       const std::optional<at::Tensor>& mask, double dropout_p, bool /*is_causal*/,
                       std::optional<double> /*scale*/, bool enable_gqa) {
  bool traced = q.key_set().has(c10::DispatchKey::Python);
  bool fits = !traced && q.dim() == 4 && k.dim() == 4 && v.dim() == 4 && dropout_p == 0.0 && !enable_gqa &&
              q.size(0) == k.size(0) && k.size(0) == v.size(0) && q.size(1) == k.size(1) && k.size(1) == v.size(1) &&
              q.scalar_type() == k.scalar_type() && k.scalar_type() == v.scalar_type() && attention_dtype(q) &&
              at::globalContext().userEnabledOverrideableSDP();
  if (mask && mask->defined())
    fits = fits && mask->dim() <= 4 && (mask->scalar_type() == at::kBool || mask->scalar_type() == q.scalar_type());
  return static_cast<int64_t>(fits ? at::SDPBackend::overrideable : at::SDPBackend::math);
}

struct Attention {
  Value q, k;  // each scaled by sqrt(scale), as the math path does
  Value scores;  // [B, H, L, S]: q k^T, plus the bias, with the causal mask's -inf
  Value root_scale;

  // A [B, H, L] value per row, broadcast over the scores' columns.
  Value per_row(hlo::Builder& b, const Value& row) const { return b.broadcast_in_dim(row, scores.type.dims, {0, 1, 2}); }
};

// q k^T as PyTorch's math path computes it: q and k each scaled by sqrt(scale) first.
Attention scores(LoweringContext& c, Math& m, size_t bias_arg, bool causal, size_t scale_arg, size_t q_arg) {
  DType acc = accumulator(c.input_uncast(q_arg).type.dtype);
  Value q = cast(c.b, c.input_uncast(q_arg), acc), k = cast(c.b, c.input_uncast(q_arg + 1), acc);
  const c10::IValue& given = c.arg(scale_arg);
  double scale = given.isNone() ? 1.0 / std::sqrt(static_cast<double>(q.type.dims[3])) : given.toDouble();
  Value root = c.b.constant(std::sqrt(scale), {acc, {}});
  q = m.mul(q, broadcast_to(c.b, root, q.type.dims));
  k = m.mul(k, broadcast_to(c.b, root, k.type.dims));
  Value s = c.b.dot_general(q, k, {{0, 1}, {0, 1}, {3}, {3}}, acc, c.precision());
  const std::vector<int64_t>& dims = s.type.dims;
  if (c.has(bias_arg)) s = m.add(s, broadcast_to(c.b, cast(c.b, c.input_uncast(bias_arg), acc), dims));
  if (causal) {  // row i sees columns j <= i (top-left aligned, as PyTorch's tril mask)
    Value row = c.b.iota({DType::kS64, dims}, 2), column = c.b.iota({DType::kS64, dims}, 3);
    s = c.b.select(c.b.compare(Compare::kLE, column, row), s, m.k(-INFINITY, s));
  }
  if (c.padded()) {  // padded keys (a KV cache stored in a bucket) are masked out
    Value column = c.b.iota({DType::kS64, dims}, 3);
    Value keys = c.b.broadcast_in_dim(c.exact_size(q_arg + 1, 2), dims, {});
    s = c.b.select(c.b.compare(Compare::kLT, column, keys), s, m.k(-INFINITY, s));
  }
  return {q, k, s, root};
}

// _scaled_dot_product_fused_attention_overrideable(query, key, value, attn_bias, dropout_p,
// is_causal, return_debug_mask, *, scale) -> (output, logsumexp, cum_seq_q, cum_seq_k, max_q,
// max_k, philox_seed, philox_offset, debug_attn_mask). A fully masked row gives zeros (PyTorch's
// safe softmax) and a logsumexp of -inf.
Values attention_forward(LoweringContext& c) {
  Math m{c.b};
  Attention a = scores(c, m, 3, c.arg(5).toBool(), 7, 0);
  Value max = m.reduce(a.scores, {3}, BinaryOp::kMaximum, -INFINITY);  // [B, H, L]
  max = c.b.select(c.b.compare(Compare::kEQ, max, m.k(-INFINITY, max)), m.k(0, max), max);
  Value e = c.b.unary(UnaryOp::kExponential, a.scores - a.per_row(c.b, max));
  Value sum = m.sum(e, {3});
  Value empty_row = a.per_row(c.b, c.b.compare(Compare::kEQ, sum, m.k(0, sum)));
  Value p = c.b.select(empty_row, m.k(0, e), e / a.per_row(c.b, sum));
  Value v = cast(c.b, c.input_uncast(2), e.type.dtype);
  Value out = c.b.dot_general(p, v, {{0, 1}, {0, 1}, {3}, {2}}, e.type.dtype, c.precision());
  Value lse = c.b.unary(UnaryOp::kLog, sum) + max;
  Value unused = c.scalar(0, DType::kF32);
  // cum_seq_q, cum_seq_k and debug_attn_mask are undefined; the philox seed and offset are 0.
  return {out, lse, unused, unused, c.scalar(0, DType::kS64), c.scalar(0, DType::kS64), unused};
}

// ..._backward(grad_out, query, key, value, attn_bias, grad_input_mask, out, logsumexp, cum_seq_q,
// cum_seq_k, max_q, max_k, dropout_p, is_causal, philox_seed, philox_offset, *, scale)
// -> (grad_query, grad_key, grad_value, grad_attn_bias), from the probabilities recomputed with
// the forward's logsumexp.
Values attention_backward(LoweringContext& c) {
  Math m{c.b};
  Attention a = scores(c, m, 4, c.arg(13).toBool(), 16, 1);
  DType acc = a.scores.type.dtype;
  Value lse = cast(c.b, c.input_uncast(7), acc);  // [B, H, L]
  Value masked_row = a.per_row(c.b, c.b.compare(Compare::kEQ, lse, m.k(-INFINITY, lse)));
  Value p = c.b.unary(UnaryOp::kExponential, a.scores - a.per_row(c.b, lse));
  p = c.b.select(masked_row, m.k(0, p), p);
  Value g = cast(c.b, c.input_uncast(0), acc), v = cast(c.b, c.input_uncast(3), acc), out = cast(c.b, c.input_uncast(6), acc);
  Value grad_v = c.b.dot_general(p, g, {{0, 1}, {0, 1}, {2}, {2}}, acc, c.precision());
  Value grad_p = c.b.dot_general(g, v, {{0, 1}, {0, 1}, {3}, {3}}, acc, c.precision());
  Value row_dot = m.sum(g * out, {3});  // sum_j p_j dp_j, per row
  Value grad_s = p * (grad_p - a.per_row(c.b, row_dot));
  Value grad_q = c.b.dot_general(grad_s, a.k, {{0, 1}, {0, 1}, {3}, {2}}, acc, c.precision());
  Value grad_k = c.b.dot_general(grad_s, a.q, {{0, 1}, {0, 1}, {2}, {2}}, acc, c.precision());
  grad_q = grad_q * broadcast_to(c.b, a.root_scale, grad_q.type.dims);
  grad_k = grad_k * broadcast_to(c.b, a.root_scale, grad_k.type.dims);
  return {grad_q, grad_k, grad_v, m.sum_to(grad_s, c.out(3).dims)};  // an unwanted one is dropped
}

// PyTorch has no meta kernel for the backward: the gradients are shaped like what they are the
// gradients of, and a gradient grad_input_mask does not ask for is undefined.
std::vector<c10::IValue> attention_backward_meta(const c10::FunctionSchema&, const std::vector<c10::IValue>& args) {
  std::vector<bool> wanted = args.at(5).toBoolList().vec();
  std::vector<c10::IValue> grads;
  for (size_t i = 0; i < 4; ++i) {
    const c10::IValue& input = args.at(i + 1);
    bool defined = input.isTensor() && input.toTensor().defined();
    grads.emplace_back(defined && wanted.at(i) ? at::empty_like(input.toTensor()) : at::Tensor());
  }
  return grads;
}

// Padded calls pad only the query and key lengths (dimension 2 of query, key, value, the output
// and its gradient, and the bias's last two, whatever its rank): the head dimension sets the scale.
PaddingRule padded_lengths(size_t bias_arg) {
  auto lengths = [bias_arg](const std::vector<c10::IValue>& args, size_t arg, int64_t dim) {
    return arg == bias_arg ? dim >= args[arg].toTensor().dim() - 2 : dim == 2;
  };
  return {exec::Fill::kZero, lengths, /*needs_sizes=*/true};
}

}  // namespace

TORCHTPU_LOWERINGS(attention) {
  register_lowering({"_scaled_dot_product_fused_attention_overrideable"}, attention_forward,
                    padded(matmul_op(), padded_lengths(3)));
  LoweringOptions backward = padded(matmul_op(), padded_lengths(4));
  backward.meta = attention_backward_meta;
  backward.unread_args = {10, 11};  // max_q, max_k
  register_lowering({"_scaled_dot_product_fused_attention_overrideable_backward"}, attention_backward, backward);
}

}  // namespace torchtpu::aten

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &torchtpu::aten::choose_backend)
}  // namespace at::native
