// Convolutions (forward and backward), pooling (max with indices, average, adaptive average and max),
// max unpooling and patch extraction (im2col, col2im) over PyTorch's channels-first layout.
#include <cmath>

#include "aten/lowering.h"
#include "aten/ops/lowering_util.h"
#include "aten/ops/math.h"
#include "aten/ops/matrix_util.h"

namespace torchtpu::aten {
namespace {

using Pads = std::vector<std::pair<int64_t, int64_t>>;

// PyTorch computes float32 convolutions in full precision unless told otherwise (no TF32).
constexpr auto kExact = hlo::Builder::Precision::kHighest;

// An int list argument expanded to one entry per spatial dimension (PyTorch accepts one value).
std::vector<int64_t> per_dim(const LoweringContext& c, size_t i, size_t n, int64_t fallback) {
  std::vector<int64_t> v = c.arg(i).isNone() ? std::vector<int64_t>{} : c.int_list(i);
  if (v.empty()) v.assign(n, fallback);
  if (v.size() == 1) v.assign(n, v[0]);
  return v;
}

// "[b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1]" for n spatial dims, with the given leading labels.
std::string layout(size_t n, const char* lhs, const char* rhs, const char* out) {
  std::string spatial;
  for (size_t i = 0; i < n; ++i) spatial += ", " + std::to_string(i);
  return std::string("[") + lhs + spatial + "]x[" + rhs + spatial + "]->[" + out + spatial + "]";
}

// A transposed convolution's weight [Cin, Cout/G, k...] as a regular one: [Cout, Cin/G, k...],
// spatially flipped.
Value as_forward_weight(hlo::Builder& b, const Value& w, int64_t groups) {
  std::vector<int64_t> d = w.type.dims;
  int64_t cin = d[0], cout_g = d[1];
  std::vector<int64_t> grouped{groups, cin / groups, cout_g};
  grouped.insert(grouped.end(), d.begin() + 2, d.end());
  std::vector<int64_t> perm{0, 2, 1};
  for (size_t i = 3; i < grouped.size(); ++i) perm.push_back(static_cast<int64_t>(i));
  Value t = b.transpose(b.reshape(w, grouped), perm);
  std::vector<int64_t> flat{groups * cout_g, cin / groups};
  flat.insert(flat.end(), d.begin() + 2, d.end());
  std::vector<int64_t> spatial;
  for (size_t i = 2; i < d.size(); ++i) spatial.push_back(static_cast<int64_t>(i));
  return b.reverse(b.reshape(t, flat), spatial);
}

// The transposed convolution of x with a [Cin, Cout/G, k...] weight, producing `out_dims`.
Value transposed_conv(hlo::Builder& b, const Value& x, const Value& w, const std::vector<int64_t>& stride,
                      const std::vector<int64_t>& padding, const std::vector<int64_t>& dilation,
                      int64_t groups, const std::vector<int64_t>& out_dims, DType dtype,
                      hlo::Builder::Precision precision) {
  size_t n = stride.size();
  hlo::ConvSpec spec{layout(n, "b, f", "o, i", "b, f"), {}, stride, dilation, {}, groups, 1};
  for (size_t i = 0; i < n; ++i) {
    int64_t k = w.type.dims[2 + i], in = x.type.dims[2 + i], out = out_dims[2 + i];
    int64_t low = dilation[i] * (k - 1) - padding[i];
    // high padding makes the result exactly out_dims (covers output_padding too)
    int64_t high = out - ((in - 1) * stride[i] + 1) - low + dilation[i] * (k - 1);
    spec.padding.push_back({low, high});
  }
  return b.convolution(x, as_forward_weight(b, w, groups), spec, out_dims, dtype, precision);
}

// y + bias, in y's dtype: the convolutions below give bfloat16/float16 results in float32, so the
// bias joins before the one rounding, as on CPU (rounding the convolution first was an ulp off in
// a quarter of the outputs).
Value add_bias(LoweringContext& c, const Value& y, size_t bias_arg) {
  if (!c.has(bias_arg)) return y;
  return y + c.b.broadcast_in_dim(c.input_as(bias_arg, y.type.dtype), y.type.dims, {1});
}

Values convolution(LoweringContext& c) {
  // (input, weight, bias?, stride, padding, dilation, transposed, output_padding, groups)
  Value x = c.input(0), w = c.input(1);
  size_t n = x.type.dims.size() - 2;
  auto stride = per_dim(c, 3, n, 1), padding = per_dim(c, 4, n, 0), dilation = per_dim(c, 5, n, 1);
  int64_t groups = c.arg(8).toInt();
  const auto& out = c.out().dims;
  DType acc = accumulator(x.type.dtype);
  if (c.arg(6).toBool())
    return {add_bias(c, transposed_conv(c.b, x, w, stride, padding, dilation, groups, out, acc, c.precision()), 2)};
  hlo::ConvSpec spec{layout(n, "b, f", "o, i", "b, f"), stride, {}, dilation, {}, groups, 1};
  for (size_t i = 0; i < n; ++i) spec.padding.push_back({padding[i], padding[i]});
  return {add_bias(c, c.b.convolution(x, w, spec, out, acc, c.precision()), 2)};
}

// d(weight) of a regular convolution of `input` giving `grad` (shape w_dims): the two correlated
// over the batch, with batch_group_count taking care of groups.
Value weight_grad(hlo::Builder& b, const Value& input, const Value& grad, const std::vector<int64_t>& w_dims,
                  const std::vector<int64_t>& stride, const std::vector<int64_t>& padding,
                  const std::vector<int64_t>& dilation, int64_t groups, hlo::Builder::Precision precision) {
  size_t n = stride.size();
  hlo::ConvSpec spec{layout(n, "f, b", "i, o", "f, b"), dilation, {}, stride, {}, 1, groups};
  for (size_t i = 0; i < n; ++i) {
    int64_t k = w_dims[2 + i], in = input.type.dims[2 + i], o = grad.type.dims[2 + i];
    spec.padding.push_back({padding[i], (k - 1) * dilation[i] + (o - 1) * stride[i] + 1 - in - padding[i]});
  }
  return b.convolution(input, grad, spec, w_dims, input.type.dtype, precision);
}

Values convolution_backward(LoweringContext& c) {
  // (grad_output, input, weight, bias_sizes?, stride, padding, dilation, transposed,
  //  output_padding, groups, output_mask) -> (grad_input, grad_weight, grad_bias)
  Value g = c.input(0), x = c.input(1), w = c.input(2);
  size_t n = x.type.dims.size() - 2;
  auto stride = per_dim(c, 4, n, 1), padding = per_dim(c, 5, n, 0), dilation = per_dim(c, 6, n, 1);
  int64_t groups = c.arg(9).toInt();
  DType t = x.type.dtype;
  Value grad_input, grad_weight;
  if (c.arg(7).toBool()) {
    // y = convT(x, w) is the input-gradient of a regular convolution, so its gradients are a
    // regular convolution of g with w, and the weight gradient with input and g swapped.
    hlo::ConvSpec spec{layout(n, "b, f", "o, i", "b, f"), stride, {}, dilation, {}, groups, 1};
    for (size_t i = 0; i < n; ++i) {  // high padding chosen to land exactly on the input's size
      int64_t k = w.type.dims[2 + i], in = x.type.dims[2 + i], o = g.type.dims[2 + i];
      spec.padding.push_back({padding[i], (in - 1) * stride[i] + dilation[i] * (k - 1) + 1 - o - padding[i]});
    }
    grad_input = c.b.convolution(g, w, spec, x.type.dims, t, c.precision());
    grad_weight = weight_grad(c.b, g, x, w.type.dims, stride, padding, dilation, groups, c.precision());
  } else {
    grad_input = transposed_conv(c.b, g, w, stride, padding, dilation, groups, x.type.dims, t, c.precision());
    grad_weight = weight_grad(c.b, x, g, w.type.dims, stride, padding, dilation, groups, c.precision());
  }
  std::vector<int64_t> all_but_channels;
  for (int64_t d = 0; d < g.type.rank(); ++d)
    if (d != 1) all_but_channels.push_back(d);
  Value grad_bias = c.b.reduce({cast(c.b, g, accumulator(t))}, {c.b.constant(0, {accumulator(t), {}})}, all_but_channels,
                               combine_with(BinaryOp::kAdd))[0];
  return {grad_input, grad_weight, grad_bias};
}

// Window over the trailing `n` dims of a rank-`rank` tensor.
hlo::Window window(int64_t rank, const std::vector<int64_t>& k, const std::vector<int64_t>& s,
                   const std::vector<int64_t>& d, const Pads& pads) {
  size_t lead = rank - k.size();
  hlo::Window w;
  w.dims.assign(lead, 1);
  w.strides.assign(lead, 1);
  w.window_dilations.assign(lead, 1);
  w.padding.assign(lead, {0, 0});
  w.dims.insert(w.dims.end(), k.begin(), k.end());
  w.strides.insert(w.strides.end(), s.begin(), s.end());
  w.window_dilations.insert(w.window_dilations.end(), d.begin(), d.end());
  w.padding.insert(w.padding.end(), pads.begin(), pads.end());
  w.base_dilations.assign(rank, 1);
  return w;
}

// Low padding p and the high padding that yields `out` windows (ceil_mode adds some).
Pads pool_padding(const Value& x, const std::vector<int64_t>& out_dims, const std::vector<int64_t>& k,
                  const std::vector<int64_t>& s, const std::vector<int64_t>& d, const std::vector<int64_t>& p) {
  Pads pads;
  size_t n = k.size(), lead = x.type.dims.size() - n;
  for (size_t i = 0; i < n; ++i) {
    int64_t in = x.type.dims[lead + i], o = out_dims[lead + i];
    int64_t needed = (o - 1) * s[i] + d[i] * (k[i] - 1) + 1;
    pads.push_back({p[i], std::max<int64_t>(needed - in - p[i], p[i])});
  }
  return pads;
}

// Pooling lowerings take the number of spatial dims from the op (2 for *2d, 3 for *3d): PyTorch
// may pass a single kernel size for all of them.
// The flat index of every element of x within its plane of the last n dims, as PyTorch reports
// pooling indices.
Value plane_index(hlo::Builder& b, const std::vector<int64_t>& dims, size_t n) {
  int64_t rank = static_cast<int64_t>(dims.size()), scale = 1;
  Value index = b.constant(0, {DType::kS64, dims});
  for (int64_t i = rank - 1; i >= rank - static_cast<int64_t>(n); --i) {
    Value along = b.iota({DType::kS64, dims}, i);
    index = index + along * b.constant(scale, along.type);
    scale *= dims[i];
  }
  return index;
}

// The initial (value, index) of a max-with-index reduction: an all -inf window reports its first
// element, as CPU's kernels do (ties go to the smaller index, and no index is larger).
std::vector<Value> max_init(hlo::Builder& b, DType t) {
  return {b.constant(-INFINITY, {t, {}}), b.constant_int(INT64_MAX, {DType::kS64, {}})};
}

// Pooling lowerings take the number of spatial dims from the op (2 for *2d, 3 for *3d): PyTorch
// may pass a single kernel size for all of them.
Values max_pool_with_indices(LoweringContext& c, size_t n) {
  // (self, kernel_size, stride, padding, dilation, ceil_mode) -> (out, indices)
  Value x = c.input(0);
  auto k = per_dim(c, 1, n, 1), s = per_dim(c, 2, n, 0), p = per_dim(c, 3, n, 0), d = per_dim(c, 4, n, 1);
  for (size_t i = 0; i < n; ++i) s[i] = s[i] == 0 ? k[i] : s[i];
  hlo::Window w = window(x.type.rank(), k, s, d, pool_padding(x, c.out().dims, k, s, d, p));
  auto r = c.b.reduce_window({x, plane_index(c.b, x.type.dims, n)}, max_init(c.b, x.type.dtype), w,
                             extreme_with_index(true, x.type.dtype));
  return {r[0], r[1]};
}

// Adaptive max pooling: along pooled dim i, output bin o covers [floor(o*in/out),
// ceil((o+1)*in/out)). Each pooled dim is gathered into [out, widest bin] (a shorter bin repeats
// its last element), then one max-with-index reduction over the bin dims picks CPU's element.
Values adaptive_max_pool(LoweringContext& c) {  // (self, output_size) -> (out, indices)
  Value x = c.input(0);
  auto out = c.int_list(1);
  size_t n = out.size();
  int64_t lead = x.type.rank() - static_cast<int64_t>(n);
  Value index = plane_index(c.b, x.type.dims, n);
  std::vector<int64_t> bin_dims;
  for (size_t i = 0; i < n; ++i) {
    int64_t dim = lead + 2 * static_cast<int64_t>(i), in = x.type.dims[dim], o = out[i], widest = 0;
    for (int64_t bin = 0; bin < o; ++bin) widest = std::max(widest, ((bin + 1) * in + o - 1) / o - bin * in / o);
    std::vector<int64_t> positions;
    for (int64_t bin = 0; bin < o; ++bin)
      for (int64_t j = 0; j < widest; ++j) positions.push_back(std::min(bin * in / o + j, ((bin + 1) * in + o - 1) / o - 1));
    Value at = c.b.constant_bytes(positions.data(), {DType::kS64, {o * widest}});
    std::vector<int64_t> dims = x.type.dims;
    dims[dim] = o;
    dims.insert(dims.begin() + dim + 1, widest);
    x = c.b.reshape(take_along(c.b, x, dim, at), dims);
    index = c.b.reshape(take_along(c.b, index, dim, at), dims);
    bin_dims.push_back(dim + 1);
  }
  auto r = c.b.reduce({x, index}, max_init(c.b, x.type.dtype), bin_dims, extreme_with_index(true, x.type.dtype));
  return {r[0], r[1]};
}

// Where fractional max pooling's windows start along one pooled dim, per plane ([planes, out],
// s64): int((o + u) * alpha) - int(u * alpha) with alpha = (in - k) / (out - 1) and u the plane's
// sample, the last window ending at the input's end; in the samples' dtype, each step rounded to
// it as CPU's scalar_t arithmetic is.
Value fractional_starts(hlo::Builder& b, const Value& u, int64_t in, int64_t out, int64_t k) {
  int64_t planes = u.type.dims[0];
  Value last = b.constant_int(in - k, {DType::kS64, {planes, 1}});
  if (out == 1) return last;
  DType t = u.type.dtype, acc = accumulator(t);
  Math m{b, low_precision(t)};
  Value uu = cast(b, u, acc), alpha = m.rounded(b.constant(static_cast<double>(in - k) / static_cast<double>(out - 1), {acc, {}}));
  Value o = b.iota({acc, {planes, out - 1}}, 1);
  Value at = b.convert(m.mul(m.add(o, b.broadcast_in_dim(uu, o.type.dims, {0})), b.broadcast_in_dim(alpha, o.type.dims, {})),
                       DType::kS64);
  Value base = b.broadcast_in_dim(b.convert(m.mul(uu, b.broadcast_in_dim(alpha, uu.type.dims, {})), DType::kS64), at.type.dims, {0});
  return b.concatenate({at - base, last}, 1);
}

// fractional_max_pool{2,3}d(self, kernel_size, output_size, random_samples) -> (out, indices).
// Samples are [batch, channels, n]: for 2-d pooling [.., 0] is the width's and [.., 1] the
// height's, for 3-d they follow the dims. Each plane's windows are gathered into
// [planes, out0, k0, out1, k1, ...] and reduced with CPU's max-with-index.
Values fractional_max_pool(LoweringContext& c, size_t n) {
  hlo::Builder& b = c.b;
  Value x = c.input(0);
  auto k = c.int_list(1), out = c.int_list(2);
  int64_t rank = x.type.rank(), lead = rank - static_cast<int64_t>(n), planes = 1;
  for (int64_t d = 0; d < lead; ++d) planes *= x.type.dims[d];
  std::vector<int64_t> flat = {planes}, gathered = {planes}, window_dims;
  for (size_t i = 0; i < n; ++i) {
    flat.push_back(x.type.dims[lead + i]);
    gathered.push_back(out[i]);
    gathered.push_back(k[i]);
    window_dims.push_back(2 + 2 * static_cast<int64_t>(i));
  }
  Value samples = b.reshape(c.input_uncast(3), {planes, static_cast<int64_t>(n)});
  std::vector<Value> coords = {b.broadcast_in_dim(b.iota({DType::kS64, {planes}}, 0), gathered, {0})};
  Value index = b.constant_int(0, {DType::kS64, gathered});
  int64_t stride = 1;
  for (size_t i = n; i-- > 0;) {
    int64_t column = n == 2 ? 1 - static_cast<int64_t>(i) : static_cast<int64_t>(i);
    Value u = b.reshape(b.slice(samples, {0, column}, {planes, column + 1}, {1, 1}), {planes});
    Value starts = fractional_starts(b, u, flat[i + 1], out[i], k[i]);
    int64_t od = 1 + 2 * static_cast<int64_t>(i);
    Value rows = b.broadcast_in_dim(starts, gathered, {0, od}) + b.iota({DType::kS64, gathered}, od + 1);
    coords.insert(coords.begin() + 1, rows);
    index = index + rows * b.constant_int(stride, rows.type);
    stride *= flat[i + 1];
  }
  std::vector<int64_t> with_vector = gathered, all, ones(n + 1, 1);
  with_vector.push_back(1);
  for (Value& v : coords) v = b.reshape(v, with_vector);
  for (size_t d = 0; d <= n; ++d) all.push_back(static_cast<int64_t>(d));
  Value values = b.gather(b.reshape(x, flat), b.concatenate(coords, static_cast<int64_t>(gathered.size())),
                          {{}, all, all, static_cast<int64_t>(gathered.size())}, ones, gathered);
  auto r = b.reduce({values, index}, max_init(b, x.type.dtype), window_dims, extreme_with_index(true, x.type.dtype));
  return {b.reshape(r[0], c.out(0).dims), b.reshape(r[1], c.out(1).dims)};
}

// The gradient of a pooling that reports indices: grad_output added at its index in the plane.
Value scatter_to_plane(hlo::Builder& b, const Value& g, const Value& x, const Value& idx, size_t n) {
  int64_t rank = x.type.rank(), lead = rank - static_cast<int64_t>(n);
  int64_t rows = 1, plane = 1, outs = 1;
  for (int64_t i = 0; i < lead; ++i) rows *= x.type.dims[i];
  for (int64_t i = lead; i < rank; ++i) plane *= x.type.dims[i], outs *= g.type.dims[i];
  Value row = b.reshape(b.iota({DType::kS64, {rows, outs}}, 0), {rows * outs, 1});
  Value col = b.reshape(cast(b, idx, DType::kS64), {rows * outs, 1});
  Value coords = b.concatenate({row, col}, 1);
  Value zeros = b.constant(0, {x.type.dtype, {rows, plane}});
  Value grad = b.scatter(zeros, coords, b.reshape(g, {rows * outs}), {{}, {0, 1}, {0, 1}, 1}, combine_with(BinaryOp::kAdd));
  return b.reshape(grad, x.type.dims);
}

Values max_pool_backward(LoweringContext& c, size_t n) {
  // (grad_output, self, kernel_size, stride, padding, dilation, ceil_mode, indices) -> grad_input
  return {scatter_to_plane(c.b, c.input(0), c.input(1), c.input_uncast(7), n)};
}

Values adaptive_max_pool_backward(LoweringContext& c, size_t n) {  // (grad_output, self, indices)
  return {scatter_to_plane(c.b, c.input(0), c.input(1), c.input_uncast(2), n)};
}

// Per-window element counts for average pooling, shaped like the output's spatial dims and
// broadcast to the output.
Value avg_divisor(LoweringContext& c, const Value& x, const std::vector<int64_t>& out_dims,
                  const std::vector<int64_t>& k, const std::vector<int64_t>& s, const std::vector<int64_t>& p,
                  bool count_include_pad, const c10::IValue& divisor_override) {
  DType t = x.type.dtype;
  if (!divisor_override.isNone()) return c.b.constant(static_cast<double>(divisor_override.toInt()), {t, out_dims});
  size_t n = k.size(), lead = x.type.dims.size() - n;
  std::vector<int64_t> plane(x.type.dims.begin() + lead, x.type.dims.end());
  std::vector<int64_t> ones_dims = plane;
  Pads pads = pool_padding(x, out_dims, k, s, std::vector<int64_t>(n, 1), p);
  if (count_include_pad)  // padding counts, the ceil_mode overhang does not
    for (size_t i = 0; i < n; ++i) {
      ones_dims[i] += 2 * p[i];
      pads[i] = {0, pads[i].second - p[i]};
    }
  Value ones = c.b.constant(1, {t, ones_dims});
  hlo::Window w = window(static_cast<int64_t>(n), k, s, std::vector<int64_t>(n, 1), pads);
  Value counts = c.b.reduce_window({ones}, {c.b.constant(0, {t, {}})}, w, combine_with(BinaryOp::kAdd))[0];
  std::vector<int64_t> trailing;
  for (size_t i = 0; i < n; ++i) trailing.push_back(static_cast<int64_t>(lead + i));
  return c.b.broadcast_in_dim(counts, out_dims, trailing);
}

Values avg_pool(LoweringContext& c, size_t n) {
  // (self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override), summed
  // and divided in f32 for bfloat16/half and rounded once, as CPU does
  Value x = cast(c.b, c.input(0), accumulator(c.out().dtype));
  auto k = per_dim(c, 1, n, 1), s = per_dim(c, 2, n, 0), p = per_dim(c, 3, n, 0);
  for (size_t i = 0; i < n; ++i) s[i] = s[i] == 0 ? k[i] : s[i];
  std::vector<int64_t> ones(n, 1);
  hlo::Window w = window(x.type.rank(), k, s, ones, pool_padding(x, c.out().dims, k, s, ones, p));
  Value sum = c.b.reduce_window({x}, {c.b.constant(0, {x.type.dtype, {}})}, w, combine_with(BinaryOp::kAdd))[0];
  return {sum / avg_divisor(c, x, c.out().dims, k, s, p, c.arg(5).toBool(), c.arg(6))};
}

Values avg_pool_backward(LoweringContext& c, size_t n) {
  // (grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
  Value g = cast(c.b, c.input(0), accumulator(c.out().dtype)), x = cast(c.b, c.input(1), g.type.dtype);
  auto k = per_dim(c, 2, n, 1), s = per_dim(c, 3, n, 0), p = per_dim(c, 4, n, 0);
  for (size_t i = 0; i < n; ++i) s[i] = s[i] == 0 ? k[i] : s[i];
  Value share = g / avg_divisor(c, x, g.type.dims, k, s, p, c.arg(6).toBool(), c.arg(7));
  // Every input position receives the shares of the windows covering it: spread the shares out
  // by the stride, pad by k-1, and sum windows of size k.
  int64_t rank = x.type.rank(), lead = rank - static_cast<int64_t>(n);
  std::vector<int64_t> low(rank, 0), high(rank, 0), interior(rank, 0);
  for (size_t i = 0; i < n; ++i) {
    low[lead + i] = high[lead + i] = k[i] - 1;
    interior[lead + i] = s[i] - 1;
  }
  Value spread = c.b.pad(share, c.b.constant(0, {g.type.dtype, {}}), low, high, interior);
  std::vector<int64_t> ones(n, 1);
  hlo::Window w = window(rank, k, ones, ones, Pads(n, {0, 0}));
  Value full = c.b.reduce_window({spread}, {c.b.constant(0, {g.type.dtype, {}})}, w, combine_with(BinaryOp::kAdd))[0];
  // `full` covers the padded input from 0; drop the padding (and grow when the tail was unused).
  std::vector<int64_t> grow_high(rank, 0), start(rank, 0), limit = x.type.dims, step(rank, 1);
  for (size_t i = 0; i < n; ++i) {
    int64_t have = full.type.dims[lead + i], need = p[i] + x.type.dims[lead + i];
    grow_high[lead + i] = std::max<int64_t>(need - have, 0);
    start[lead + i] = p[i];
    limit[lead + i] = need;
  }
  full = c.b.pad(full, c.b.constant(0, {g.type.dtype, {}}), std::vector<int64_t>(rank, 0), grow_high, std::vector<int64_t>(rank, 0));
  return {c.b.slice(full, start, limit, step)};
}

// Adaptive average pooling is separable: along each pooled dim, output bin i covers inputs
// [floor(i*in/out), ceil((i+1)*in/out)). A product with an [in, out] 0/1 matrix sums the bins;
// dividing by the bins' sizes dim by dim (CPU's sum / kh / kw) averages them.
struct Bins {
  Value members;  // [in, out]: 1 where input j is in bin i
  Value sizes;    // [out]
};

Bins bins(hlo::Builder& b, int64_t in, int64_t out, DType t) {
  Value i = b.iota({DType::kS64, {out}}, 0);
  auto k = [&](int64_t v) { return b.constant_int(v, i.type); };
  Value start = i * k(in) / k(out);
  Value end = ((i + k(1)) * k(in) + k(out - 1)) / k(out);
  Value j = b.iota({DType::kS64, {in, out}}, 0);
  Value inside = b.binary(BinaryOp::kAnd, b.compare(Compare::kGE, j, b.broadcast_in_dim(start, {in, out}, {1})),
                          b.compare(Compare::kLT, j, b.broadcast_in_dim(end, {in, out}, {1})));
  return {b.convert(inside, t), b.convert(end - start, t)};
}

// x divided, along each of its last `pooled` dims, by the sizes of the bins of an input of `in`.
Value divide_by_bin_sizes(hlo::Builder& b, Value x, const std::vector<int64_t>& in, int64_t pooled) {
  int64_t rank = x.type.rank();
  for (int64_t i = 0; i < pooled; ++i) {
    int64_t dim = rank - pooled + i;
    Value sizes = bins(b, in[dim], x.type.dims[dim], x.type.dtype).sizes;
    x = x / b.broadcast_in_dim(sizes, x.type.dims, {dim});
  }
  return x;
}

// Contracts dim `dim` of x with matrix m ([size(dim), n] or transposed), keeping dim order.
Value along(hlo::Builder& b, const Value& x, int64_t dim, const Value& m, bool transpose_m) {
  Value r = b.dot_general(x, m, {{}, {}, {dim}, {transpose_m ? 1 : 0}}, x.type.dtype, kExact);
  std::vector<int64_t> perm;  // the new dim comes last: move it back to `dim`
  int64_t rank = x.type.rank();
  for (int64_t d = 0; d < rank; ++d) perm.push_back(d < dim ? d : d == dim ? rank - 1 : d - 1);
  return b.transpose(r, perm);
}

// CPU's 3-D adaptive average of bfloat16/float16 sums each window in that dtype, one element at a
// time (depth, then height, then width), then divides by the depth, height and width of the
// window, rounding each time. Windows are gathered as [out, widest] per dimension (the padding
// adds zeros, which leaves a rounded sum as it is) and folded in that order.
Value adaptive_avg_pool3d_rounded(hlo::Builder& b, const Value& x, const std::vector<int64_t>& out, DType stored) {
  int64_t rank = x.type.rank(), lead = rank - 3;
  Value w = x;
  std::vector<Value> sizes;
  for (int64_t i = 0; i < 3; ++i) {
    int64_t dim = lead + 2 * i, in = x.type.dims[lead + i], n = out[i], widest = 0;
    for (int64_t o = 0; o < n; ++o) widest = std::max(widest, ((o + 1) * in + n - 1) / n - o * in / n);
    hlo::TensorType grid{DType::kS64, {n, widest}};
    Value start = b.iota(grid, 0) * b.constant_int(in, grid) / b.constant_int(n, grid);
    Value at = start + b.iota(grid, 1);
    Bins bin = bins(b, in, n, x.type.dtype);
    Value inside = b.compare(Compare::kLT, b.iota(grid, 1), b.broadcast_in_dim(b.convert(bin.sizes, DType::kS64), grid.dims, {0}));
    at = b.select(inside, at, b.constant(0, grid));
    std::vector<int64_t> split = w.type.dims;
    split[dim] = widest;
    split.insert(split.begin() + dim, n);
    Value taken = b.reshape(take_along(b, w, dim, b.reshape(at, {n * widest})), split);
    w = b.select(b.broadcast_in_dim(inside, split, {dim, dim + 1}), taken, b.constant(0, taken.type));
    sizes.push_back(bin.sizes);
  }
  // [lead..., od, kd, oh, kh, ow, kw] -> [lead..., od, oh, ow, kd * kh * kw]
  std::vector<int64_t> perm, folded;
  for (int64_t d = 0; d < lead; ++d) perm.push_back(d), folded.push_back(w.type.dims[d]);
  for (int64_t i = 0; i < 3; ++i) perm.push_back(lead + 2 * i), folded.push_back(out[i]);
  for (int64_t i = 0; i < 3; ++i) perm.push_back(lead + 2 * i + 1);
  int64_t taps = w.type.dims[lead + 1] * w.type.dims[lead + 3] * w.type.dims[lead + 5];
  folded.push_back(taps);
  Value flat = b.reshape(b.transpose(w, perm), folded);
  std::vector<int64_t> result = folded;
  result.pop_back();
  Value sum = counted_loop(b, taps, {b.constant(0, {x.type.dtype, result}), flat}, [&](hlo::Builder& lb, const Value& t, const Values& s) {
    return Values{rounded_to(lb, s[0] + slice_at(lb, s[1], rank, t), stored), s[1]};
  })[0];
  for (int64_t i = 0; i < 3; ++i)
    sum = rounded_to(b, sum / b.broadcast_in_dim(sizes[i], result, {lead + i}), stored);
  return sum;
}

Values adaptive_avg_pool(LoweringContext& c) {  // (self, output_size); in f32 for bfloat16/half, as CPU
  Value x = cast(c.b, c.input(0), accumulator(c.out().dtype));
  std::vector<int64_t> in = x.type.dims;
  auto out = c.int_list(1);
  int64_t pooled = static_cast<int64_t>(out.size()), lead = x.type.rank() - pooled;
  if (pooled == 3 && x.type.dtype != c.out().dtype) return {adaptive_avg_pool3d_rounded(c.b, x, out, c.out().dtype)};
  for (int64_t i = 0; i < pooled; ++i)
    x = along(c.b, x, lead + i, bins(c.b, in[lead + i], out[i], x.type.dtype).members, false);
  return {divide_by_bin_sizes(c.b, x, in, pooled)};
}

Values adaptive_avg_pool_backward(LoweringContext& c, int64_t pooled) {  // (grad_output, self)
  Value g = cast(c.b, c.input(0), accumulator(c.out().dtype)), x = c.input(1);
  int64_t rank = x.type.rank();
  g = divide_by_bin_sizes(c.b, g, x.type.dims, pooled);  // each input's share: CPU's grad / kh / kw
  for (int64_t dim = rank - pooled; dim < rank; ++dim)
    g = along(c.b, g, dim, bins(c.b, x.type.dims[dim], g.type.dims[dim], g.type.dtype).members, true);
  return {g};
}

// The geometry shared by im2col (unfold) and col2im (fold): kernel, dilation, padding, stride
// (arguments from `first` on) over an image of `size` with `channels` channels.
struct Patches {
  std::vector<int64_t> k, d, p, s;
  int64_t channels, hp, wp, blocks_h, blocks_w;

  Patches(const LoweringContext& c, size_t first, int64_t channels, const std::vector<int64_t>& size)
      : k(per_dim(c, first, 2, 1)), d(per_dim(c, first + 1, 2, 1)), p(per_dim(c, first + 2, 2, 0)),
        s(per_dim(c, first + 3, 2, 1)), channels(channels), hp(size[0] + 2 * p[0]), wp(size[1] + 2 * p[1]),
        blocks_h((hp - d[0] * (k[0] - 1) - 1) / s[0] + 1), blocks_w((wp - d[1] * (k[1] - 1) - 1) / s[1] + 1) {}

  int64_t rows() const { return channels * k[0] * k[1]; }
  int64_t blocks() const { return blocks_h * blocks_w; }
  // Position in the flattened padded image [channels, hp, wp] of every (row, block) element of
  // the columns [channels * kh * kw, blocks], as a [rows * blocks, 1] index constant.
  Value positions(hlo::Builder& b) const {
    int64_t kk = k[0] * k[1], l = blocks();
    std::vector<int64_t> target(rows() * l);
    for (int64_t r = 0; r < rows(); ++r)
      for (int64_t blk = 0; blk < l; ++blk) {
        int64_t channel = r / kk, ki = (r % kk) / k[1], kj = r % k[1];
        int64_t y = (blk / blocks_w) * s[0] + ki * d[0], x = (blk % blocks_w) * s[1] + kj * d[1];
        target[r * l + blk] = channel * hp * wp + y * wp + x;
      }
    return b.constant_bytes(target.data(), {DType::kS64, {rows() * l, 1}});
  }
};

// col2im (fold): sums every patch column back into its place in a zero-padded image.
Values col2im(LoweringContext& c) {
  // (self [N, C*kh*kw, L] or [C*kh*kw, L], output_size, kernel_size, dilation, padding, stride)
  Value cols = c.input(0);
  bool batched = cols.type.rank() == 3;
  if (!batched) cols = c.b.reshape(cols, {1, cols.type.dims[0], cols.type.dims[1]});
  auto out = c.int_list(1);
  int64_t n = cols.type.dims[0], ckk = cols.type.dims[1], l = cols.type.dims[2];
  auto k = per_dim(c, 2, 2, 1);
  Patches g(c, 2, ckk / (k[0] * k[1]), out);
  Value zeros = c.b.constant(0, {cols.type.dtype, {n, g.channels * g.hp * g.wp}});
  Value summed = c.b.scatter(zeros, g.positions(c.b), c.b.reshape(cols, {n, ckk * l}), {{0}, {1}, {1}, 1},
                             combine_with(BinaryOp::kAdd));
  Value image = c.b.slice(c.b.reshape(summed, {n, g.channels, g.hp, g.wp}), {0, 0, g.p[0], g.p[1]},
                          {n, g.channels, g.p[0] + out[0], g.p[1] + out[1]}, {1, 1, 1, 1});
  return {batched ? image : c.b.reshape(image, {g.channels, out[0], out[1]})};
}

// im2col (unfold): every patch of the zero-padded image as a column, read with one gather.
Values im2col(LoweringContext& c) {
  // (self [N, C, H, W] or [C, H, W], kernel_size, dilation, padding, stride)
  Value x = c.input(0);
  bool batched = x.type.rank() == 4;
  if (!batched) x = c.b.reshape(x, {1, x.type.dims[0], x.type.dims[1], x.type.dims[2]});
  int64_t n = x.type.dims[0];
  Patches g(c, 1, x.type.dims[1], {x.type.dims[2], x.type.dims[3]});
  Value padded = c.b.pad(x, c.scalar(0, x.type.dtype), {0, 0, g.p[0], g.p[1]}, {0, 0, g.p[0], g.p[1]}, {0, 0, 0, 0});
  Value flat = c.b.reshape(padded, {n, g.channels * g.hp * g.wp});
  int64_t count = g.rows() * g.blocks();
  Value cols = c.b.gather(flat, g.positions(c.b), {{0}, {1}, {1}, 1}, {n, 1}, {n, count});
  return {c.b.reshape(cols, batched ? std::vector<int64_t>{n, g.rows(), g.blocks()}
                                    : std::vector<int64_t>{g.rows(), g.blocks()})};
}

// max_unpool2d / 3d (self, indices, output_size, ...): each value written to its index in the
// flattened output plane of its (batch, channel), the rest zero.
Values max_unpool(LoweringContext& c, size_t spatial) {
  Value x = c.input(0), index = cast(c.b, c.input_uncast(1), DType::kS64);
  auto out_size = c.int_list(2);
  int64_t plane = 1, rank = x.type.rank();
  for (int64_t v : out_size) plane *= v;
  int64_t planes = 1, per_plane = 1;
  for (int64_t d = 0; d < rank; ++d) (d < rank - static_cast<int64_t>(spatial) ? planes : per_plane) *= x.type.dims[d];
  Value local = c.b.reshape(index, {planes, per_plane});
  c.check_on_device(all_in_range(c.b, local, plane));
  Value base = c.b.iota({DType::kS64, {planes, per_plane}}, 0) * c.b.constant_int(plane, {DType::kS64, {planes, per_plane}});
  Value target = c.b.reshape(base + local, {planes * per_plane, 1});
  Value zeros = c.b.constant(0, {x.type.dtype, {planes * plane}});
  auto replace = [](hlo::Builder&, const std::vector<Value>& a) { return Values{a[1]}; };
  Value written = c.b.scatter(zeros, target, c.b.reshape(x, {planes * per_plane}), {{}, {0}, {0}, 1}, replace);
  return {c.b.reshape(written, c.out().dims)};
}

// Convolution results are contiguous, gradients included (PyTorch's meta kernel makes the
// gradients like the input and weight): what torch.compile's fake tensors say for a device whose
// convolution backend PyTorch does not know, so eager and compiled code see the same strides.
std::vector<c10::IValue> contiguous_gradients(const c10::FunctionSchema& schema, const std::vector<c10::IValue>& args) {
  std::vector<c10::IValue> returns = meta_kernel(schema.name(), schema.overload_name(), args);
  if (!schema.overload_name().empty()) return returns;  // out=: the caller's tensors
  for (c10::IValue& r : returns)
    if (r.isTensor() && r.toTensor().defined()) r = r.toTensor().contiguous();
  return returns;
}

}  // namespace

TORCHTPU_LOWERINGS(conv_pool) {
  register_lowering({"col2im", "col2im.out"}, col2im);
  register_lowering({"im2col", "im2col.out"}, im2col);
  LoweringOptions unpool = checked_runtime("max_unpool: Found an invalid max index");
  register_lowering({"max_unpool2d", "max_unpool2d.out"}, [](LoweringContext& c) { return max_unpool(c, 2); }, unpool);
  register_lowering({"max_unpool3d", "max_unpool3d.out"}, [](LoweringContext& c) { return max_unpool(c, 3); }, unpool);
  register_lowering({"convolution", "convolution.out"}, convolution, matmul_op());
  LoweringOptions conv_backward = matmul_op();
  conv_backward.meta = contiguous_gradients;
  register_lowering({"convolution_backward", "convolution_backward.out"}, convolution_backward, conv_backward);
  for (size_t n : {2, 3}) {
    std::string d = std::to_string(n) + "d";
    auto with_n = [n](Values (*fn)(LoweringContext&, size_t)) {
      return [n, fn](LoweringContext& c) { return fn(c, n); };
    };
    std::string mp = "max_pool" + d + "_with_indices", mpo = mp + ".out";
    std::string mpb = mp + "_backward", mpbo = mpb + ".grad_input";
    std::string ap = "avg_pool" + d, apo = ap + ".out", apb = ap + "_backward", apbo = apb + ".grad_input";
    register_lowering({mp.c_str(), mpo.c_str()}, with_n(max_pool_with_indices));
    register_lowering({mpb.c_str(), mpbo.c_str()}, with_n(max_pool_backward));
    register_lowering({ap.c_str(), apo.c_str()}, with_n(avg_pool));
    register_lowering({apb.c_str(), apbo.c_str()}, with_n(avg_pool_backward));
    std::string amp = "adaptive_max_pool" + d, ampo = amp + ".out", ampb = amp + "_backward", ampbo = ampb + ".grad_input";
    register_lowering({amp.c_str(), ampo.c_str()}, adaptive_max_pool);
    register_lowering({ampb.c_str(), ampbo.c_str()}, with_n(adaptive_max_pool_backward));
    std::string fmp = "fractional_max_pool" + d, fmpo = fmp + ".output", fmpb = fmp + "_backward",
                fmpbo = fmpb + ".grad_input";
    register_lowering({fmp.c_str(), fmpo.c_str()}, with_n(fractional_max_pool));
    register_lowering({fmpb.c_str(), fmpbo.c_str()}, [n](LoweringContext& c) {
      // (grad_output, self, kernel_size, output_size, indices) -> grad_input
      return Values{scatter_to_plane(c.b, c.input(0), c.input(1), c.input_uncast(4), n)};
    }, with_meta(shaped_like(1)));
  }
  register_lowering({"_adaptive_avg_pool2d", "_adaptive_avg_pool2d.out", "_adaptive_avg_pool3d",
                     "_adaptive_avg_pool3d.out"}, adaptive_avg_pool);
  register_lowering({"_adaptive_avg_pool2d_backward", "_adaptive_avg_pool2d_backward.out"},
                    [](LoweringContext& c) { return adaptive_avg_pool_backward(c, 2); });
  register_lowering({"_adaptive_avg_pool3d_backward"}, [](LoweringContext& c) { return adaptive_avg_pool_backward(c, 3); });
  // its out= form (spelled without the underscore) has no meta kernel in PyTorch
  register_lowering({"adaptive_avg_pool3d_backward.grad_input"},
                    [](LoweringContext& c) { return adaptive_avg_pool_backward(c, 3); }, with_meta(shaped_like(1)));
}

}  // namespace torchtpu::aten
