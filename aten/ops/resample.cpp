// Spatial rearrangement: flip, roll, reflection/replication padding (and backward), nearest,
// linear, bicubic and antialiased upsampling (and backward).
#include <torch/version.h>

#include <array>
#include <cmath>
#include <functional>

#include "aten/lowering.h"
#include "aten/ops/cubic.h"
#include "aten/ops/lowering_util.h"
#include "aten/ops/math.h"

namespace torchtpu::aten {
namespace {

Value slice_dim(hlo::Builder& b, const Value& x, int64_t dim, int64_t start, int64_t limit) {
  std::vector<int64_t> s(x.type.rank(), 0), l = x.type.dims, st(x.type.rank(), 1);
  s[dim] = start;
  l[dim] = limit;
  return b.slice(x, s, l, st);
}

// Pads the trailing dims of x by (left, right) pairs listed from the last dim backwards.
template <typename Edge>
Value pad_edges(hlo::Builder& b, Value x, const std::vector<int64_t>& pad, Edge edge) {
  for (size_t i = 0; i + 1 < pad.size() + 1 && 2 * i < pad.size(); ++i) {
    int64_t dim = x.type.rank() - 1 - static_cast<int64_t>(i);
    int64_t left = pad[2 * i], right = pad[2 * i + 1], n = x.type.dims[dim];
    std::vector<Value> parts;
    if (left > 0) parts.push_back(edge(x, dim, left, n, true));
    parts.push_back(slice_dim(b, x, dim, std::max<int64_t>(-left, 0), n - std::max<int64_t>(-right, 0)));
    if (right > 0) parts.push_back(edge(x, dim, right, n, false));
    x = parts.size() == 1 ? parts[0] : b.concatenate(parts, dim);
  }
  return x;
}

Values reflection_pad(LoweringContext& c) {
  hlo::Builder& b = c.b;
  auto edge = [&b](const Value& x, int64_t dim, int64_t count, int64_t n, bool left) {
    Value part = left ? slice_dim(b, x, dim, 1, count + 1) : slice_dim(b, x, dim, n - 1 - count, n - 1);
    return b.reverse(part, {dim});
  };
  return {pad_edges(b, c.input(0), c.int_list(1), edge)};
}

Values replication_pad(LoweringContext& c) {
  hlo::Builder& b = c.b;
  auto edge = [&b](const Value& x, int64_t dim, int64_t count, int64_t n, bool left) {
    Value one = left ? slice_dim(b, x, dim, 0, 1) : slice_dim(b, x, dim, n - 1, n);
    std::vector<int64_t> dims = one.type.dims;
    dims[dim] = count;
    std::vector<int64_t> all;
    for (int64_t d = 0; d < one.type.rank(); ++d) all.push_back(d);
    return b.broadcast_in_dim(one, dims, all);
  };
  return {pad_edges(b, c.input(0), c.int_list(1), edge)};
}

// The source scale PyTorch uses for output dim i: 1/scale when the optional `float? scales_*`
// argument (number first_scale_arg + i) is given, else in/out.
double source_scale(const LoweringContext& c, size_t first_scale_arg, size_t i, int64_t in, int64_t out,
                    bool align_corners) {
  if (align_corners) return out > 1 ? static_cast<double>(in - 1) / (out - 1) : 0;
  const c10::IValue& scale = c.arg(first_scale_arg + i);
  if (!scale.isNone() && scale.toDouble() > 0) return 1.0 / scale.toDouble();
  return static_cast<double>(in) / out;
}

// Source position of each of `out` outputs of a nearest resampling of `in` inputs ("nearest-exact"
// samples at pixel centers).
Value nearest_sources(Math& m, int64_t in, int64_t out, double scale, bool exact = false) {
  Value dst = m.b.iota({DType::kF64, {out}}, 0);
  if (exact) dst = m.add(dst, m.k(0.5, dst));
  Value src = m.b.convert(m.b.unary(hlo::UnaryOp::kFloor, m.mul(dst, m.k(scale, dst))), DType::kS64);
  return m.b.binary(BinaryOp::kMinimum, src, m.b.constant_int(in - 1, src.type));
}

// The two sources (lo, hi) of each output of a linear resampling, and hi's weight, computed in
// `precision` as CPU computes them (float32 for every float dtype but float64).
struct LinearSources {
  Value lo, hi, weight;
};

LinearSources linear_sources(Math& m, int64_t in, int64_t out, double scale, bool align, DType precision) {
  Value dst = m.b.iota({precision, {out}}, 0);
  Value src = align ? m.mul(dst, m.k(scale, dst))
                    : m.sub(m.mul(m.add(dst, m.k(0.5, dst)), m.k(scale, dst)), m.k(0.5, dst));
  src = m.b.binary(BinaryOp::kMaximum, src, m.k(0, src));
  Value lo = m.b.convert(m.b.unary(hlo::UnaryOp::kFloor, src), DType::kS64);
  lo = m.b.binary(BinaryOp::kMinimum, lo, m.b.constant_int(in - 1, lo.type));
  Value hi = m.b.binary(BinaryOp::kMinimum, lo + m.b.constant_int(1, lo.type),
                        m.b.constant_int(in - 1, lo.type));
  return {lo, hi, m.sub(src, m.b.convert(lo, precision))};
}

Lowering upsample_nearest(bool exact) {  // (input, output_size, scales_*?...)
  return [exact](LoweringContext& c) {
    Math m{c.b};
    Value x = c.input(0);
    size_t spatial = x.type.dims.size() - 2;
    for (size_t i = 0; i < spatial; ++i) {
      int64_t dim = 2 + static_cast<int64_t>(i), in = x.type.dims[dim], out = c.out().dims[dim];
      x = take_along(c.b, x, dim, nearest_sources(m, in, out, source_scale(c, 2, i, in, out, false), exact));
    }
    return Values{x};
  };
}

// Images in uint8 (the one integer dtype CPU resamples) resample as CPU's separable uint8 kernel
// does: in f32, the last dimension first, each pass rounded half up and clamped to [0, 255].
// (CPU's weights are fixed-point, as PIL's, so about one result in ten still differs by 1 from
// these exact ones.) `pass(x, dim)` resamples x along dim.
bool resamples_uint8(const LoweringContext& c) { return c.out().dtype == DType::kU8; }

Value uint8_passes(Math& m, Value x, const std::function<Value(const Value&, int64_t dim)>& pass) {
  x = m.b.convert(x, DType::kF32);
  for (int64_t dim = x.type.rank() - 1; dim >= 2; --dim) {
    Value exact = pass(x, dim);
    Value rounded = m.b.unary(hlo::UnaryOp::kFloor, m.add(exact, m.k(0.5, exact)));
    x = m.b.clamp(m.k(0, rounded), rounded, m.k(255, rounded));
  }
  return m.b.convert(x, DType::kU8);
}

// upsample_linear1d / bilinear2d / trilinear3d (input, output_size, align_corners, scales_*?...):
// a (1 - w) + b w per dimension in float32 for low-precision inputs, rounded once. CPU's 1-D and
// 3-D kernels round the weights w and 1 - w to the input's dtype first (its 2-D kernel keeps them
// in float32), so these do too: then bfloat16 results equal CPU's.
Values upsample_linear(LoweringContext& c) {
  Math m{c.b};
  bool align = c.arg(2).toBool();
  DType dtype = c.out().dtype;
  bool weights_in_dtype = (dtype == DType::kBF16 || dtype == DType::kF16) && c.out().rank() != 4;
  auto pass = [&](const Value& x, int64_t dim) {
    size_t i = static_cast<size_t>(dim - 2);
    int64_t in = x.type.dims[dim], out = c.out().dims[dim];
    LinearSources s = linear_sources(m, in, out, source_scale(c, 3, i, in, out, align), align,
                                     dtype == DType::kU8 ? DType::kF64 : x.type.dtype);
    auto as_weight = [&](const Value& w) {
      Value v = cast(c.b, w, x.type.dtype);
      return weights_in_dtype ? rounded_to(c.b, v, dtype) : v;
    };
    Value w1 = as_weight(s.weight), w0 = as_weight(m.k(1, w1) - w1);
    Value a = take_along(c.b, x, dim, s.lo), bb = take_along(c.b, x, dim, s.hi);
    auto spread = [&](const Value& w) { return c.b.broadcast_in_dim(w, a.type.dims, {dim}); };
    return a * spread(w0) + bb * spread(w1);
  };
  if (resamples_uint8(c)) return {uint8_passes(m, c.input(0), pass)};
  Value x = c.input_as(0, accumulator(dtype));
  for (int64_t dim = 2; dim < x.type.rank(); ++dim) x = pass(x, dim);
  return {x};
}

// The [out, in] matrix of a 1-D resampling: row o holds the weight of each input in output o.
Value resampling_matrix(Math& m, int64_t in, int64_t out, const std::vector<std::pair<Value, Value>>& taps, DType dtype) {
  hlo::TensorType type{DType::kS64, {out, in}};
  Value matrix = m.b.constant(0, {dtype, {out, in}});
  for (const auto& [source, weight] : taps) {
    Value hit = m.b.compare(Compare::kEQ, m.b.iota(type, 1), m.b.broadcast_in_dim(source, type.dims, {0}));
    Value w = m.b.broadcast_in_dim(cast(m.b, weight, dtype), {out, in}, {0});
    matrix = m.add(matrix, m.b.select(hit, w, m.k(0, w)));
  }
  return matrix;
}

// A separable resampling along `dim` as a product with its [out, in] matrix: forward (x [.., in,
// ..] -> [.., out, ..]) or backward (grad [.., out, ..] -> [.., in, ..] through the transposed
// matrix: a gather's backward is a scatter-add, the same sum as this matmul).
Value resample_with(hlo::Builder& b, const Value& x, int64_t dim, const Value& matrix, bool backward) {
  Value r = b.dot_general(x, matrix, {{}, {}, {dim}, {backward ? 0 : 1}}, x.type.dtype, hlo::Builder::Precision::kHighest);
  std::vector<int64_t> perm;  // r is [other dims..., in]: move `in` back to `dim`
  int64_t rank = r.type.rank();
  for (int64_t d = 0, k = 0; d < rank; ++d) perm.push_back(d == dim ? rank - 1 : k++);
  return b.transpose(r, perm);
}

// upsample_nearest*d_backward(grad_output, output_size, input_size, scales_*?...)
Lowering upsample_nearest_backward(bool exact) {
  return [exact](LoweringContext& c) {
    Math m{c.b};
    Value g = c.input_as(0, accumulator(c.out().dtype));
    for (size_t i = g.type.dims.size() - 2; i-- > 0;) {
      int64_t dim = 2 + static_cast<int64_t>(i), in = c.out().dims[dim], out = g.type.dims[dim];
      Value source = nearest_sources(m, in, out, source_scale(c, 3, i, in, out, false), exact);
      Value ones = c.b.constant(1, {DType::kF64, {out}});
      g = resample_with(c.b, g, dim, resampling_matrix(m, in, out, {{source, ones}}, g.type.dtype), true);
    }
    return Values{g};
  };
}

// The [out, in] matrix of bicubic upsampling along one dim: 4 taps around each source position,
// clamped to the edge (PyTorch's upsample_bicubic2d; A = -0.75). Positions and weights in the
// matrix's dtype, as CPU computes them, then, for a bfloat16/float16 input, rounded to it as CPU's
// kernel stores them (the products and sums stay in float32).
Value bicubic_matrix(Math& m, int64_t in, int64_t out, double scale, bool align, DType dtype, DType input) {
  Value dst = m.b.iota({dtype, {out}}, 0);
  Value src = align ? m.mul(dst, m.k(scale, dst)) : m.sub(m.mul(m.add(dst, m.k(0.5, dst)), m.k(scale, dst)), m.k(0.5, dst));
  Value floor = m.b.unary(UnaryOp::kFloor, src);
  auto weights = cubic_weights(m, m.sub(src, floor));
  std::vector<std::pair<Value, Value>> taps;
  for (int i = 0; i < 4; ++i) {
    Value at = m.b.convert(m.add(floor, m.k(i - 1, floor)), DType::kS64);
    at = m.b.clamp(m.b.constant(0, at.type), at, m.b.constant_int(in - 1, at.type));
    Value w = weights[i];
    if (input == DType::kBF16 || input == DType::kF16) w = rounded_to(m.b, w, input);
    taps.push_back({at, w});
  }
  return resampling_matrix(m, in, out, taps, dtype);
}

// A 2-D resampling given by one [out, in] matrix per spatial dimension: forward (input,
// output_size, align_corners, scales_h?, scales_w?) or backward (grad_output, output_size,
// input_size, align_corners, scales...) through the transposed matrices.
// (in, out, scale, align_corners, the matrix's dtype, the op's input dtype) -> [out, in]
using MatrixFor = std::function<Value(Math&, int64_t in, int64_t out, double scale, bool align, DType, DType)>;
Lowering separable_2d(MatrixFor matrix, bool backward) {
  return [matrix, backward](LoweringContext& c) {
    Math m{c.b};
    if (!backward && resamples_uint8(c)) {
      bool align = c.arg(2).toBool();
      return Values{uint8_passes(m, c.input(0), [&](const Value& x, int64_t dim) {
        size_t i = static_cast<size_t>(dim - 2);
        int64_t in = x.type.dims[dim], out = c.out().dims[dim];
        return resample_with(c.b, x, dim,
                             matrix(m, in, out, source_scale(c, 3, i, in, out, align), align, x.type.dtype, DType::kU8), false);
      })};
    }
    Value x = c.input_as(0, accumulator(c.out().dtype));
    const std::vector<int64_t>& input = backward ? c.out().dims : x.type.dims;
    const std::vector<int64_t>& output = backward ? x.type.dims : c.out().dims;
    size_t flags = backward ? 3 : 2;
    bool align = c.arg(flags).toBool();
    for (size_t i = 0; i < 2; ++i) {
      int64_t dim = 2 + static_cast<int64_t>(i), in = input[dim], out = output[dim];
      x = resample_with(c.b, x, dim,
                        matrix(m, in, out, source_scale(c, flags + 1, i, in, out, align), align, x.type.dtype,
                               backward ? x.type.dtype : c.out().dtype),
                        backward);
    }
    return Values{x};
  };
}

// The [out, in] weights of antialiased resampling (PyTorch's _upsample_{bilinear,bicubic}2d_aa and
// their backwards, after PIL): output i averages the inputs under a filter centred at
// scale (i + 1/2), widened by the scale when downsampling, its weights normalized to sum 1.
// Computed on the host (they depend on shapes only) in T, the precision CPU computes them in.
template <typename T>
std::vector<T> antialias_weights(int64_t in, int64_t out, T scale, bool cubic) {
  auto filter = [cubic](T x) {
    x = std::abs(x);
    if (!cubic) return std::max(T(0), 1 - x);
    constexpr T a = -0.5;
    if (x < 1) return ((a + 2) * x - (a + 3)) * x * x + 1;
    return x < 2 ? (((x - 5) * x + 8) * x - 4) * a : T(0);
  };
  T support = (cubic ? T(2) : T(1)) * std::max(scale, T(1)), inverse = scale >= 1 ? 1 / scale : T(1);
  std::vector<T> w(static_cast<size_t>(out * in), T(0));
  for (int64_t i = 0; i < out; ++i) {
    T center = scale * (static_cast<T>(i) + T(0.5)), total = 0;
    int64_t lo = std::max<int64_t>(static_cast<int64_t>(center - support + T(0.5)), 0);
    int64_t hi = std::min<int64_t>(static_cast<int64_t>(center + support + T(0.5)), in);
    for (int64_t j = lo; j < hi; ++j) total += w[i * in + j] = filter((static_cast<T>(j) - center + T(0.5)) * inverse);
    for (int64_t j = lo; j < hi && total != 0; ++j) w[i * in + j] /= total;
  }
  return w;
}

Value antialias_matrix(hlo::Builder& b, int64_t in, int64_t out, double scale, bool cubic, DType dtype) {
  if (dtype == DType::kF64) return b.constant_bytes(antialias_weights<double>(in, out, scale, cubic).data(), {dtype, {out, in}});
  std::vector<float> w = antialias_weights<float>(in, out, static_cast<float>(scale), cubic);
  return cast(b, b.constant_bytes(w.data(), {DType::kF32, {out, in}}), dtype);
}

// Backward of reflection / replication padding (grad_output, self, padding): each padded dim is
// a gather of the input (reflected or clamped positions), so its gradient is the transposed sum.
Lowering pad_backward(bool reflected) {
  return [reflected](LoweringContext& c) {
    Math m{c.b};
    Value g = c.input_as(0, accumulator(c.out().dtype));
    auto pad = c.int_list(2);
    for (size_t i = 0; 2 * i < pad.size(); ++i) {
      int64_t dim = g.type.rank() - 1 - static_cast<int64_t>(i), in = c.out().dims[dim], out = g.type.dims[dim];
      Value at = c.b.iota({DType::kS64, {out}}, 0) - c.b.constant_int(pad[2 * i], {DType::kS64, {out}});
      if (reflected) {  // -p -> p, n - 1 + p -> n - 1 - p
        at = c.b.unary(UnaryOp::kAbs, at);
        Value last = c.b.constant_int(in - 1, at.type);
        at = last - c.b.unary(UnaryOp::kAbs, last - at);
      }
      at = c.b.clamp(c.b.constant(0, at.type), at, c.b.constant_int(in - 1, at.type));
      Value ones = c.b.constant(1, {DType::kF64, {out}});
      g = resample_with(c.b, g, dim, resampling_matrix(m, in, out, {{at, ones}}, g.type.dtype), true);
    }
    return Values{g};
  };
}

// upsample_{linear1d,bilinear2d,trilinear3d}_backward(grad_output, output_size, input_size,
// align_corners, scales_*?...)
Values upsample_linear_backward(LoweringContext& c) {
  Math m{c.b};
  Value g = c.input_as(0, accumulator(c.out().dtype));
  bool align = c.arg(3).toBool();
  for (size_t i = g.type.dims.size() - 2; i-- > 0;) {
    int64_t dim = 2 + static_cast<int64_t>(i), in = c.out().dims[dim], out = g.type.dims[dim];
    LinearSources s = linear_sources(m, in, out, source_scale(c, 4, i, in, out, align), align, g.type.dtype);
    Value matrix = resampling_matrix(m, in, out, {{s.lo, m.k(1, s.weight) - s.weight}, {s.hi, s.weight}}, g.type.dtype);
    g = resample_with(c.b, g, dim, matrix, true);
  }
  return {g};
}

// roll(self, shifts, dims): each shift rotates one dim; no dims rotates the flattened tensor.
Values roll(LoweringContext& c) {
  Value x = c.input(0);
  std::vector<int64_t> shifts = c.int_list(1), dims = c.int_list(2);
  bool flat = dims.empty();
  if (flat) {
    x = c.b.reshape(x, {x.type.element_count()});
    dims = {0};
  }
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t dim = wrap_dim(dims[i], x.type.rank()), n = x.type.dims[dim];
    if (n == 0) continue;
    int64_t s = ((shifts[i] % n) + n) % n;
    if (s != 0) x = c.b.concatenate({slice_dim(c.b, x, dim, n - s, n), slice_dim(c.b, x, dim, 0, n - s)}, dim);
  }
  return {flat ? c.b.reshape(x, c.out().dims) : x};
}

// From PyTorch 2.14 the 2-d pads of a channels-last batch are channels-last, on CPU and in the
// shape function torch.compile traces with (its C++ meta kernel still says contiguous).
LoweringOptions pad2d_layout() {
#if TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR < 14
  return {};
#else
  return with_meta([](const c10::FunctionSchema& schema, const std::vector<c10::IValue>& args) {
    std::vector<c10::IValue> returns = meta_kernel(schema.name(), schema.overload_name(), args);
    const at::Tensor& input = args[0].toTensor();
    if (schema.overload_name().empty() && input.dim() == 4)
      returns[0] = returns[0].toTensor().contiguous(input.suggest_memory_format());
    return returns;
  });
#endif
}

}  // namespace

TORCHTPU_LOWERINGS(resample) {
  register_lowering({"flip", "flip.out"}, [](LoweringContext& c) {
    Value x = c.input(0);
    std::vector<int64_t> dims;
    for (int64_t d : c.int_list(1)) dims.push_back(d < 0 ? d + x.type.rank() : d);
    return Values{dims.empty() || x.type.rank() == 0 ? x : c.b.reverse(x, dims)};  // a 0-d tensor is its own flip
  });
  register_lowering({"reflection_pad1d", "reflection_pad1d.out", "reflection_pad3d", "reflection_pad3d.out"},
                    reflection_pad);
  register_lowering({"reflection_pad2d", "reflection_pad2d.out"}, reflection_pad, pad2d_layout());
  register_lowering({"replication_pad1d", "replication_pad1d.out", "replication_pad3d", "replication_pad3d.out"},
                    replication_pad);
  register_lowering({"replication_pad2d", "replication_pad2d.out"}, replication_pad, pad2d_layout());
  // The .vec overloads are composites over these.
  register_lowering({"upsample_nearest1d", "upsample_nearest1d.out", "upsample_nearest2d", "upsample_nearest2d.out",
                     "upsample_nearest3d", "upsample_nearest3d.out"}, upsample_nearest(false));
  register_lowering({"_upsample_nearest_exact1d", "_upsample_nearest_exact1d.out", "_upsample_nearest_exact2d",
                     "_upsample_nearest_exact2d.out", "_upsample_nearest_exact3d", "_upsample_nearest_exact3d.out"},
                    upsample_nearest(true));
  register_lowering({"upsample_linear1d", "upsample_linear1d.out", "upsample_bilinear2d", "upsample_bilinear2d.out",
                     "upsample_trilinear3d", "upsample_trilinear3d.out"}, upsample_linear);
  register_lowering({"upsample_bicubic2d", "upsample_bicubic2d.out"}, separable_2d(bicubic_matrix, false));
  register_lowering({"upsample_nearest1d_backward", "upsample_nearest1d_backward.grad_input", "upsample_nearest2d_backward",
                     "upsample_nearest2d_backward.grad_input", "upsample_nearest3d_backward",
                     "upsample_nearest3d_backward.grad_input"}, upsample_nearest_backward(false));
  register_lowering({"_upsample_nearest_exact1d_backward", "_upsample_nearest_exact1d_backward.grad_input",
                     "_upsample_nearest_exact2d_backward", "_upsample_nearest_exact2d_backward.grad_input",
                     "_upsample_nearest_exact3d_backward", "_upsample_nearest_exact3d_backward.grad_input"},
                    upsample_nearest_backward(true));
  register_lowering({"upsample_linear1d_backward", "upsample_linear1d_backward.grad_input", "upsample_bilinear2d_backward",
                     "upsample_bilinear2d_backward.grad_input", "upsample_trilinear3d_backward",
                     "upsample_trilinear3d_backward.grad_input"}, upsample_linear_backward);
  register_lowering({"upsample_bicubic2d_backward", "upsample_bicubic2d_backward.grad_input"},
                    separable_2d(bicubic_matrix, true));
  for (bool cubic : {false, true}) {
    MatrixFor matrix = [cubic](Math& m, int64_t in, int64_t out, double scale, bool, DType dtype, DType) {
      return antialias_matrix(m.b, in, out, scale, cubic, dtype);
    };
    register_lowering({cubic ? "_upsample_bicubic2d_aa" : "_upsample_bilinear2d_aa",
                       cubic ? "_upsample_bicubic2d_aa.out" : "_upsample_bilinear2d_aa.out"},
                      separable_2d(matrix, false));
    register_lowering({cubic ? "_upsample_bicubic2d_aa_backward" : "_upsample_bilinear2d_aa_backward",
                       cubic ? "_upsample_bicubic2d_aa_backward.grad_input" : "_upsample_bilinear2d_aa_backward.grad_input"},
                      separable_2d(matrix, true));
  }
  register_lowering({"reflection_pad1d_backward", "reflection_pad1d_backward.grad_input", "reflection_pad2d_backward",
                     "reflection_pad2d_backward.grad_input", "reflection_pad3d_backward",
                     "reflection_pad3d_backward.grad_input"}, pad_backward(true));
  register_lowering({"replication_pad1d_backward", "replication_pad1d_backward.grad_input", "replication_pad2d_backward",
                     "replication_pad2d_backward.grad_input", "replication_pad3d_backward",
                     "replication_pad3d_backward.grad_input"}, pad_backward(false));
  register_lowering({"roll", "roll.out"}, roll);
}

}  // namespace torchtpu::aten
