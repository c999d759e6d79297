// CTC loss (_ctc_loss and its backward) as CPU computes it: the forward (alpha) and backward (beta)
// recursions in log space over the extended label sequence l' = (blank, y1, blank, y2, ..., blank),
// vectorized over the batch and l', unrolled over time. The lengths are int lists PyTorch already
// holds on the host (ctc_loss copies length tensors there), so they are static: per-sample starts
// and ends are constant masks.
#include <cmath>

#include "aten/lowering.h"
#include "aten/ops/lowering_util.h"
#include "aten/ops/math.h"

namespace torchtpu::aten {
namespace {

// The problem's shapes and the extended labels of every sample.
struct Ctc {
  hlo::Builder& b;
  Math m;
  int64_t t_max, batch, classes, width;  // width: 2 * max target length + 1 (log_alpha's last dim)
  std::vector<int64_t> input_lengths, label_lengths;  // label_lengths: 2 * target length + 1
  Value labels;     // [N, W]: l'
  Value emissions;  // [T, N, W]: log_probs[t, n, l'[n, s]]
  Value can_skip;   // [N, W]: s may come from s - 2 (a label differing from the one before it)
  DType dtype;

  Ctc(LoweringContext& c, size_t log_probs, size_t targets, size_t lengths, size_t blank, int64_t width)
      : b(c.b), m{c.b}, width(width), input_lengths(c.int_list(lengths)) {
    Value lp = c.raw(log_probs);
    if (lp.type.rank() == 2) lp = b.reshape(lp, {lp.type.dims[0], 1, lp.type.dims[1]});  // unbatched
    t_max = lp.type.dims[0], batch = lp.type.dims[1], classes = lp.type.dims[2], dtype = lp.type.dtype;
    std::vector<int64_t> target_lengths = c.int_list(lengths + 1);
    labels = extended_labels(b.reshape(cast(b, c.raw(targets), DType::kS64), {c.raw(targets).type.element_count()}),
                                   c.raw(targets).type.rank() == 2 ? c.raw(targets).type.dims.back() : -1,
                                   target_lengths, c.arg(blank).toInt());
    for (int64_t l : target_lengths) label_lengths.push_back(2 * l + 1);
    // one gather picks every emission: lp as [T, N * C] at n * C + l'[n, s]
    Value at = b.binary(BinaryOp::kAdd, labels, b.binary(BinaryOp::kMultiply, b.iota({DType::kS64, {batch, width}}, 0),
                                                         b.constant_int(classes, {DType::kS64, {batch, width}})));
    emissions = b.reshape(take_along(b, b.reshape(lp, {t_max, batch * classes}), 1, b.reshape(at, {batch * width})),
                          {t_max, batch, width});
    Value before = shift(labels, 2, -1);  // l'[s - 2] (-1 where none)
    can_skip = b.binary(BinaryOp::kAnd, b.compare(Compare::kNE, labels, before),
                        b.compare(Compare::kNE, labels, b.constant_int(c.arg(blank).toInt(), labels.type)));
  }

  // [N, W] labels: blank at even s, the target's labels at odd s (targets as a padded [N, S]
  // matrix when `row` >= 0, else concatenated), blank beyond each sample's length.
  Value extended_labels(const Value& flat, int64_t row, const std::vector<int64_t>& lengths, int64_t blank) {
    std::vector<int64_t> positions(batch * width, 0);
    std::vector<uint8_t> is_label(batch * width, 0);
    int64_t offset = 0;
    for (int64_t n = 0; n < batch; ++n) {
      for (int64_t s = 1; s < 2 * lengths[n] + 1; s += 2) {
        positions[n * width + s] = (row >= 0 ? n * row : offset) + (s - 1) / 2;
        is_label[n * width + s] = 1;
      }
      offset += lengths[n];
    }
    Value picked = b.reshape(take_along(b, flat, 0, b.constant_bytes(positions.data(), {DType::kS64, {batch * width}})), {batch, width});
    return b.select(b.constant_bytes(is_label.data(), {DType::kBool, {batch, width}}), picked,
                    b.constant_int(blank, {DType::kS64, {batch, width}}));
  }

  // x shifted along the last dim by `by` (right when > 0), filled with `fill`.
  Value shift(const Value& x, int64_t by, double fill) {
    int64_t w = x.type.dims.back(), n = std::min(std::abs(by), w);
    Value pad = b.constant(fill, {x.type.dtype, {x.type.dims[0], n}});
    return by > 0 ? b.concatenate({pad, b.slice(x, {0, 0}, {x.type.dims[0], w - n}, {1, 1})}, 1)
                  : b.concatenate({b.slice(x, {0, n}, {x.type.dims[0], w}, {1, 1}), pad}, 1);
  }

  // A constant [N, W] bool mask from a predicate of (sample, s).
  template <typename F>
  Value mask(F keep) {
    std::vector<uint8_t> v(batch * width);
    for (int64_t n = 0; n < batch; ++n)
      for (int64_t s = 0; s < width; ++s) v[n * width + s] = keep(n, s) ? 1 : 0;
    return b.constant_bytes(v.data(), {DType::kBool, {batch, width}});
  }
  Value neg_inf() { return b.constant(-INFINITY, {dtype, {batch, width}}); }
  Value emission(int64_t t) { return b.reshape(b.slice(emissions, {t, 0, 0}, {t + 1, batch, width}, {1, 1, 1}), {batch, width}); }

  // A largest term to factor out of a log-sum-exp: 0 where all terms are -inf (the result is then
  // log(0) = -inf, not NaN).
  Value pivot(const Value& top) { return b.select(b.compare(Compare::kEQ, top, m.k(-INFINITY, top)), m.k(0, top), top); }

  // log(exp(x) + exp(y) + exp(z)).
  Value log_sum_exp(const Value& x, const Value& y, const Value& z) {
    Value safe = pivot(b.binary(BinaryOp::kMaximum, b.binary(BinaryOp::kMaximum, x, y), z));
    auto e = [&](const Value& v) { return b.unary(UnaryOp::kExponential, m.sub(v, safe)); };
    return m.add(safe, b.unary(UnaryOp::kLog, m.add(m.add(e(x), e(y)), e(z))));
  }

  // log sum exp over `dim`.
  Value log_sum_exp_over(const Value& x, int64_t dim) {
    Value safe = pivot(m.reduce(x, {dim}, BinaryOp::kMaximum, -INFINITY));
    Value sum = m.sum(b.unary(UnaryOp::kExponential, m.sub(x, m.expand_back(safe, x, {dim}))), {dim});
    return m.add(safe, b.unary(UnaryOp::kLog, sum));
  }

  // The forward variables of every step: [N, W] each.
  std::vector<Value> alphas() {
    Value valid = mask([&](int64_t n, int64_t s) { return s < label_lengths[n]; });
    Value alpha = b.select(mask([&](int64_t n, int64_t s) { return s < 2 && s < label_lengths[n]; }), emission(0), neg_inf());
    std::vector<Value> out{alpha};
    for (int64_t t = 1; t < t_max; ++t) {
      Value from_two = b.select(can_skip, shift(alpha, 2, -INFINITY), neg_inf());
      alpha = m.add(log_sum_exp(alpha, shift(alpha, 1, -INFINITY), from_two), emission(t));
      alpha = b.select(valid, alpha, neg_inf());
      out.push_back(alpha);
    }
    return out;
  }

  // The negative log likelihood [N]: -log(alpha[T_n - 1, S_n - 1] + alpha[T_n - 1, S_n - 2]).
  Value neg_log_likelihood(const std::vector<Value>& alpha) {
    Value ends = neg_inf();
    for (int64_t t = 0; t < t_max; ++t)
      ends = b.select(mask([&](int64_t n, int64_t s) {
                        return input_lengths[n] - 1 == t && s >= label_lengths[n] - 2 && s < label_lengths[n];
                      }), alpha[t], ends);
    return b.unary(UnaryOp::kNegate, log_sum_exp_over(ends, 1));
  }
};

Value zero_if_infinite(Math& m, const Value& nll, const Value& x) {  // zero_infinity
  Value inf = m.b.compare(Compare::kEQ, nll, m.k(INFINITY, nll));
  return m.b.select(m.b.broadcast_in_dim(inf, x.type.dims, {x.type.rank() == 3 ? 1 : 0}), m.k(0, x), x);
}

V ctc_loss(LoweringContext& c) {
  // (log_probs, targets, input_lengths, target_lengths, blank, zero_infinity) -> (nll, log_alpha)
  Ctc ctc(c, 0, 1, 2, 4, c.out(1).dims.back());
  std::vector<Value> alpha = ctc.alphas();
  Value nll = ctc.neg_log_likelihood(alpha);
  if (c.arg(5).toBool()) nll = zero_if_infinite(ctc.m, nll, nll);
  std::vector<Value> steps;
  for (const Value& a : alpha) steps.push_back(c.b.reshape(a, {ctc.batch, 1, ctc.width}));
  return {c.b.reshape(nll, c.out(0).dims), c.b.reshape(c.b.concatenate(steps, 1), c.out(1).dims)};
}

V ctc_loss_backward(LoweringContext& c) {
  // (grad, log_probs, targets, input_lengths, target_lengths, neg_log_likelihood, log_alpha, blank,
  //  zero_infinity) -> grad of log_probs
  Value log_alpha = c.raw(6);
  Ctc ctc(c, 1, 2, 3, 7, log_alpha.type.dims.back());
  hlo::Builder& b = c.b;
  Math& m = ctc.m;
  int64_t n = ctc.batch, w = ctc.width, k = ctc.classes;
  log_alpha = b.reshape(log_alpha, {n, ctc.t_max, w});
  Value lp = b.reshape(c.raw(1), {ctc.t_max, n, k});
  Value nll = b.reshape(c.raw(5), {n}), g = b.reshape(cast(b, c.raw(0), ctc.dtype), {n});
  std::vector<int64_t> cube{n, w, k};
  Value onehot = b.compare(Compare::kEQ, b.iota({DType::kS64, cube}, 2), b.broadcast_in_dim(ctc.labels, cube, {0, 1}));
  Value skip_ahead = ctc.shift(ctc.can_skip, -2, 0);  // s + 2 may come from s
  Value valid = ctc.mask([&](int64_t i, int64_t s) { return s < ctc.label_lengths[i]; });
  std::vector<Value> grads(ctc.t_max);
  Value beta = ctc.neg_inf();
  for (int64_t t = ctc.t_max - 1; t >= 0; --t) {
    Value from_two = b.select(skip_ahead, ctc.shift(beta, -2, -INFINITY), ctc.neg_inf());
    Value recur = m.add(ctc.log_sum_exp(beta, ctc.shift(beta, -1, -INFINITY), from_two), ctc.emission(t));
    Value start = ctc.mask([&](int64_t i, int64_t s) {
      return ctc.input_lengths[i] - 1 == t && s >= ctc.label_lengths[i] - 2 && s < ctc.label_lengths[i];
    });
    Value live = ctc.mask([&](int64_t i, int64_t) { return t < ctc.input_lengths[i] - 1; });
    beta = b.select(start, ctc.emission(t), b.select(b.binary(BinaryOp::kAnd, live, valid), recur, ctc.neg_inf()));
    // d nll / d lp[t, n, c] = exp(lp) - exp(log sum_{s: l'(s) = c} exp(alpha + beta) + nll - lp)
    Value alpha_t = b.reshape(b.slice(log_alpha, {0, t, 0}, {n, t + 1, w}, {1, 1, 1}), {n, w});
    Value ab = b.select(onehot, b.broadcast_in_dim(m.add(alpha_t, beta), cube, {0, 1}), b.constant(-INFINITY, {ctc.dtype, cube}));
    Value lcab = ctc.log_sum_exp_over(ab, 1);
    Value lp_t = b.reshape(b.slice(lp, {t, 0, 0}, {t + 1, n, k}, {1, 1, 1}), {n, k});
    Value grad = m.sub(b.unary(UnaryOp::kExponential, lp_t),
                       b.unary(UnaryOp::kExponential, m.sub(m.add(lcab, b.broadcast_in_dim(nll, {n, k}, {0})), lp_t)));
    grad = m.mul(grad, b.broadcast_in_dim(g, {n, k}, {0}));
    std::vector<uint8_t> in_input(n);
    for (int64_t i = 0; i < n; ++i) in_input[i] = t < ctc.input_lengths[i];
    grad = b.select(b.broadcast_in_dim(b.constant_bytes(in_input.data(), {DType::kBool, {n}}), {n, k}, {0}), grad, m.k(0, grad));
    grads[t] = b.reshape(grad, {1, n, k});
  }
  Value out = b.concatenate(grads, 0);
  if (c.arg(8).toBool()) out = zero_if_infinite(m, nll, out);
  return {b.reshape(out, c.out().dims)};
}

}  // namespace

TORCHTPU_LOWERINGS(ctc_loss) {
  register_lowering({"_ctc_loss", "_ctc_loss.out"}, ctc_loss);
  register_lowering({"_ctc_loss_backward", "_ctc_loss_backward.out"}, ctc_loss_backward, with_meta(shaped_like(1)));
}

}  // namespace torchtpu::aten
