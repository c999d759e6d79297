// CTC loss (_ctc_loss and its backward) as CPU computes it: the forward (alpha) and backward (beta)
// recursions in log space over the extended label sequence l' = (blank, y1, blank, y2, ..., blank),
// vectorized over the batch and l', each a stablehlo.while over time (unrolled, a long sequence
// took minutes to compile). The lengths are int lists PyTorch already holds on the host (ctc_loss
// copies length tensors there), so they are constants of the program; the loop bodies compare
// them with the time step.
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
    Value lp = c.input_uncast(log_probs);
    if (lp.type.rank() == 2) lp = b.reshape(lp, {lp.type.dims[0], 1, lp.type.dims[1]});  // unbatched
    t_max = lp.type.dims[0], batch = lp.type.dims[1], classes = lp.type.dims[2], dtype = lp.type.dtype;
    std::vector<int64_t> target_lengths = c.int_list(lengths + 1);
    labels = extended_labels(b.reshape(cast(b, c.input_uncast(targets), DType::kS64), {c.input_uncast(targets).type.element_count()}),
                                   c.input_uncast(targets).type.rank() == 2 ? c.input_uncast(targets).type.dims.back() : -1,
                                   target_lengths, c.arg(blank).toInt());
    for (int64_t l : target_lengths) label_lengths.push_back(2 * l + 1);
    // one gather picks every emission: lp as [T, N * C] at n * C + l'[n, s]
    Value at = labels + b.iota({DType::kS64, {batch, width}}, 0) * b.constant_int(classes, {DType::kS64, {batch, width}});
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
  // Step t (a 0-d s64) of a [T, N, K] value, as [N, K].
  Value step_of(const Value& x, const Value& t) {
    Value z = b.constant(0, t.type);
    return b.reshape(b.dynamic_slice(x, {t, z, z}, {1, x.type.dims[1], x.type.dims[2]}), {x.type.dims[1], x.type.dims[2]});
  }
  // x ([T, N, K]) with step t set to v ([N, K]).
  Value with_step(const Value& x, const Value& v, const Value& t) {
    Value z = b.constant(0, t.type);
    return b.dynamic_update_slice(x, b.reshape(v, {1, v.type.dims[0], v.type.dims[1]}), {t, z, z});
  }
  // A constant [N] vector of per-sample values.
  Value per_sample(const std::vector<int64_t>& v) { return b.constant_bytes(v.data(), {DType::kS64, {batch}}); }
  // [N, K] mask of the samples whose `lengths` ([N]) compare `dir` to the 0-d step t.
  Value samples_where(const Value& lengths, Compare dir, const Value& t, int64_t k) {
    return b.broadcast_in_dim(b.compare(dir, lengths, b.broadcast_in_dim(t, {batch}, {})), {batch, k}, {0});
  }

  // A largest term to factor out of a log-sum-exp: 0 where all terms are -inf (the result is then
  // log(0) = -inf, not NaN).
  Value pivot(const Value& top) { return b.select(b.compare(Compare::kEQ, top, m.k(-INFINITY, top)), m.k(0, top), top); }

  // log(exp(x) + exp(y) + exp(z)).
  Value log_sum_exp(const Value& x, const Value& y, const Value& z) {
    Value safe = pivot(b.binary(BinaryOp::kMaximum, b.binary(BinaryOp::kMaximum, x, y), z));
    auto e = [&](const Value& v) { return b.unary(UnaryOp::kExponential, m.sub(v, safe)); };
    return m.add(safe, b.unary(UnaryOp::kLog, m.add(m.add(e(x), e(y)), e(z))));
  }

  // log sum exp over `dims`.
  Value log_sum_exp_over(const Value& x, const std::vector<int64_t>& dims) {
    Value safe = pivot(m.reduce(x, dims, BinaryOp::kMaximum, -INFINITY));
    Value sum = m.sum(b.unary(UnaryOp::kExponential, m.sub(x, m.expand_back(safe, x, dims))), dims);
    return m.add(safe, b.unary(UnaryOp::kLog, sum));
  }

  // The forward variables of every step, [T, N, W] (-inf past a sample's input).
  Value alphas() {
    Value valid = mask([&](int64_t n, int64_t s) { return s < label_lengths[n]; });
    Value alpha = b.select(mask([&](int64_t n, int64_t s) { return s < 2 && s < label_lengths[n]; }), emission(0), neg_inf());
    Value all = with_step(b.constant(-INFINITY, emissions.type), alpha, b.constant(0, {DType::kS64, {}}));
    return counted_loop(b, t_max - 1, {all, alpha, emissions, can_skip, valid}, [&](hlo::Builder&, const Value& i, const Values& x) {
      Value t = i + b.constant(1, i.type);
      Value from_two = b.select(x[3], shift(x[1], 2, -INFINITY), neg_inf());
      Value next = m.add(log_sum_exp(x[1], shift(x[1], 1, -INFINITY), from_two), step_of(x[2], t));
      next = b.select(x[4], next, neg_inf());
      return Values{with_step(x[0], next, t), next, x[2], x[3], x[4]};
    })[0];
  }

  // Where each sample's last step may end: s in [S_n - 2, S_n).
  Value last_labels() {
    return mask([&](int64_t n, int64_t s) { return s >= label_lengths[n] - 2 && s < label_lengths[n]; });
  }

  // Where each sample ends: time T_n - 1 and s in [S_n - 2, S_n), as a [T, N, W] mask.
  Value ends() {
    std::vector<uint8_t> v(static_cast<size_t>(t_max * batch * width));
    for (int64_t t = 0; t < t_max; ++t)
      for (int64_t n = 0; n < batch; ++n)
        for (int64_t s = 0; s < width; ++s)
          v[(t * batch + n) * width + s] = input_lengths[n] - 1 == t && s >= label_lengths[n] - 2 && s < label_lengths[n];
    return b.constant_bytes(v.data(), {DType::kBool, {t_max, batch, width}});
  }

  // The negative log likelihood [N]: -log(alpha[T_n - 1, S_n - 1] + alpha[T_n - 1, S_n - 2]).
  Value neg_log_likelihood(const Value& alpha) {
    return -log_sum_exp_over(b.select(ends(), alpha, b.constant(-INFINITY, alpha.type)), {0, 2});
  }
};

Value zero_if_infinite(Math& m, const Value& nll, const Value& x) {  // zero_infinity
  Value inf = m.b.compare(Compare::kEQ, nll, m.k(INFINITY, nll));
  return m.b.select(m.b.broadcast_in_dim(inf, x.type.dims, {x.type.rank() == 3 ? 1 : 0}), m.k(0, x), x);
}

Values ctc_loss(LoweringContext& c) {
  // (log_probs, targets, input_lengths, target_lengths, blank, zero_infinity) -> (nll, log_alpha)
  Ctc ctc(c, 0, 1, 2, 4, c.out(1).dims.back());
  Value alpha = ctc.alphas();
  Value nll = ctc.neg_log_likelihood(alpha);
  if (c.arg(5).toBool()) nll = zero_if_infinite(ctc.m, nll, nll);
  return {c.b.reshape(nll, c.out(0).dims), c.b.reshape(c.b.transpose(alpha, {1, 0, 2}), c.out(1).dims)};
}

Values ctc_loss_backward(LoweringContext& c) {
  // (grad, log_probs, targets, input_lengths, target_lengths, neg_log_likelihood, log_alpha, blank,
  //  zero_infinity) -> grad of log_probs
  Value log_alpha = c.input_uncast(6);
  Ctc ctc(c, 1, 2, 3, 7, log_alpha.type.dims.back());
  hlo::Builder& b = c.b;
  Math& m = ctc.m;
  int64_t n = ctc.batch, w = ctc.width, k = ctc.classes;
  log_alpha = b.reshape(log_alpha, {n, ctc.t_max, w});
  Value lp = b.reshape(c.input_uncast(1), {ctc.t_max, n, k});
  Value nll = b.reshape(c.input_uncast(5), {n}), g = b.reshape(cast(b, c.input_uncast(0), ctc.dtype), {n});
  std::vector<int64_t> cube{n, w, k};
  Value onehot = b.compare(Compare::kEQ, b.iota({DType::kS64, cube}, 2), b.broadcast_in_dim(ctc.labels, cube, {0, 1}));
  Value skip_ahead = ctc.shift(ctc.can_skip, -2, 0);  // s + 2 may come from s
  Value valid = ctc.mask([&](int64_t i, int64_t s) { return s < ctc.label_lengths[i]; });
  // carried: grads [T, N, K], beta, then what the steps read: log_alpha and lp as [T, ...], the
  // masks, the emissions, nll, g and the per-sample input lengths
  Value input_lengths = ctc.per_sample(ctc.input_lengths);
  Values start{b.constant(0, {ctc.dtype, {ctc.t_max, n, k}}), ctc.neg_inf(), b.transpose(log_alpha, {1, 0, 2}), lp, onehot,
          skip_ahead, valid, ctc.last_labels(), ctc.emissions, nll, g, input_lengths};
  Values state = counted_loop(b, ctc.t_max, start, [&](hlo::Builder&, const Value& i, const Values& x) {
    Value t = b.constant_int(ctc.t_max - 1, i.type) - i;  // backwards in time
    const Value &beta = x[1], &emissions = x[8], &nll_x = x[9], &g_x = x[10], &lengths = x[11];
    Value from_two = b.select(x[5], ctc.shift(beta, -2, -INFINITY), ctc.neg_inf());
    Value emission = ctc.step_of(emissions, t);
    Value recur = m.add(ctc.log_sum_exp(beta, ctc.shift(beta, -1, -INFINITY), from_two), emission);
    Value last_step = ctc.samples_where(lengths - b.constant(1, lengths.type), Compare::kEQ, t, w);
    Value start_here = b.binary(BinaryOp::kAnd, last_step, x[7]);
    Value live = ctc.samples_where(lengths - b.constant(1, lengths.type), Compare::kGT, t, w);
    Value next = b.select(start_here, emission, b.select(b.binary(BinaryOp::kAnd, live, x[6]), recur, ctc.neg_inf()));
    // d nll / d lp[t, n, c] = exp(lp) - exp(log sum_{s: l'(s) = c} exp(alpha + beta) + nll - lp)
    Value ab = b.select(x[4], b.broadcast_in_dim(m.add(ctc.step_of(x[2], t), next), cube, {0, 1}),
                        b.constant(-INFINITY, {ctc.dtype, cube}));
    Value lcab = ctc.log_sum_exp_over(ab, {1});
    Value lp_t = ctc.step_of(x[3], t);
    Value grad = m.sub(b.unary(UnaryOp::kExponential, lp_t),
                       b.unary(UnaryOp::kExponential, m.sub(m.add(lcab, b.broadcast_in_dim(nll_x, {n, k}, {0})), lp_t)));
    grad = m.mul(grad, b.broadcast_in_dim(g_x, {n, k}, {0}));
    grad = b.select(ctc.samples_where(lengths, Compare::kGT, t, k), grad, m.k(0, grad));
    Values next_state = x;
    next_state[0] = ctc.with_step(x[0], grad, t);
    next_state[1] = next;
    return next_state;
  });
  Value out = state[0];
  if (c.arg(8).toBool()) out = zero_if_infinite(m, nll, out);
  return {b.reshape(out, c.out().dims)};
}

}  // namespace

TORCHTPU_LOWERINGS(ctc_loss) {
  register_lowering({"_ctc_loss", "_ctc_loss.out"}, ctc_loss);
  register_lowering({"_ctc_loss_backward", "_ctc_loss_backward.out"}, ctc_loss_backward, with_meta(shaped_like(1)));
}

}  // namespace torchtpu::aten
