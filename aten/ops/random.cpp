// Random numbers on the device from rng_bit_generator: uniform_, normal_, random_, bernoulli,
// exponential_, dropout, randperm, rrelu, multinomial, and gamma, Dirichlet, Poisson and binomial
// samples. Reproducible under torch.manual_seed (see aten/generator.h).
#include <cmath>
#include <functional>
#include <optional>

#include "aten/lowering.h"
#include "aten/ops/lowering_util.h"
#include "aten/ops/math.h"

namespace torchtpu::aten {
namespace {

// `count` independent draws of raw bits shaped [count, dims...].
Value bits_of(LoweringContext& c, DType bit_type, std::vector<int64_t> dims, int64_t count = 1) {
  dims.insert(dims.begin(), count);
  return c.b.rng_bit_generator(c.rng_state(), {bit_type, dims}).second;
}

Value draw(LoweringContext& c, const Value& all, int64_t i) {
  std::vector<int64_t> start(all.type.rank(), 0), limit = all.type.dims, step(all.type.rank(), 1);
  start[0] = i;
  limit[0] = i + 1;
  std::vector<int64_t> dims(all.type.dims.begin() + 1, all.type.dims.end());
  return c.b.reshape(c.b.slice(all, start, limit, step), dims);
}

// Significant bits of a dtype's values (53 for float64 and complex128, 24 for float32, ...).
int digits(DType t) {
  switch (t) {
    case DType::kF64: case DType::kC128: return 53;
    case DType::kBF16: return 8;
    case DType::kF16: return 11;
    default: return 24;
  }
}

// Uniform values in [0, 1) on a grid of 2^-bits, as PyTorch draws them: k / 2^bits from the top
// `bits` of the raw draw. A grid no finer than the output dtype's keeps values below 1 after the
// cast (float32 uniforms rounded to bfloat16 would reach 1.0).
Value uniform01_from(LoweringContext& c, const Value& raw, int bits) {
  bool wide = raw.type.dtype == DType::kU64;
  Value top = c.b.binary(BinaryOp::kShiftRightLogical, raw, c.b.constant_int((wide ? 64 : 32) - bits, raw.type));
  Value k = c.b.convert(top, wide ? DType::kF64 : DType::kF32);
  return k * c.b.constant(std::ldexp(1.0, -bits), k.type);
}

// `count` uniform [0,1) tensors shaped like output 0, with `bits` random bits each (float64
// arithmetic beyond 24). Uniform outputs use their dtype's digits; transforms (normal,
// exponential) use the float32/float64 accumulator's.
std::vector<Value> uniforms(LoweringContext& c, int64_t count, int bits) {
  Value raw = bits_of(c, bits > 24 ? DType::kU64 : DType::kU32, c.out().dims, count);
  std::vector<Value> out;
  for (int64_t i = 0; i < count; ++i) out.push_back(uniform01_from(c, draw(c, raw, i), bits));
  return out;
}

std::vector<Value> uniforms(LoweringContext& c, int64_t count) {
  return uniforms(c, count, digits(accumulator(c.out().dtype)));
}

// Complex outputs draw their real and imaginary parts independently, as PyTorch samples
// view_as_real(self).
Value complex_of(LoweringContext& c, const Value& re, const Value& im) {
  return c.b.binary(BinaryOp::kComplex, re, im);
}

Values uniform(LoweringContext& c) {  // (self, from, to, generator)
  Math m{c.b};
  double from = c.arg(1).toDouble(), to = c.arg(2).toDouble();
  auto scaled = [&](const Value& u) { return m.k(from, u) + u * m.k(to - from, u); };
  int bits = digits(c.out().dtype);
  if (!is_complex(c.out().dtype)) return {scaled(uniforms(c, 1, bits)[0])};
  auto u = uniforms(c, 2, bits);
  return {complex_of(c, scaled(u[0]), scaled(u[1]))};
}

// Box-Muller: two independent standard normals from one pair of uniforms.
std::pair<Value, Value> box_muller(LoweringContext& c, const Value& u0, const Value& u1) {
  Math m{c.b};
  Value positive = m.k(1, u0) - u0;  // (0, 1]: log stays finite
  Value radius = c.b.unary(UnaryOp::kSqrt, m.k(-2, positive) * c.b.unary(UnaryOp::kLog, positive));
  Value angle = m.k(2 * M_PI, u1) * u1;
  return {radius * c.b.unary(UnaryOp::kCosine, angle), radius * c.b.unary(UnaryOp::kSine, angle)};
}

std::pair<Value, Value> standard_normals(LoweringContext& c) {
  auto u = uniforms(c, 2);
  return box_muller(c, u[0], u[1]);
}

// The smallest positive normal number of float32 (float64), which CPU's gamma and Dirichlet
// samplers return instead of 0.
double smallest_normal(DType t) { return t == DType::kF64 ? 0x1p-1022 : 0x1p-126; }

// Rejection samplers here draw `rounds` candidates at once: the candidate of the earliest
// accepted round (round(r) gives its acceptance and candidate), the last one where none is.
Value first_accepted(LoweringContext& c, int64_t rounds, const std::function<std::pair<Value, Value>(int64_t)>& round) {
  std::optional<Value> chosen;
  for (int64_t r = rounds; r-- > 0;) {
    auto [accepted, candidate] = round(r);
    chosen = chosen ? c.b.select(accepted, candidate, *chosen) : candidate;
  }
  return *chosen;
}

// One proposal of Hörmann's transformed rejection (PTRS for Poisson, BTRS for binomial) from
// uniforms u and v: us = 1/2 - |u - 1/2|, k = floor((2a / us + b)(u - 1/2) + center), and the
// squeeze that accepts it at once (us >= 0.07 and v <= vr).
struct Proposal {
  Value us, k, quick;
};

Proposal transformed_proposal(LoweringContext& c, const Value& u, const Value& v, const Value& a, const Value& b,
                              const Value& center, const Value& vr) {
  Math m{c.b};
  Value centered = u - m.k(0.5, u);
  Value us = m.k(0.5, u) - c.b.unary(UnaryOp::kAbs, centered);
  Value k = c.b.unary(UnaryOp::kFloor, (m.k(2, a) * a / us + b) * centered + center);
  Value quick = c.b.binary(BinaryOp::kAnd, c.b.compare(Compare::kGE, us, m.k(0.07, us)), c.b.compare(Compare::kLE, v, vr));
  return {us, k, quick};
}

// Gamma(alpha, 1) samples shaped like alpha, by Marsaglia and Tsang's method (as CPU's): for
// alpha >= 1, d v with d = alpha - 1/3, v = (1 + x / sqrt(9 d))^3, x standard normal, accepted when
// v > 0 and log u < x^2 / 2 + d - d v + d log v; for alpha < 1, a Gamma(alpha + 1) sample times
// u^(1 / alpha). Each sample gets kRounds candidates at once and keeps the first accepted (each is
// accepted with probability > 0.95, so all are rejected with probability < 1e-10; then the last
// one is kept). Results are at least the dtype's smallest normal number, as CPU clamps them.
Value standard_gamma_of(LoweringContext& c, const Value& alpha) {
  constexpr int64_t kRounds = 8;
  Math m{c.b};
  auto u = uniforms(c, 3 * kRounds + 1);
  Value small = c.b.compare(Compare::kLT, alpha, m.k(1, alpha));
  Value d = c.b.select(small, alpha + m.k(1, alpha), alpha) - m.k(1.0 / 3, alpha);
  Value scale = c.b.unary(UnaryOp::kRsqrt, m.k(9, d) * d);
  Value sample = first_accepted(c, kRounds, [&](int64_t r) {
    Value x = box_muller(c, u[3 * r], u[3 * r + 1]).first;
    Value root = m.k(1, x) + x * scale;
    Value v = root * root * root;
    Value bound = m.k(0.5, x) * (x * x) + d - d * v + d * c.b.unary(UnaryOp::kLog, v);
    Value accepted = c.b.binary(BinaryOp::kAnd, c.b.compare(Compare::kGT, v, m.k(0, v)),
                                c.b.compare(Compare::kLT, c.b.unary(UnaryOp::kLog, u[3 * r + 2]), bound));
    return std::pair{accepted, d * v};
  });
  Value boost = c.b.binary(BinaryOp::kPower, m.k(1, alpha) - u.back(), m.k(1, alpha) / alpha);
  Value gamma = c.b.select(small, sample * boost, sample);
  return c.b.binary(BinaryOp::kMaximum, gamma, m.k(smallest_normal(gamma.type.dtype), gamma));
}

Values standard_gamma(LoweringContext& c) {  // (alpha, generator)
  return {standard_gamma_of(c, c.input_as(0, accumulator(c.out().dtype)))};
}

// A 0-d bool: every element of x is >= 0 (a device-side check of CPU's argument checks).
Value all_non_negative(LoweringContext& c, const Value& x) {
  return all_true(c.b, c.b.compare(Compare::kGE, x, c.full(0, x)));
}

// Poisson(rate) samples shaped like rate, as CPU draws them: below rate 10, Knuth's method (the
// number of uniforms whose running product stays above exp(-rate)) with 48 uniforms drawn at once
// (more are needed with probability < 1e-14); from rate 10, Hörmann's transformed rejection with
// squeeze (PTRS), 12 candidates at once, the first accepted kept. CPU's check that every rate is
// >= 0 is made on the device.
Values poisson(LoweringContext& c) {  // (rate, generator)
  constexpr int64_t kKnuth = 48, kRounds = 12;
  Math m{c.b};
  Value rate = c.input_as(0, accumulator(c.out().dtype));
  c.check_on_device(all_non_negative(c, rate));
  auto u = uniforms(c, kKnuth + 2 * kRounds, digits(rate.type.dtype));
  auto unary = [&](UnaryOp op, const Value& x) { return c.b.unary(op, x); };
  auto both = [&](const Value& p, const Value& q) { return c.b.binary(BinaryOp::kAnd, p, q); };
  Value limit = unary(UnaryOp::kExponential, m.k(0, rate) - rate), product = m.k(1, rate), knuth = m.k(0, rate);
  for (int64_t k = 0; k < kKnuth; ++k) {
    product = product * u[k];
    knuth = knuth + c.b.select(c.b.compare(Compare::kGT, product, limit), m.k(1, rate), m.k(0, rate));
  }
  Value log_rate = unary(UnaryOp::kLog, rate);
  Value b = m.k(0.931, rate) + m.k(2.53, rate) * unary(UnaryOp::kSqrt, rate);
  Value a = m.k(-0.059, rate) + m.k(0.02483, rate) * b;
  Value log_inv_alpha = unary(UnaryOp::kLog, m.k(1.1239, rate) + m.k(1.1328, rate) / (b - m.k(3.4, rate)));
  Value vr = m.k(0.9277, rate) - m.k(3.6224, rate) / (b - m.k(2, rate));
  Value center = rate + m.k(0.43, rate);
  Value ptrs = first_accepted(c, kRounds, [&](int64_t r) {
    Value v = u[kKnuth + 2 * r + 1];
    auto [us, k, quick] = transformed_proposal(c, u[kKnuth + 2 * r], v, a, b, center, vr);
    Value possible = both(both(c.b.compare(Compare::kGE, k, m.k(0, k)), c.b.compare(Compare::kGT, us, m.k(0, us))),
                          c.b.binary(BinaryOp::kOr, c.b.compare(Compare::kGE, us, m.k(0.013, us)),
                                     c.b.compare(Compare::kLE, v, us)));
    Value lhs = unary(UnaryOp::kLog, v) + log_inv_alpha - unary(UnaryOp::kLog, a / (us * us) + b);
    Value rhs = k * log_rate - rate - unary(UnaryOp::kLgamma, k + m.k(1, k));
    return std::pair{c.b.binary(BinaryOp::kOr, quick, both(possible, c.b.compare(Compare::kLE, lhs, rhs))), k};
  });
  Value sample = c.b.select(c.b.compare(Compare::kGE, rate, m.k(10, rate)), ptrs, knuth);
  return {c.b.select(c.b.compare(Compare::kEQ, rate, m.k(0, rate)), m.k(0, rate), sample)};
}

// Binomial(n, q) by inversion: the number of geometric(q) waiting times, ceil(log u / log(1 - q)),
// that fit in n, from the given uniforms (as many waits as there are).
Value binomial_by_inversion(LoweringContext& c, const std::vector<Value>& u, const Value& n, const Value& q) {
  Math m{c.b};
  Value log_q1 = c.b.unary(UnaryOp::kLogPlusOne, m.k(0, q) - q), waited = m.k(0, n), count = m.k(0, n);
  for (const Value& uniform : u) {
    waited = waited + c.b.unary(UnaryOp::kCeil, c.b.unary(UnaryOp::kLog, uniform) / log_q1);
    count = count + c.b.select(c.b.compare(Compare::kLE, waited, n), m.k(1, n), m.k(0, n));
  }
  return count;
}

// Binomial(n, q) by Hörmann's BTRS (transformed rejection with squeeze), one candidate per pair of
// the given uniforms, the first accepted kept. Stirling's tail, log k! - ((k + 1/2) log(k + 1) -
// (k + 1) + log(2 pi) / 2), comes from lgamma.
Value binomial_by_btrs(LoweringContext& c, const std::vector<Value>& u, const Value& n, const Value& q) {
  Math m{c.b};
  auto k = [&](double v) { return m.k(v, n); };
  auto log = [&](const Value& x) { return c.b.unary(UnaryOp::kLog, x); };
  auto both = [&](const Value& x, const Value& y) { return c.b.binary(BinaryOp::kAnd, x, y); };
  auto tail = [&](const Value& x) {
    Value x1 = x + k(1);
    return c.b.unary(UnaryOp::kLgamma, x1) - ((x + k(0.5)) * log(x1) - x1 + k(0.5 * std::log(2 * M_PI)));
  };
  Value spread = c.b.unary(UnaryOp::kSqrt, n * q * (k(1) - q));
  Value b = k(1.15) + k(2.53) * spread;
  Value a = k(-0.0873) + k(0.0248) * b + k(0.01) * q;
  Value center = n * q + k(0.5), vr = k(0.92) - k(4.2) / b;
  Value r = q / (k(1) - q), alpha = (k(2.83) + k(5.1) / b) * spread;
  Value mode = c.b.unary(UnaryOp::kFloor, (n + k(1)) * q);
  Value bound_base = (mode + k(0.5)) * log((mode + k(1)) / (r * (n - mode + k(1)))) + (tail(mode) + tail(n - mode));
  return first_accepted(c, static_cast<int64_t>(u.size() / 2), [&](int64_t round) {
    Value v = u[2 * round + 1];
    auto [us, x, quick] = transformed_proposal(c, u[2 * round], v, a, b, center, vr);
    Value inside = both(both(c.b.compare(Compare::kGE, x, k(0)), c.b.compare(Compare::kLE, x, n)), c.b.compare(Compare::kGT, us, k(0)));
    Value lhs = log(v * alpha / (a / (us * us) + b));
    Value rest = n - x;
    Value bound = bound_base + (n + k(1)) * log((n - mode + k(1)) / (rest + k(1))) + ((x + k(0.5)) * log(r * (rest + k(1)) / (x + k(1))) - (tail(x) + tail(rest)));
    return std::pair{both(inside, c.b.binary(BinaryOp::kOr, quick, c.b.compare(Compare::kLE, lhs, bound))), x};
  });
}

// Binomial(count, prob) samples, as CPU draws them: by symmetry with q = min(prob, 1 - prob), for
// count q < 10 by inversion (48 waiting times drawn at once: more are needed with probability
// < 1e-14), from 10 by BTRS (12 candidates at once).
Values binomial(LoweringContext& c) {  // (count, prob, generator)
  constexpr int64_t kWaits = 48, kRounds = 12;
  Math m{c.b};
  DType t = accumulator(c.out().dtype);
  Value n = c.input_as(0, t), p = c.broadcast_to_output(c.input_as(1, t));
  auto k = [&](double v) { return m.k(v, n); };
  std::vector<Value> u = uniforms(c, kWaits + 2 * kRounds, digits(t));
  Value flipped = c.b.compare(Compare::kGT, p, k(0.5));
  Value q = c.b.select(flipped, k(1) - p, p);
  Value inversion = binomial_by_inversion(c, {u.begin(), u.begin() + kWaits}, n, q);
  Value btrs = binomial_by_btrs(c, {u.begin() + kWaits, u.end()}, n, q);
  Value sample = c.b.select(c.b.compare(Compare::kGE, n * q, k(10)), btrs, inversion);
  sample = c.b.select(flipped, n - sample, sample);
  Value none = c.b.binary(BinaryOp::kOr, c.b.compare(Compare::kLE, n, k(0)), c.b.compare(Compare::kLE, p, k(0)));
  return {c.b.select(none, k(0), c.b.select(c.b.compare(Compare::kGE, p, k(1)), n, sample))};
}

// Dirichlet samples: Gamma(alpha) samples over the last dimension divided by their sum, kept in
// [smallest normal, largest value below 1] as CPU keeps them.
Values sample_dirichlet(LoweringContext& c) {  // (alpha, generator)
  Math m{c.b};
  Value gamma = standard_gamma_of(c, c.input_as(0, accumulator(c.out().dtype)));
  int64_t last = gamma.type.rank() - 1;
  Value ratio = gamma / m.expand_back(m.sum(gamma, {last}), gamma, {last});
  double below_one = gamma.type.dtype == DType::kF64 ? std::nextafter(1.0, 0.0) : std::nextafter(1.0f, 0.0f);
  return {c.b.clamp(m.k(smallest_normal(gamma.type.dtype), ratio), ratio, m.k(below_one, ratio))};
}

Values normal(LoweringContext& c) {  // (self, mean, std, generator)
  Math m{c.b};
  auto [z1, z2] = standard_normals(c);
  double mean = c.arg(1).toDouble(), std = c.arg(2).toDouble();
  // A complex normal of variance std^2 has parts of variance std^2 / 2, each shifted by mean.
  if (is_complex(c.out().dtype)) std /= M_SQRT2;
  auto scaled = [&](const Value& z) { return m.k(mean, z) + z * m.k(std, z); };
  if (!is_complex(c.out().dtype)) return {scaled(z1)};
  return {complex_of(c, scaled(z1), scaled(z2))};
}

// normal(mean, std), a tensor and a tensor or a float: mean + std * z, shaped as they broadcast.
// CPU checks that every std is >= 0; so does the device.
Values normal_of_tensors(LoweringContext& c) {  // (mean, std, generator)
  auto operand = [&](size_t i) { return c.has(i) ? c.elementwise_input(i) : c.b.constant(c.arg(i).toDouble(), c.out()); };
  Value mean = operand(0), std = operand(1);
  c.check_on_device(all_non_negative(c, std));
  Value z = cast(c.b, standard_normals(c).first, mean.type.dtype);
  return {mean + std * z};
}

Values log_normal(LoweringContext& c) {  // (self, mean, std, generator)
  return {c.b.unary(UnaryOp::kExponential, normal(c)[0])};
}

Values cauchy(LoweringContext& c) {  // (self, median, sigma, generator)
  Math m{c.b};
  Value u = uniforms(c, 1)[0];
  Value t = c.b.unary(UnaryOp::kTan, m.k(M_PI, u) * (u - m.k(0.5, u)));
  return {m.k(c.arg(1).toDouble(), t) + t * m.k(c.arg(2).toDouble(), t)};
}

// Trials until the first success: ceil(log(u) / log1p(-p)) for u in (0, 1], as CPU's.
Values geometric(LoweringContext& c) {  // (self, p, generator)
  Math m{c.b};
  Value u = uniforms(c, 1)[0];
  Value u1 = m.k(1, u) - u;
  Value trials = c.b.unary(UnaryOp::kLog, u1) / m.k(std::log1p(-c.arg(1).toDouble()), u1);
  return {c.b.unary(UnaryOp::kCeil, trials)};
}

// Integers in [from, from + range) (range 0 means the full non-negative s64 range).
Value integers(LoweringContext& c, int64_t from, uint64_t range) {
  Value raw = draw(c, bits_of(c, DType::kU64, c.out().dims), 0);
  Value v = range == 0 ? c.b.binary(BinaryOp::kShiftRightLogical, raw, c.b.constant_int(1, raw.type))
                       : c.b.binary(BinaryOp::kRemainder, raw, c.b.constant_int(static_cast<int64_t>(range), raw.type));
  Value s = c.b.convert(v, DType::kS64);
  return s + c.b.constant_int(from, s.type);
}

// The exclusive upper bound random_ uses when `to` is not given.
uint64_t default_range(DType t, int64_t from) {
  switch (t) {
    case DType::kF32: return (1ull << 24) + 1 - from;
    case DType::kF64: return (1ull << 53) + 1 - from;
    case DType::kBF16: return (1ull << 8) + 1 - from;
    case DType::kF16: return (1ull << 11) + 1 - from;
    case DType::kBool: return 2 - from;
    case DType::kU8: return 256 - from;
    case DType::kS8: return 128 - from;
    case DType::kS16: return 32768 - from;
    case DType::kS32: return (1ull << 31) - from;
    default: return 0;
  }
}

Values random_from(LoweringContext& c) {  // (self, from, to?, generator)
  int64_t from = c.arg(1).toInt();
  uint64_t range = c.arg(2).isNone() ? default_range(c.out().dtype, from)
                                     : static_cast<uint64_t>(c.arg(2).toInt() - from);
  return {integers(c, from, range)};
}

Values random_to(LoweringContext& c) {  // (self, to, generator)
  return {integers(c, 0, static_cast<uint64_t>(c.arg(1).toInt()))};
}

Values random_full(LoweringContext& c) {  // (self, generator)
  return {integers(c, 0, default_range(c.out().dtype, 0))};
}

// random_(from, to) refuses an empty range before drawing, as CPU (from_arg -1: from is 0).
LoweringOptions nonempty_range(int from_arg, size_t to_arg) {
  LoweringOptions o = random_op();
  o.meta = checked_meta([=](const std::vector<c10::IValue>& args) {
    if (args[to_arg].isNone()) return;
    int64_t from = from_arg < 0 ? 0 : args[from_arg].toInt(), to = args[to_arg].toInt();
    TORCH_CHECK(from < to, "random_ expects 'from' to be less than 'to', but got from=", from, " >= to=", to);
  });
  return o;
}

Values bernoulli_float(LoweringContext& c) {  // (self, p, generator)
  Value u = uniforms(c, 1)[0];
  return {c.b.compare(Compare::kLT, u, c.b.constant(c.arg(1).toDouble(), u.type))};
}

Values bernoulli_tensor(LoweringContext& c, size_t p_arg) {
  Value u = uniforms(c, 1)[0];
  Value p = cast(c.b, c.input_uncast(p_arg), u.type.dtype);
  c.check_on_device(all_true(c.b, c.b.binary(BinaryOp::kAnd, c.b.compare(Compare::kGE, p, c.full(0, p)),
                                             c.b.compare(Compare::kLE, p, c.full(1, p)))));  // NaN fails too
  return {c.b.compare(Compare::kLT, u, broadcast_to(c.b, p, u.type.dims))};
}

// CPU's checks that probabilities lie in [0, 1]: a float p's on the host, a tensor's on the device.
LoweringOptions probability_checked(bool tensor_p) {
  LoweringOptions o = random_op();
  if (tensor_p) {
    o.device_check = "Expected p_in >= 0 && p_in <= 1 to be true, but got false.";
    o.device_check_runtime_error = true;
    return o;
  }
  o.meta = checked_meta([](const std::vector<c10::IValue>& args) {
    double p = args[1].toDouble();
    TORCH_CHECK(0 <= p && p <= 1, "bernoulli_ expects p to be in [0, 1], but got p=", p);
  });
  return o;
}

Values exponential(LoweringContext& c) {  // (self, lambd, generator)
  Math m{c.b};
  Value u = uniforms(c, 1)[0];
  Value e = -c.b.unary(UnaryOp::kLogPlusOne, -u);
  return {e / m.k(c.arg(1).toDouble(), e)};
}

Values dropout(LoweringContext& c) {  // (input, p, train?) -> (output, mask)
  Math m{c.b};
  Value x = c.input(0);
  double p = c.arg(1).toDouble();
  bool train = c.arg(2).isNone() || c.arg(2).toBool();
  if (!train || p == 0) return {x, c.b.constant(1, {DType::kBool, x.type.dims})};
  if (p == 1) return {m.k(0, x), c.b.constant(0, {DType::kBool, x.type.dims})};
  Value u = uniforms(c, 1)[0];
  Value keep = c.b.compare(Compare::kGE, u, c.b.constant(p, u.type));
  Value scaled = x * m.k(1 / (1 - p), x);
  return {c.b.select(keep, scaled, m.k(0, x)), keep};
}

// rrelu_with_noise(self, noise!, lower, upper, training, generator): written noise, then the
// result (rrelu_with_noise_: self, then noise). Training scales each negative element by its own
// uniform draw in [lower, upper), which noise keeps for the backward (1 where x >= 0); otherwise
// it is leaky_relu with slope (lower + upper) / 2, and noise stays as it was.
Values rrelu_with_noise(LoweringContext& c, bool in_place) {
  Math m{c.b};
  Value x = c.input(0);
  Value negative = c.b.compare(Compare::kLT, x, m.k(0, x));
  auto written = [&](const Value& out, const Value& noise) { return in_place ? Values{out, noise} : Values{noise, out}; };
  if (!c.arg(4).toBool()) {  // the slope as CPU's: (lower + upper) / 2 in double, used in opmath
    Value wide = (c.input_as(2, DType::kF64) + c.input_as(3, DType::kF64)) * c.scalar(0.5, DType::kF64);
    DType acc = accumulator(x.type.dtype);
    Value scaled = cast(c.b, cast(c.b, x, acc) * c.broadcast_to_output(cast(c.b, wide, acc)), x.type.dtype);
    return written(c.b.select(negative, scaled, x), c.input_uncast(1));
  }
  Value u = uniforms(c, 1)[0];
  Value lower = cast(c.b, c.elementwise_input(2), u.type.dtype), upper = cast(c.b, c.elementwise_input(3), u.type.dtype);
  Value r = cast(c.b, lower + u * (upper - lower), x.type.dtype);
  Value noise = c.b.select(negative, r, m.k(1, x));
  return written(x * noise, noise);
}

Values randperm(LoweringContext& c) {  // (n, dtype, layout, device, pin_memory)
  int64_t n = c.arg(0).toInt();
  if (n == 0) return {c.b.constant(0, c.out())};
  Value keys = draw(c, bits_of(c, DType::kU32, {n}), 0);
  Value idx = c.b.iota({DType::kS64, {n}}, 0);
  auto sorted = c.b.sort({keys, idx}, 0, true, [](hlo::Builder& b, const Values& a) {
    return Values{b.compare(Compare::kLT, a[0], a[1])};
  });
  return {sorted[1]};
}

// Every probability finite and >= 0, and every row's sum > 0 (CPU's checks, made on the device).
Value valid_distribution(LoweringContext& c, const Value& p) {
  Math m{c.b};
  Value fine = c.b.binary(BinaryOp::kAnd, c.b.unary(UnaryOp::kIsFinite, p), c.b.compare(Compare::kGE, p, m.k(0, p)));
  Value sums = m.sum(p, {1});
  Value positive = c.b.compare(Compare::kGT, sums, m.k(0, sums));
  return c.b.binary(BinaryOp::kAnd, all_true(c.b, fine), all_true(c.b, positive));
}

// multinomial(self, num_samples, replacement, generator): categories drawn in proportion to each
// row of self by the Gumbel-max trick, key_j = log p_j + G_j with G_j standard Gumbel. Without
// replacement the num_samples largest keys of one draw (PyTorch samples it the same way: the top
// of p / Exp(1), these keys exponentiated); with replacement the largest key of each of
// num_samples draws. A zero probability has key -inf: never drawn while a positive one remains.
Values multinomial(LoweringContext& c) {
  Value p = c.input_as(0, accumulator(c.input_uncast(0).type.dtype));
  int64_t n = p.type.dims.back(), rows = p.type.rank() == 2 ? p.type.dims[0] : 1;
  int64_t k = c.arg(1).toInt();
  bool replacement = c.arg(2).toBool();
  int64_t draws = replacement ? k : 1;
  DType t = p.type.dtype;
  c.check_on_device(valid_distribution(c, c.b.reshape(p, {rows, n})));
  Value u = uniform01_from(c, draw(c, bits_of(c, t == DType::kF64 ? DType::kU64 : DType::kU32, {rows, draws, n}), 0), digits(t));
  auto minus_log = [&](const Value& x) { return -c.b.unary(UnaryOp::kLog, x); };
  Value gumbel = minus_log(minus_log(u));
  Value log_p = c.b.unary(UnaryOp::kLog, c.b.reshape(p, {rows, n}));
  Value keys = c.b.broadcast_in_dim(log_p, {rows, draws, n}, {0, 2}) + gumbel;
  Value index = c.b.iota({DType::kS64, {rows, draws, n}}, 2);
  if (replacement || k == 1) {  // one draw without replacement (sampling a token) needs no sort
    Values best = c.b.reduce({keys, index}, {c.b.constant(-INFINITY, {t, {}}), c.b.constant(0, {DType::kS64, {}})}, {2},
                             extreme_with_index(true, t));
    return {c.b.reshape(best[1], c.out().dims)};
  }
  Values sorted = c.b.sort({keys, index}, 2, true, [](hlo::Builder& b, const Values& a) { return Values{b.compare(Compare::kGT, a[0], a[1])}; });
  return {c.b.reshape(c.b.slice(sorted[1], {0, 0, 0}, {rows, 1, k}, {1, 1, 1}), c.out().dims)};
}

}  // namespace

TORCHTPU_LOWERINGS(random) {
  register_lowering({"uniform_", "uniform", "uniform.out"}, uniform, random_op());
  register_lowering({"normal_", "normal_functional"}, normal, random_op());
  register_lowering({"random_.from", "random.from", "random.from_out"}, random_from, nonempty_range(1, 2));
  register_lowering({"random_.to", "random.to", "random.to_out"}, random_to, nonempty_range(-1, 1));
  register_lowering({"random_", "random", "random.out"}, random_full, random_op());
  register_lowering({"bernoulli_.float", "bernoulli.p", "bernoulli.float_out"}, bernoulli_float,
                    probability_checked(false));
  register_lowering({"bernoulli", "bernoulli.out"}, [](LoweringContext& c) { return bernoulli_tensor(c, 0); },
                    probability_checked(true));
  register_lowering({"bernoulli_.Tensor", "bernoulli.Tensor", "bernoulli.Tensor_out"},
                    [](LoweringContext& c) { return bernoulli_tensor(c, 1); }, probability_checked(true));
  register_lowering({"exponential_", "exponential", "exponential.out"}, exponential, random_op());
  register_lowering({"log_normal_", "log_normal", "log_normal.out"}, log_normal, random_op());
  LoweringOptions shaped_random = random_op();  // PyTorch has no meta kernels for these two
  shaped_random.meta = shaped_like(0);
  register_lowering({"_standard_gamma", "_standard_gamma.out"}, standard_gamma, shaped_random);
  register_lowering({"_sample_dirichlet", "_sample_dirichlet.out"}, sample_dirichlet, shaped_random);
  LoweringOptions rates = random_op();
  rates.device_check = "invalid Poisson rate, expected rate to be non-negative";
  rates.device_check_runtime_error = true;
  register_lowering({"poisson", "poisson.out"}, poisson, rates);
  register_lowering({"binomial", "binomial.out"}, binomial, shaped_random);
  register_lowering({"cauchy_", "cauchy", "cauchy.out"}, cauchy, random_op());
  register_lowering({"geometric_", "geometric", "geometric.out"}, geometric, random_op());
  LoweringOptions normal_checked = random_op();
  normal_checked.device_check = "normal expects all elements of std >= 0.0";
  normal_checked.device_check_runtime_error = true;
  normal_checked.meta = checked_meta([](const std::vector<c10::IValue>& args) {
    TORCH_CHECK(args[1].isTensor() || args[1].toDouble() >= 0, "normal expects std >= 0.0, but found std ", args[1].toDouble());
  });
  register_lowering({"normal.Tensor_Tensor", "normal.Tensor_Tensor_out", "normal.Tensor_float", "normal.Tensor_float_out",
                     "normal.float_Tensor", "normal.float_Tensor_out"},
                    normal_of_tensors, normal_checked);
  // Padded, dropout draws a mask over the whole box: the exact part is as random as any other.
  register_lowering({"native_dropout", "native_dropout.out"}, dropout, padded(random_op()));
  register_lowering({"native_dropout_backward", "native_dropout_backward.out"}, [](LoweringContext& c) {
    Math m{c.b};  // (grad_output, mask, scale)
    Value g = c.input(0);
    Value kept = c.b.select(c.broadcast_to_output(c.input_uncast(1)), g, m.k(0, g));
    return Values{kept * m.k(c.arg(2).toDouble(), kept)};
  }, padded({}));
  LoweringOptions permutation = random_op();
  permutation.meta = [](const c10::FunctionSchema&, const std::vector<c10::IValue>& args) {
    // PyTorch has no meta kernel for randperm's out= forms: (n, [generator,] out)
    at::Tensor out = args.back().toTensor();
    out.resize_({args[0].toInt()});
    return std::vector<c10::IValue>{out};
  };
  register_lowering({"randperm"}, randperm, random_op());
  register_lowering({"randperm.out", "randperm.generator_out"}, randperm, permutation);
  LoweringOptions sampled = random_op();
  sampled.device_check = "probability tensor contains either `inf`, `nan` or element < 0, or a row sums to 0 "
                         "(invalid multinomial distribution)";
  sampled.device_check_runtime_error = true;
  sampled.meta = checked_meta([](const std::vector<c10::IValue>& args) {
    const at::Tensor& p = args[0].toTensor();
    TORCH_CHECK(args[2].toBool() || p.dim() == 0 || args[1].toInt() <= p.size(-1),
                "cannot sample n_sample > prob_dist.size(-1) samples without replacement");
  });
  register_lowering({"multinomial", "multinomial.out"}, multinomial, sampled);
  register_lowering({"rrelu_with_noise", "rrelu_with_noise.out"}, [](LoweringContext& c) { return rrelu_with_noise(c, false); },
                    random_op());
  register_lowering({"rrelu_with_noise_"}, [](LoweringContext& c) { return rrelu_with_noise(c, true); }, random_op());
}

}  // namespace torchtpu::aten
