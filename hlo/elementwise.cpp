// Element-wise ops: unary, binary, compare, select, clamp, conversions.
#include <atomic>

#include "hlo/attributes.h"
#include "hlo/builder.h"
#include "hlo/float8.h"

namespace torchtpu::hlo {
namespace {

constexpr std::string_view kUnaryNames[] = {
    "stablehlo.abs", "stablehlo.cbrt", "stablehlo.ceil", "stablehlo.cosine",
    "stablehlo.count_leading_zeros", "stablehlo.exponential", "stablehlo.exponential_minus_one",
    "stablehlo.floor", "stablehlo.imag", "stablehlo.is_finite", "stablehlo.log",
    "stablehlo.log_plus_one", "stablehlo.logistic", "stablehlo.negate", "stablehlo.not",
    "stablehlo.popcnt", "stablehlo.real", "stablehlo.round_nearest_afz",
    "stablehlo.round_nearest_even", "stablehlo.rsqrt", "stablehlo.sign", "stablehlo.sine",
    "stablehlo.sqrt", "stablehlo.tan", "stablehlo.tanh", "chlo.acos", "chlo.acosh", "chlo.asin",
    "chlo.asinh", "chlo.atan", "chlo.atanh", "chlo.cosh", "chlo.digamma", "chlo.erf", "chlo.erfc",
    "chlo.erf_inv", "chlo.lgamma", "chlo.sinh"};

constexpr std::string_view kBinaryNames[] = {
    "stablehlo.add", "stablehlo.and", "stablehlo.atan2", "stablehlo.complex", "stablehlo.divide",
    "stablehlo.maximum", "stablehlo.minimum", "stablehlo.multiply", "stablehlo.or",
    "stablehlo.power", "stablehlo.remainder", "stablehlo.shift_left",
    "stablehlo.shift_right_arithmetic", "stablehlo.shift_right_logical", "stablehlo.subtract",
    "stablehlo.xor", "chlo.zeta"};

constexpr std::string_view kCompareNames[] = {"EQ", "NE", "GE", "GT", "LE", "LT"};

std::atomic<bool> float8_saturation{false};  // set_float8_e4m3fn_saturates

}  // namespace

Value Builder::unary(UnaryOp op, const Value& x) {
  // StableHLO's abs and sign take signed types only; on unsigned ones they are x and (x != 0).
  DType t = x.type.dtype;
  if ((is_unsigned(t) || t == DType::kBool) && op == UnaryOp::kAbs) return x;
  if ((is_unsigned(t) || t == DType::kBool) && op == UnaryOp::kSign)
    return convert(compare(Compare::kNE, x, constant(0, x.type)), t);
  // Rounding takes float types only; integers are already whole (PyTorch returns them unchanged).
  bool rounds = op == UnaryOp::kFloor || op == UnaryOp::kCeil || op == UnaryOp::kRoundNearestEven ||
                op == UnaryOp::kRoundNearestAfz;
  if (rounds && !is_floating(t) && !is_complex(t)) return x;
  TensorType type = x.type;
  if (op == UnaryOp::kIsFinite) type.dtype = DType::kBool;
  if ((op == UnaryOp::kReal || op == UnaryOp::kImag || op == UnaryOp::kAbs) &&
      is_complex(x.type.dtype))
    type.dtype = component_dtype(x.type.dtype);
  return emit1(kUnaryNames[static_cast<int>(op)], {x}, type);
}

Value Builder::binary(BinaryOp op, const Value& a, const Value& b) {
  require(a.type == b.type, "binary op operands differ: " + a.type.str() + " vs " + b.type.str());
  TensorType type = a.type;
  if (op == BinaryOp::kComplex)
    type.dtype = a.type.dtype == DType::kF64 ? DType::kC128 : DType::kC64;
  // XLA rewrites a float division by a constant into a multiplication by its reciprocal, which
  // is not IEEE division ((1 - 50) / 49 became -0.99999999999999989): PyTorch divides.
  if (op == BinaryOp::kDivide && (is_floating(type.dtype) || is_complex(type.dtype)))
    return emit1(kBinaryNames[static_cast<int>(op)], {a, opaque_if_constant(b)}, type);
  return emit1(kBinaryNames[static_cast<int>(op)], {a, b}, type);
}

Value Builder::compare(Compare dir, const Value& a, const Value& b) {
  require(a.type == b.type, "compare operands differ: " + a.type.str() + " vs " + b.type.str());
  std::string attrs = "comparison_direction = #stablehlo<comparison_direction " +
                      std::string(kCompareNames[static_cast<int>(dir)]) + ">";
  // Floats compare with IEEE semantics (TOTALORDER would order NaNs); ints by signedness.
  DType t = a.type.dtype;
  std::string kind = is_floating(t) || is_complex(t) ? "FLOAT"
                     : (is_unsigned(t) || t == DType::kBool) ? "UNSIGNED"
                                                             : "SIGNED";
  attrs += ", compare_type = #stablehlo<comparison_type " + kind + ">";
  return emit1("stablehlo.compare", {a, b}, a.type.with_dtype(DType::kBool), attrs);
}

Value Builder::select(const Value& pred, const Value& on_true, const Value& on_false) {
  require(on_true.type == on_false.type, "select branches differ: " + on_true.type.str() +
                                             " vs " + on_false.type.str());
  require(pred.type.dtype == DType::kBool, "select predicate must be i1");
  require(pred.type.dims.empty() || pred.type.dims == on_true.type.dims,
          "select predicate shape must be scalar or match the branches: " + pred.type.str() + " vs " +
              on_true.type.str());
  return emit1("stablehlo.select", {pred, on_true, on_false}, on_true.type);
}

Value Builder::clamp(const Value& lo, const Value& x, const Value& hi) {
  return emit1("stablehlo.clamp", {lo, x, hi}, x.type);
}

namespace {

// complex32 words <-> complex64: the word's two float16 halves are the real and imaginary parts
// (real first in memory, so in the low half: bitcast_convert's new last dimension is in memory order).
Value complex32_to_complex64(Builder& b, const Value& words) {
  std::vector<int64_t> dims = words.type.dims, start(dims.size() + 1, 0), limit = dims, step(dims.size() + 1, 1);
  Value halves = b.bitcast_convert(words, DType::kF16);
  limit.push_back(1);
  Value re = b.reshape(b.slice(halves, start, limit, step), dims);
  start.back() = 1;
  limit.back() = 2;
  Value im = b.reshape(b.slice(halves, start, limit, step), dims);
  return b.binary(BinaryOp::kComplex, b.convert(re, DType::kF32), b.convert(im, DType::kF32));
}

Value complex64_to_complex32(Builder& b, const Value& x) {
  std::vector<int64_t> pair = x.type.dims;
  pair.push_back(1);
  Value re = b.reshape(b.convert(b.unary(UnaryOp::kReal, x), DType::kF16), pair);
  Value im = b.reshape(b.convert(b.unary(UnaryOp::kImag, x), DType::kF16), pair);
  return b.bitcast_convert(b.concatenate({re, im}, static_cast<int64_t>(x.type.dims.size())), DType::kC32);
}

}  // namespace

void set_float8_e4m3fn_saturates(bool on) { float8_saturation.store(on, std::memory_order_relaxed); }
bool float8_e4m3fn_saturates() { return float8_saturation.load(std::memory_order_relaxed); }

// To a float8 type as PyTorch converts: through float32, and to float8_e4m3fn saturating where
// float8_e4m3fn_saturates() says so.
Value Builder::convert(const Value& x, DType to) {
  if (x.type.dtype == to) return x;
  if (x.type.dtype == DType::kC32) return convert(complex32_to_complex64(*this, x), to);
  if (to == DType::kC32) return complex64_to_complex32(*this, convert(x, DType::kC64));
  DType from = x.type.dtype;
  bool float8 = to == DType::kF8E4M3FN || to == DType::kF8E5M2;
  bool real = from != DType::kBool && !is_complex(from);  // complex32 was handled above
  if (float8 && real) {
    // PyTorch's float8 types are constructed from a float: a float64 rounds to float32 first
    // (1.0625 + 2^-40 is 1.0 in float8_e4m3fn, not 1.125), and so does an integer.
    Value f = from == DType::kF64 || !is_floating(from) ? convert(x, DType::kF32) : x;
    if (to == DType::kF8E4M3FN && float8_e4m3fn_saturates()) {
      // Everything beyond ±448 (what would round to 480, NaN's pattern, or is an infinity) is
      // ±448; NaN stays NaN.
      Value clamped = clamp(constant(lowest_value(to), f.type), f, constant(highest_value(to), f.type));
      f = select(compare(Compare::kNE, f, f), f, clamped);
    }
    return emit1("stablehlo.convert", {f}, x.type.with_dtype(to));
  }
  if (x.type.dtype == DType::kBool && (is_floating(to) || is_complex(to))) {
    // Through an integer: XLA rewrites a multiply or divide of a converted predicate by a
    // broadcast scalar into a select, which loses IEEE's 0 * inf = NaN and 0 / 0 = NaN
    // (bool_tensor / False gave 0, CPU gives NaN).
    return emit1("stablehlo.convert", {emit1("stablehlo.convert", {x}, x.type.with_dtype(DType::kU8))},
                 x.type.with_dtype(to));
  }
  return emit1("stablehlo.convert", {x}, x.type.with_dtype(to));
}

Value Builder::bitcast_convert(const Value& x, DType to) {
  // Between widths, as StableHLO defines it: to a narrower type the result gains a last dimension
  // of (wide / narrow) parts; to a wider type the operand's last dimension holds those parts.
  size_t from_size = element_size(x.type.dtype), to_size = element_size(to);
  std::vector<int64_t> dims = x.type.dims;
  if (from_size > to_size) {
    dims.push_back(static_cast<int64_t>(from_size / to_size));
  } else if (from_size < to_size) {
    require(!dims.empty() && dims.back() == static_cast<int64_t>(to_size / from_size),
            "bitcast_convert to a wider type needs a last dimension of (wide / narrow) parts");
    dims.pop_back();
  }
  return emit1("stablehlo.bitcast_convert", {x}, TensorType{to, dims});
}

}  // namespace torchtpu::hlo
