// Small StableHLO helpers the lowerings share: dtype casts and NumPy-style broadcasting.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <vector>

#include "aten/lowering.h"
#include "hlo/builder.h"

namespace torchtpu::aten {

// Low-precision floats accumulate in f32, as PyTorch does on CPU.
inline DType accumulator(DType t) {
  bool narrow = t == DType::kBF16 || t == DType::kF16 || t == DType::kF8E4M3FN || t == DType::kF8E5M2;
  return narrow ? DType::kF32 : t;
}

// Where x is NaN (x != x).
inline hlo::Value is_nan(const hlo::Value& x) { return hlo::builder_of(x).compare(hlo::Compare::kNE, x, x); }

// For lowerings of CPU kernels that compute in their `scalar_t`: the dtype to round every step to
// (Math::rounding) when that is bfloat16/float16, none otherwise.
inline std::optional<DType> low_precision(DType t) { return accumulator(t) != t ? std::optional<DType>(t) : std::nullopt; }

// PyTorch evaluates element-wise math on bfloat16/float16 in float32 ("opmath") and rounds once
// at the end; so do the lowerings that read their operands with these (the kernel casts results
// to the output dtype). opmath_b broadcasts to the first output's shape.
inline hlo::Value opmath(LoweringContext& c, size_t i) { return c.input_as(i, accumulator(c.compute_dtype())); }
inline hlo::Value opmath_b(LoweringContext& c, size_t i) { return c.broadcast_to_output(opmath(c, i)); }

// A possibly negative dimension index made non-negative (a 0-d tensor has one "dimension").
inline int64_t wrap_dim(int64_t dim, int64_t rank) { return dim < 0 ? dim + (rank > 0 ? rank : 1) : dim; }

// The bit layout of a float dtype: the integer dtype of its width, its fraction bits and its
// exponent bias (float16's and bfloat16's for any other dtype).
struct FloatFormat {
  DType bits;
  int64_t width, fraction, bias;
};
inline FloatFormat float_format(DType t) {
  return t == DType::kF64   ? FloatFormat{DType::kS64, 64, 52, 1023}
         : t == DType::kF32 ? FloatFormat{DType::kS32, 32, 23, 127}
         : t == DType::kF16 ? FloatFormat{DType::kS16, 16, 10, 15}
                            : FloatFormat{DType::kS16, 16, 7, 127};
}

inline hlo::Value cast(hlo::Builder& b, const hlo::Value& v, DType to) {
  return v.type.dtype == to ? v : b.convert(v, to);
}

// Bound argument `i` of clamp or hardtanh in the compute dtype, broadcast. A Scalar bound for an
// integral dtype is truncated to an integer and, with `clip`, clipped to the dtype's range first,
// as PyTorch 2.15's CPU kernels do (int8 clamp(max=300) clamps nothing); without, converted (a
// uint8 clamp(min=-1) is min=255 before 2.15). Bounds that neither way takes raised before this.
inline hlo::Value integer_bound(LoweringContext& c, size_t i, bool clip) {
  DType t = c.compute_dtype();
  bool integral = t != DType::kBool && t != DType::kC32 && !is_floating(t) && !is_complex(t);
  if (!clip || !integral || !c.arg(i).isScalar() || t == DType::kS64) return c.elementwise_input(i);
  hlo::Value v = cast(c.b, c.input_uncast(i), DType::kS64);  // a float Scalar truncates, as toLong
  hlo::TensorType s64{DType::kS64, {}};
  v = c.b.binary(hlo::BinaryOp::kMaximum, v, c.b.constant_int(static_cast<int64_t>(lowest_value(t)), s64));
  if (t != DType::kU64) v = c.b.binary(hlo::BinaryOp::kMinimum, v, c.b.constant_int(static_cast<int64_t>(highest_value(t)), s64));
  return c.broadcast_to_output(cast(c.b, v, t));
}

// complex32 (torch.chalf) is stored as float16 pairs (DType::kC32) and computed in complex64, as
// PyTorch's kernels compute it in complex<float>: the dtype a value of type `t` is computed in,
// and a stored value widened to it.
inline DType computed_as(DType t) { return t == DType::kC32 ? DType::kC64 : t; }
inline hlo::Value widened(hlo::Builder& b, const hlo::Value& v) { return cast(b, v, computed_as(v.type.dtype)); }

// |x|^2, real for complex x.
inline hlo::Value abs_squared(hlo::Builder& b, const hlo::Value& x) {
  using hlo::BinaryOp, hlo::UnaryOp;
  if (!is_complex(x.type.dtype)) return x * x;
  hlo::Value re = b.unary(UnaryOp::kReal, x), im = b.unary(UnaryOp::kImag, x);
  return re * re + im * im;
}

// f32 v rounded to float16's precision and range, in f32, by integer arithmetic on its bits: a
// float16 round trip would not survive XLA's CPU compiler, which turns "extend, op, truncate"
// into float16 arithmetic and may then fuse a product and a sum into one rounding (an FMA).
inline hlo::Value float16_rounded(hlo::Builder& b, const hlo::Value& v) {
  using hlo::BinaryOp, hlo::Compare, hlo::UnaryOp;
  hlo::TensorType bits_type{DType::kU32, v.type.dims};
  auto bits = [&](int64_t k) { return b.constant_int(k, bits_type); };
  auto k = [&](double x) { return b.constant(x, v.type); };
  hlo::Value u = b.bitcast_convert(v, DType::kU32);  // drop 13 of 23 mantissa bits, ties to even
  hlo::Value odd = b.binary(BinaryOp::kAnd, b.binary(BinaryOp::kShiftRightLogical, u, bits(13)), bits(1));
  u = b.binary(BinaryOp::kAnd, u + (odd + bits(0xFFF)), bits(0xFFFFE000));
  hlo::Value normal = b.bitcast_convert(u, DType::kF32), magnitude = b.unary(UnaryOp::kAbs, v);
  hlo::Value infinite = b.select(b.compare(Compare::kLT, v, k(0)), k(-INFINITY), k(INFINITY));
  normal = b.select(b.compare(Compare::kGT, b.unary(UnaryOp::kAbs, normal), k(65504)), infinite, normal);
  hlo::Value subnormal = b.binary(  // multiples of 2^-24
      BinaryOp::kMultiply, b.unary(UnaryOp::kRoundNearestEven, v * k(0x1p24)), k(0x1p-24));
  return b.select(b.compare(Compare::kLT, magnitude, k(0x1p-14)), subnormal, normal);
}

// v rounded to `stored` and kept in its own dtype: where CPU stores an intermediate of a float32
// computation in a bfloat16/float16 variable.
inline hlo::Value rounded_to(hlo::Builder& b, const hlo::Value& v, DType stored) {
  if (stored == DType::kF16 && v.type.dtype == DType::kF32) return float16_rounded(b, v);
  return cast(b, cast(b, v, stored), v.type.dtype);
}

// Broadcasts `v` to `sizes`, aligning trailing dimensions as PyTorch does.
inline hlo::Value broadcast_to(hlo::Builder& b, const hlo::Value& v,
                               const std::vector<int64_t>& sizes) {
  if (v.type.dims == sizes) return v;
  std::vector<int64_t> dims(v.type.dims.size());
  size_t lead = sizes.size() - v.type.dims.size();
  for (size_t i = 0; i < dims.size(); ++i) dims[i] = static_cast<int64_t>(lead + i);
  return b.broadcast_in_dim(v, sizes, dims);
}

// The shape two operands broadcast to (NumPy rules, trailing dimensions aligned).
inline std::vector<int64_t> broadcast_shape(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  std::vector<int64_t> out(std::max(a.size(), b.size()), 1);
  for (size_t i = 0; i < out.size(); ++i) {
    int64_t x = i < a.size() ? a[a.size() - 1 - i] : 1, y = i < b.size() ? b[b.size() - 1 - i] : 1;
    out[out.size() - 1 - i] = x == 1 ? y : x;
  }
  return out;
}

// The region of a reduce / scatter / reduce_window that combines two values with `op`.
inline hlo::RegionBody combine_with(hlo::BinaryOp op) {
  return [op](hlo::Builder& b, const std::vector<hlo::Value>& a) {
    return std::vector<hlo::Value>{b.binary(op, a[0], a[1])};
  };
}

// True (a 0-d bool) when every element of the bool tensor `pred` is: device-side checks.
inline hlo::Value all_true(hlo::Builder& b, const hlo::Value& pred) {
  std::vector<int64_t> all;
  for (int64_t d = 0; d < pred.type.rank(); ++d) all.push_back(d);
  return b.reduce({pred}, {b.constant(1, {DType::kBool, {}})}, all, combine_with(hlo::BinaryOp::kAnd))[0];
}

// Elementwise: the (already wrapped) index lies in [0, size).
inline hlo::Value in_range(hlo::Builder& b, const hlo::Value& index, int64_t size) {
  return b.binary(hlo::BinaryOp::kAnd, b.compare(hlo::Compare::kGE, index, b.constant(0, index.type)),
                  b.compare(hlo::Compare::kLT, index, b.constant_int(size, index.type)));
}

// True (a 0-d bool) when every index lies in [0, size): a device-side check.
inline hlo::Value all_in_range(hlo::Builder& b, const hlo::Value& index, int64_t size) {
  return all_true(b, in_range(b, index, size));
}

// Every dimension of a rank-`rank` tensor but `dim`.
inline std::vector<int64_t> dims_except(int64_t rank, int64_t dim) {
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < rank; ++d)
    if (d != dim) dims.push_back(d);
  return dims;
}

// Gathers x along dim at the given (s64, 1-D) source positions.
inline hlo::Value take_along(hlo::Builder& b, const hlo::Value& x, int64_t dim, const hlo::Value& positions) {
  int64_t n = positions.type.dims[0];
  std::vector<int64_t> slice = x.type.dims, out = x.type.dims;
  slice[dim] = 1;
  out[dim] = n;
  return b.gather(x, b.reshape(positions, {n, 1}), {dims_except(x.type.rank(), dim), {dim}, {dim}, 1}, slice, out);
}

// for (i = 0; i < count; ++i) carried = body(i, carried) as one stablehlo.while, so a program
// stays the size of one step however many steps run (i: a 0-d s64). Like the while's regions,
// the body may use only the carried values: pass what it reads through them.
using LoopBody = std::function<std::vector<hlo::Value>(hlo::Builder&, const hlo::Value& i,
                                                       const std::vector<hlo::Value>& carried)>;
inline std::vector<hlo::Value> counted_loop(hlo::Builder& b, int64_t count, std::vector<hlo::Value> carried,
                                            const LoopBody& body) {
  if (count <= 0) return carried;  // no body: its slices of empty dimensions would not compile
  hlo::TensorType index{DType::kS64, {}};
  carried.insert(carried.begin(), b.constant(0, index));
  std::vector<hlo::Value> out = b.while_loop(
      carried,
      [&](hlo::Builder& rb, const std::vector<hlo::Value>& a) {
        return std::vector<hlo::Value>{rb.compare(hlo::Compare::kLT, a[0], rb.constant_int(count, index))};
      },
      [&](hlo::Builder& rb, const std::vector<hlo::Value>& a) {
        std::vector<hlo::Value> next = body(rb, a[0], {a.begin() + 1, a.end()});
        next.insert(next.begin(), a[0] + rb.constant(1, index));
        return next;
      });
  out.erase(out.begin());
  return out;
}

}  // namespace torchtpu::aten
