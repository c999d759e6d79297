// Reductions: sum, mean, prod, amax/amin, max/min (with indices), argmax/argmin, var/std, any/all,
// logsumexp, vector norms. Low-precision floats accumulate in f32, as PyTorch does on CPU.
#include <ATen/ops/empty.h>

#include <cmath>
#include <cstdint>

#include "aten/lowering.h"
#include "aten/ops/lowering_util.h"
#include "aten/ops/math.h"

namespace torchtpu::aten {
namespace {

// Passed instead of an argument index by ops that always reduce every dimension.
constexpr size_t kAll = SIZE_MAX;

// The dimensions argument `i` names (None or [] means all), made non-negative and sorted.
std::vector<int64_t> reduced_dims(const LoweringContext& c, size_t i, int64_t rank) {
  if (rank == 0) return {};  // a 0-d tensor reduced over "dim 0" is itself
  std::vector<int64_t> dims;
  if (i != kAll && !c.arg(i).isNone()) dims = c.int_list(i);
  if (dims.empty())
    for (int64_t d = 0; d < rank; ++d) dims.push_back(d);
  for (int64_t& d : dims) d = d < 0 ? d + rank : d;
  std::sort(dims.begin(), dims.end());
  return dims;
}

Value reduce(LoweringContext& c, const Value& x, const std::vector<int64_t>& dims, BinaryOp op,
             double init) {
  return c.b.reduce({x}, {c.scalar(init, x.type.dtype)}, dims, combine_with(op))[0];
}

int64_t count(const Value& x, const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= x.type.dims[d];
  return n;
}

// Reshape to output i's dims (restores kept dimensions) and cast to its dtype.
Value finish(LoweringContext& c, const Value& v, size_t i = 0) {
  return c.b.reshape(cast(c.b, v, c.out(i).dtype), c.out(i).dims);
}

// Sum over dims of argument 0 after casting to the accumulator of the output dtype.
Value sum_of(LoweringContext& c, const Value& x, const std::vector<int64_t>& dims) {
  return reduce(c, cast(c.b, x, accumulator(c.out().dtype)), dims, BinaryOp::kAdd, 0);
}

// Where a max (min) reduction starts: the lowest (highest) value of the type; constants saturate
// to the type's range, except bools, where any nonzero constant is true.
Value extreme_identity(LoweringContext& c, DType t, bool is_max) {
  if (t == DType::kBool) return c.scalar(is_max ? 0 : 1, t);
  return c.scalar(is_max ? -INFINITY : INFINITY, t);
}

// Index and value of the max (or min) along one dimension; NaN wins, ties take the first index.
std::pair<Value, Value> arg_extreme(LoweringContext& c, const Value& x, int64_t dim, bool is_max) {
  DType t = x.type.dtype;
  Value idx = c.b.iota({DType::kS64, x.type.dims}, dim);
  auto body = extreme_with_index(is_max, t);
  auto r = c.b.reduce({x, idx}, {extreme_identity(c, t, is_max), c.scalar(0, DType::kS64)}, {dim}, body);
  return {r[0], r[1]};
}

// CPU checks what PyTorch's meta kernels do not: a max or min over an empty dimension has no
// answer. `dims_arg` is the argument naming the dimension(s), or kAll; `flat_is_index_error` says
// which class CPU raises when every dimension of an empty tensor is reduced.
MetaFn nonempty_reduction(const char* op, size_t dims_arg, bool flat_is_index_error) {
  return checked_meta([=](const std::vector<c10::IValue>& args) {
    const at::Tensor& x = args[0].toTensor();
    std::vector<int64_t> dims;
    if (dims_arg != kAll && args[dims_arg].isInt()) dims = {args[dims_arg].toInt()};
    if (dims_arg != kAll && args[dims_arg].isIntList()) dims = args[dims_arg].toIntVector();
    if (dims.empty() && x.numel() == 0) {
      std::string message = std::string(op) + "(): Expected reduction dim to be specified for input.numel() == 0.";
      if (flat_is_index_error) TORCH_CHECK_INDEX(false, message);
      TORCH_CHECK(false, message, " Specify the reduction dim with the 'dim' argument.");
    }
    for (int64_t d : dims) {
      int64_t wrapped = c10::maybe_wrap_dim(d, x.dim());  // IndexError for a bad dim, as CPU
      TORCH_CHECK_INDEX(x.dim() == 0 || x.size(wrapped) != 0, op, "(): Expected reduction dim ", wrapped,
                        " to have non-zero size.");
    }
  });
}

// Means and moments on a padded call: zeros in the padding, and the exact sizes (the count of
// elements, and which positions are theirs) as program inputs.
PaddingRule counted() {
  PaddingRule rule{exec::Fill::kZero};
  rule.needs_sizes = true;
  return rule;
}

// var and std: the correction is static, and CPU takes only floating and complex inputs.
LoweringOptions floating_moments() {
  LoweringOptions o;
  o.padding = counted();
  o.static_scalars = {2};
  o.meta = checked_meta([](const std::vector<c10::IValue>& args) {
    c10::ScalarType t = args[0].toTensor().scalar_type();
    TORCH_CHECK(at::isFloatingType(t) || at::isComplexType(t),
                "std and var only support floating point and complex dtypes");
  });
  return o;
}

// PyTorch's meta kernel keeps a reduced dimension of size 1 (CPU drops it, as for any other size).
std::vector<c10::IValue> vector_norm_meta(const c10::FunctionSchema&, const std::vector<c10::IValue>& args) {
  const at::Tensor& x = args[0].toTensor();
  TORCH_CHECK(at::isFloatingType(x.scalar_type()) || at::isComplexType(x.scalar_type()),
              "linalg.vector_norm: Expected a floating point or complex tensor as input. Got ", x.scalar_type());
  std::vector<int64_t> dims = args[2].isNone() ? std::vector<int64_t>{} : args[2].toIntVector();
  bool keepdim = args[3].toBool();
  std::vector<bool> reduced(x.dim(), dims.empty());
  for (int64_t d : dims) {
    int64_t wrapped = c10::maybe_wrap_dim(d, x.dim());  // raises IndexError as CPU (0-d: [-1, 0])
    if (x.dim() > 0) reduced[wrapped] = true;
  }
  std::vector<int64_t> sizes;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (!reduced[d] || keepdim) sizes.push_back(reduced[d] ? 1 : x.size(d));
  // A norm is real: a complex dtype= names its real counterpart, as on CPU.
  c10::ScalarType dtype = c10::toRealValueType(args[4].isNone() ? x.scalar_type() : args[4].toScalarType());
  if (args.size() > 5 && args[5].isTensor()) {  // out=: resized to the result
    at::Tensor out = args[5].toTensor();
    out.resize_(sizes);
    return {out};
  }
  return {at::empty(sizes, x.options().dtype(dtype))};
}

Lowering sum_lowering(size_t dims_arg) {
  return [dims_arg](LoweringContext& c) {
    Value x = c.input_uncast(0);
    return Values{finish(c, sum_of(c, x, reduced_dims(c, dims_arg, x.type.rank())))};
  };
}

// How many elements of x a reduction over `dims` averages, shaped like `like`: on a padded call, the
// product of the exact sizes (the box's zeros add nothing to the sum, and must not to the count).
Value averaged_count(LoweringContext& c, const Value& x, const std::vector<int64_t>& dims, const Value& like) {
  if (!c.padded()) return c.full(static_cast<double>(count(x, dims)), like);
  Value n = c.b.constant(1, {DType::kS64, {}});
  for (int64_t d : dims) n = n * c.exact_size(0, d);
  return c.b.broadcast_in_dim(cast(c.b, n, like.type.dtype), like.type.dims, {});
}

Lowering mean_lowering(size_t dims_arg) {
  return [dims_arg](LoweringContext& c) {
    Value x = c.input_uncast(0);
    auto dims = reduced_dims(c, dims_arg, x.type.rank());
    Value s = sum_of(c, x, dims);
    return Values{finish(c, s / averaged_count(c, x, dims, s))};
  };
}

Lowering extreme(bool is_max, size_t dims_arg) {
  return [is_max, dims_arg](LoweringContext& c) {
    Value x = c.input_uncast(0);
    auto dims = reduced_dims(c, dims_arg, x.type.rank());
    BinaryOp op = is_max ? BinaryOp::kMaximum : BinaryOp::kMinimum;
    return Values{finish(c, c.b.reduce({x}, {extreme_identity(c, x.type.dtype, is_max)}, dims, nan_extreme_with(op))[0])};
  };
}

Lowering extreme_with_index(bool is_max) {
  return [is_max](LoweringContext& c) {
    Value x = c.input_uncast(0);
    int64_t dim = c.arg(1).toInt();
    if (dim < 0) dim += std::max<int64_t>(x.type.rank(), 1);
    if (x.type.rank() == 0) return Values{x, c.b.constant(0, {DType::kS64, {}})};
    auto [value, index] = arg_extreme(c, x, dim, is_max);
    return Values{finish(c, value, 0), finish(c, index, 1)};
  };
}

Lowering arg_lowering(bool is_max) {
  return [is_max](LoweringContext& c) {
    Value x = c.input_uncast(0);
    if (c.arg(1).isNone()) {  // over the flattened tensor
      x = c.b.reshape(x, {x.type.element_count()});
      return Values{finish(c, arg_extreme(c, x, 0, is_max).second)};
    }
    int64_t dim = c.arg(1).toInt();
    if (x.type.rank() == 0) return Values{c.b.constant(0, {DType::kS64, {}})};
    if (dim < 0) dim += x.type.rank();
    return Values{finish(c, arg_extreme(c, x, dim, is_max).second)};
  };
}

// On a padded call: the mean of the elements inside the exact sizes (the box's zeros add nothing to
// its sum) and the sum of their squared deviations (the padding's, which would be the mean's, are
// masked out), over the exact count.
struct PaddedMoments {
  Value mean, squares, count;
};
PaddedMoments padded_moments(LoweringContext& c, const Value& x, const std::vector<int64_t>& dims) {
  Math m{c.b};
  Value sum = m.compensated_sum(x, dims);
  Value mean = sum / averaged_count(c, x, dims, sum);
  Value deviation = c.b.select(c.inside(0), x - m.expand_back(mean, x, dims), c.full(0, x));
  Value squares = m.compensated_sum(abs_squared(c.b, deviation), dims);
  return {mean, squares, averaged_count(c, x, dims, squares)};
}

// var/std with a correction (Bessel's by default); complex input gives a real variance.
Value variance(LoweringContext& c, const Value& x_in, const std::vector<int64_t>& dims, double correction) {
  Value x = is_complex(x_in.type.dtype) ? x_in : cast(c.b, x_in, accumulator(c.out().dtype));
  if (c.padded()) {
    PaddedMoments p = padded_moments(c, x, dims);
    Value divisor = c.b.binary(BinaryOp::kMaximum, p.count - c.full(correction, p.count), c.full(0, p.count));
    return p.squares / divisor;
  }
  double n = static_cast<double>(count(x, dims));
  Value biased = Math{c.b}.moments(x, dims).second;
  return biased * c.full(n / std::max(n - correction, 0.0), biased);
}

double correction_of(const LoweringContext& c, size_t i) {
  return c.arg(i).isNone() ? 1.0 : c.arg(i).toScalar().toDouble();
}

Lowering boolean_reduce(BinaryOp op, size_t dims_arg) {
  return [op, dims_arg](LoweringContext& c) {
    Value x = c.input_uncast(0);
    Value truth = x.type.dtype == DType::kBool ? x : c.b.compare(Compare::kNE, x, c.full(0, x));
    auto dims = reduced_dims(c, dims_arg, x.type.rank());
    return Values{finish(c, reduce(c, truth, dims, op, op == BinaryOp::kAnd ? 1 : 0))};
  };
}

// histc(self, bins, min, max): counts of the elements in `bins` equal-width bins over [min, max]
// (the data's own range when min == max); others, and NaNs, are not counted. min and max are
// runtime values, so the choice is made in the program. CPU computes a bfloat16/float16 element's
// bin in that dtype, rounding each step (an element near a bin edge can change bins): so does this.
Values histc(LoweringContext& c) {
  DType dtype = c.out().dtype, math = is_floating(dtype) ? accumulator(dtype) : DType::kF64;
  Math m{c.b, low_precision(dtype)};
  int64_t bins = c.arg(1).toInt();
  Value x = cast(c.b, c.input_uncast(0), math);
  int64_t n = x.type.element_count();
  x = c.b.reshape(x, {n});
  Value lo = m.rounded(c.input_as(2, math)), hi = m.rounded(c.input_as(3, math));
  Value from_data = c.b.compare(Compare::kEQ, lo, hi);
  if (n > 0) {
    lo = c.b.select(from_data, m.reduce(x, {0}, BinaryOp::kMinimum, INFINITY), lo);
    hi = c.b.select(from_data, m.reduce(x, {0}, BinaryOp::kMaximum, -INFINITY), hi);
  }
  Value same = c.b.compare(Compare::kEQ, lo, hi);  // one value: widen by 1 on each side, as PyTorch
  lo = c.b.select(same, m.sub(lo, m.k(1, lo)), lo);
  hi = c.b.select(same, m.add(hi, m.k(1, hi)), hi);
  Value lo_b = broadcast_to(c.b, lo, {n}), hi_b = broadcast_to(c.b, hi, {n});
  Value scaled = m.div(m.mul(m.sub(x, lo_b), m.k(static_cast<double>(bins), x)), m.sub(hi_b, lo_b));
  Value bin = c.b.convert(c.b.unary(UnaryOp::kFloor, scaled), DType::kS64);
  bin = c.b.binary(BinaryOp::kMinimum, bin, c.b.constant_int(bins - 1, bin.type));  // x == max: last bin
  Value inside = c.b.binary(BinaryOp::kAnd, c.b.compare(Compare::kGE, x, lo_b), c.b.compare(Compare::kLE, x, hi_b));
  bin = c.b.select(inside, bin, c.b.constant_int(bins, bin.type));  // out of range: dropped by the scatter
  Value counts = c.b.scatter(c.b.constant(0, {math, {bins}}), c.b.reshape(bin, {n, 1}), c.b.constant(1, {math, {n}}),
                             {{}, {0}, {0}, 1}, combine_with(BinaryOp::kAdd));
  return {counts};
}

// histogram has no meta kernel: hist [bins] and bin_edges [bins + 1] in self's dtype, after the
// argument checks CPU makes.
std::vector<c10::IValue> histogram_meta(const c10::FunctionSchema& schema, const std::vector<c10::IValue>& args) {
  const at::Tensor& self = args[0].toTensor();
  bool given_edges = args[1].isTensor();
  TORCH_CHECK(self.is_floating_point(), "torch.histogram: input tensor should be floating point, got ", self.scalar_type());
  int64_t bins = given_edges ? args[1].toTensor().numel() - 1 : args[1].toInt();
  TORCH_CHECK(bins > 0, "torch.histogram(): bins must be > 0, but got ", bins);
  if (given_edges) {
    TORCH_CHECK(args[1].toTensor().dim() == 1 && args[1].toTensor().scalar_type() == self.scalar_type(),
                "torch.histogram(): bins must be a 1-d tensor of the input's dtype");
  } else if (!args[2].isNone()) {
    auto range = args[2].toDoubleVector();
    TORCH_CHECK(range.size() == 2 && range[0] <= range[1] && std::isfinite(range[0]) && std::isfinite(range[1]),
                "torch.histogram(): range must be two finite values, min <= max");
  }
  size_t weight = given_edges ? 2 : 3;
  if (!args[weight].isNone())
    TORCH_CHECK(args[weight].toTensor().sizes() == self.sizes(), "torch.histogram(): weight should have the same shape as input");
  std::vector<c10::IValue> out;
  for (int64_t size : {bins, bins + 1}) {
    bool out_form = args.size() > weight + 2;
    at::Tensor t = out_form ? args[weight + 2 + out.size()].toTensor() : at::empty({size}, self.options());
    if (out_form) t.resize_({size});
    out.push_back(t);
  }
  return out;
}

// Element i of a 1-d value, as a 0-d value.
Value take_slice_1d(hlo::Builder& b, const Value& v, int64_t i) { return b.reshape(b.slice(v, {i}, {i + 1}, {1}), {}); }

// bins + 1 edges evenly over [lo, hi] (x's min and max when no range is given; a single value
// widened by 0.5 on each side; no data: [0, 1]), built as linspace is.
Value linear_edges(LoweringContext& c, const Value& x, int64_t bins, const c10::IValue& range, size_t range_at) {
  Math m{c.b};
  DType t = x.type.dtype;
  int64_t n = x.type.element_count();
  Value lo, hi;
  if (!range.isNone()) {
    auto r = range.toDoubleVector();
    lo = c.scalar(r[range_at], t), hi = c.scalar(r[range_at + 1], t);
  } else {
    lo = n ? m.reduce(x, {0}, BinaryOp::kMinimum, INFINITY) : c.scalar(0, t);
    hi = n ? m.reduce(x, {0}, BinaryOp::kMaximum, -INFINITY) : c.scalar(1, t);
  }
  Value same = c.b.compare(Compare::kEQ, lo, hi);
  lo = c.b.select(same, lo - m.k(0.5, lo), lo);
  hi = c.b.select(same, hi + m.k(0.5, hi), hi);
  Value i = c.b.convert(c.b.iota({DType::kS64, {bins + 1}}, 0), t);
  Value step = broadcast_to(c.b, (hi - lo) / m.k(static_cast<double>(bins), lo), {bins + 1});
  Value from_lo = broadcast_to(c.b, lo, {bins + 1}) + step * i;
  Value from_hi = broadcast_to(c.b, hi, {bins + 1}) - step * (m.k(static_cast<double>(bins), i) - i);
  return c.b.select(c.b.compare(Compare::kLT, i, m.k(static_cast<double>((bins + 1) / 2), i)), from_lo, from_hi);
}

// The bin of each element of x (1-d) among the sorted `edges`: (number of edges <= x) - 1, the
// last edge inclusive; `bins` (one past the last) for elements outside [first, last] and NaNs.
Value bin_of(hlo::Builder& b, const Value& x, const Value& edges) {
  Math m{b};
  int64_t n = x.type.element_count(), bins = edges.type.dims[0] - 1;
  Value xt = cast(b, x, edges.type.dtype);
  Value xs = b.broadcast_in_dim(xt, {n, bins + 1}, {0}), es = b.broadcast_in_dim(edges, {n, bins + 1}, {1});
  Value bin = m.sum(b.convert(b.compare(Compare::kGE, xs, es), DType::kS64), {1}) - b.constant(1, {DType::kS64, {n}});
  bin = b.binary(BinaryOp::kMinimum, bin, b.constant_int(bins - 1, bin.type));
  Value first = b.broadcast_in_dim(take_slice_1d(b, edges, 0), {n}, {});
  Value last = b.broadcast_in_dim(take_slice_1d(b, edges, bins), {n}, {});
  Value inside = b.binary(BinaryOp::kAnd, b.compare(Compare::kGE, xt, first), b.compare(Compare::kLE, xt, last));
  return b.select(inside, bin, b.constant_int(bins, bin.type));
}

Value column_of(hlo::Builder& b, const Value& points, int64_t d) {
  int64_t n = points.type.dims[0];
  return b.reshape(b.slice(points, {0, d}, {n, d + 1}, {1, 1}), {n});
}

// The (weighted) count of the points (rows of [N, D]) per cell of the D-dimensional grid of
// `edges`, divided by the total and the cell volumes when `density` (no data: 0 / 0, as CPU).
Value count_into_cells(LoweringContext& c, const Value& points, const std::vector<Value>& edges, size_t weight_arg,
                       bool density) {
  Math m{c.b};
  DType t = edges[0].type.dtype;
  int64_t n = points.type.dims[0], cells = 1;
  std::vector<int64_t> shape;
  for (const Value& e : edges) shape.push_back(e.type.dims[0] - 1);
  for (int64_t s : shape) cells *= s;
  Value flat = c.b.constant(0, {DType::kS64, {n}}), outside = c.b.constant(0, {DType::kBool, {n}});
  for (size_t d = 0; d < edges.size(); ++d) {  // row-major cell index; a coordinate outside drops the point
    Value bin = bin_of(c.b, column_of(c.b, points, static_cast<int64_t>(d)), edges[d]);
    outside = c.b.binary(BinaryOp::kOr, outside, c.b.compare(Compare::kEQ, bin, c.b.constant_int(shape[d], bin.type)));
    flat = flat * c.b.constant_int(shape[d], flat.type) + bin;
  }
  flat = c.b.select(outside, c.b.constant_int(cells, flat.type), flat);  // dropped by the scatter
  Value weights = c.has(weight_arg) ? c.b.reshape(cast(c.b, c.input_uncast(weight_arg), t), {n}) : c.b.constant(1, {t, {n}});
  Value counts = c.b.scatter(c.b.constant(0, {t, {cells}}), c.b.reshape(flat, {n, 1}), weights, {{}, {0}, {0}, 1},
                             combine_with(BinaryOp::kAdd));
  Value hist = c.b.reshape(counts, shape);
  if (!density) return hist;
  hist = hist / c.b.broadcast_in_dim(m.sum(counts, {0}), shape, {});
  for (size_t d = 0; d < edges.size(); ++d) {
    int64_t b = shape[d];
    Value widths = c.b.slice(edges[d], {1}, {b + 1}, {1}) - c.b.slice(edges[d], {0}, {b}, {1});
    hist = hist / c.b.broadcast_in_dim(widths, shape, {static_cast<int64_t>(d)});
  }
  return hist;
}

// histogramdd's points: its input [..., D] as [N, D].
Value points_of(LoweringContext& c) {
  Value x = c.input_uncast(0);
  int64_t d = x.type.dims.back();
  return c.b.reshape(x, {d ? x.type.element_count() / d : 0, d});
}

// The linear edges of each dimension (_histogramdd_bin_edges, _histogramdd_from_bin_cts: self,
// bins, range, weight, density).
std::vector<Value> histogramdd_edges(LoweringContext& c, const Value& points) {
  std::vector<int64_t> bins = c.int_list(1);
  std::vector<Value> edges;
  for (size_t d = 0; d < bins.size(); ++d)
    edges.push_back(linear_edges(c, column_of(c.b, points, static_cast<int64_t>(d)), bins[d], c.arg(2), 2 * d));
  return edges;
}

// histogramdd has no meta kernels: the edges (one [bins + 1] per dimension) or the counts
// ([bins...]), after CPU's checks.
MetaFn histogramdd_meta(bool edges_out) {
  return [edges_out](const c10::FunctionSchema&, const std::vector<c10::IValue>& args) {
    const at::Tensor& self = args[0].toTensor();
    TORCH_CHECK(self.dim() >= 2, "torch.histogramdd: input tensor should have at least 2 dimensions, but got ", self.dim());
    std::vector<int64_t> bins;
    if (args[1].isIntList()) {
      bins = args[1].toIntVector();
    } else {
      for (const at::Tensor& e : args[1].toTensorVector()) bins.push_back(e.numel() - 1);
    }
    TORCH_CHECK(static_cast<int64_t>(bins.size()) == self.size(-1), "torch.histogramdd: expected ", self.size(-1),
                " sequences of bin edges for each of the ", self.size(-1), " input dimensions, but got ", bins.size());
    for (int64_t b : bins) TORCH_CHECK(b > 0, "torch.histogramdd(): bins must be > 0, but got ", b);
    if (!edges_out) return std::vector<c10::IValue>{at::empty(bins, self.options())};
    std::vector<at::Tensor> edges;
    for (int64_t b : bins) edges.push_back(at::empty({b + 1}, self.options()));
    return std::vector<c10::IValue>{c10::IValue(edges)};
  };
}

// histogram(self, bins, range / edges, weight, density) -> (hist, bin_edges), as CPU's
// histogramdd kernel counts: element x falls in bin (number of edges <= x) - 1, the last edge
// inclusive, elements outside [first edge, last edge] (and NaNs) not counted.
Values histogram(LoweringContext& c) {
  DType t = c.out(0).dtype;
  int64_t bins = c.out(0).dims[0];
  Value x = c.b.reshape(c.input_uncast(0), {c.input_uncast(0).type.element_count()});
  int64_t n = x.type.element_count();
  bool given_edges = c.arg(1).isTensor();
  size_t weight_arg = given_edges ? 2 : 3, density_arg = weight_arg + 1;
  Value edges = given_edges ? cast(c.b, c.input_uncast(1), t) : linear_edges(c, x, bins, c.arg(2), 0);
  Value points = c.b.reshape(cast(c.b, x, t), {n, 1});
  return {count_into_cells(c, points, {edges}, weight_arg, c.arg(density_arg).toBool()), edges};
}

}  // namespace

TORCHTPU_LOWERINGS(reduction) {
  register_lowering({"histc", "histc.out"}, histc);
  register_lowering({"histogram.bin_ct", "histogram.bin_ct_out", "histogram.bins_tensor", "histogram.bins_tensor_out"},
                    histogram, with_meta(histogram_meta));
  register_lowering({"_histogramdd_bin_edges", "_histogramdd_bin_edges.out"}, [](LoweringContext& c) {
    return histogramdd_edges(c, points_of(c));
  }, with_meta(histogramdd_meta(true)));
  register_lowering({"_histogramdd_from_bin_cts", "_histogramdd_from_bin_cts.out"}, [](LoweringContext& c) {
    Value points = points_of(c);
    return Values{count_into_cells(c, points, histogramdd_edges(c, points), 3, c.arg(4).toBool())};
  }, with_meta(histogramdd_meta(false)));
  register_lowering({"_histogramdd_from_bin_tensors", "_histogramdd_from_bin_tensors.out"}, [](LoweringContext& c) {
    Value points = points_of(c);
    std::vector<Value> edges;
    for (const Value& e : c.list(1)) edges.push_back(cast(c.b, e, points.type.dtype));
    return Values{count_into_cells(c, points, edges, 2, c.arg(3).toBool())};
  }, with_meta(histogramdd_meta(false)));
  // hash_tensor(self, dim, keepdim, mode=0): the XOR of the elements' 64-bit patterns, integers
  // (and bools) as int64, floats as float64 (so float32 needs float64 support, as on CPU)
  register_lowering({"hash_tensor", "hash_tensor.out"}, [](LoweringContext& c) {
    Value x = c.input_uncast(0);
    DType wide = is_floating(x.type.dtype) ? DType::kF64 : DType::kS64;
    Value bits = c.b.bitcast_convert(cast(c.b, x, wide), DType::kU64);
    return Values{c.b.reshape(reduce(c, bits, reduced_dims(c, 1, x.type.rank()), BinaryOp::kXor, 0), c.out().dims)};
  });
  // Padding reads as what changes no result: 0 for a sum, 1 for a product, the lowest value for a
  // max (a tie with it picks the earlier, real index), the highest for a min.
  using exec::Fill;
  register_lowering({"sum", "sum.out"}, sum_lowering(kAll), padded({}, {Fill::kZero}));
  register_lowering({"sum.dim_IntList", "sum.IntList_out"}, sum_lowering(1), padded({}, {Fill::kZero}));
  register_lowering({"mean", "mean.dtype_out"}, mean_lowering(kAll), padded({}, counted()));
  register_lowering({"mean.dim", "mean.out"}, mean_lowering(1), padded({}, counted()));
  register_lowering({"prod", "prod.out"}, [](LoweringContext& c) {
    Value x = cast(c.b, c.input_uncast(0), accumulator(c.out().dtype));
    return Values{finish(c, reduce(c, x, reduced_dims(c, kAll, x.type.rank()), BinaryOp::kMultiply, 1))};
  }, padded({}, {Fill::kOne}));
  register_lowering({"prod.dim_int", "prod.int_out"}, [](LoweringContext& c) {
    Value x = cast(c.b, c.input_uncast(0), accumulator(c.out().dtype));
    return Values{finish(c, reduce(c, x, reduced_dims(c, 1, x.type.rank()), BinaryOp::kMultiply, 1))};
  }, padded({}, {Fill::kOne}));
  auto a_max = [](LoweringOptions o) { return padded(std::move(o), {Fill::kLowest}); };
  auto a_min = [](LoweringOptions o) { return padded(std::move(o), {Fill::kHighest}); };
  register_lowering({"amax", "amax.out"}, extreme(true, 1), a_max(with_meta(nonempty_reduction("amax", 1, false))));
  register_lowering({"amin", "amin.out"}, extreme(false, 1), a_min(with_meta(nonempty_reduction("amin", 1, false))));
  register_lowering({"max", "max.unary_out"}, extreme(true, kAll), a_max(with_meta(nonempty_reduction("max", kAll, false))));
  register_lowering({"min", "min.unary_out"}, extreme(false, kAll), a_min(with_meta(nonempty_reduction("min", kAll, false))));
  register_lowering({"max.dim", "max.dim_max"}, extreme_with_index(true), a_max(with_meta(nonempty_reduction("max", 1, true))));
  register_lowering({"min.dim", "min.dim_min"}, extreme_with_index(false), a_min(with_meta(nonempty_reduction("min", 1, true))));
  // Without a dim, argmax and argmin index the flattened input, whose positions a box does not keep.
  auto along_a_dim = [](PaddingRule rule) {
    rule.applies = [](const std::vector<c10::IValue>& args) {
      return !args.at(1).isNone() || args.at(0).toTensor().dim() <= 1;
    };
    return rule;
  };
  register_lowering({"argmax", "argmax.out"}, arg_lowering(true),
                    padded(with_meta(nonempty_reduction("argmax", 1, true)), along_a_dim({Fill::kLowest})));
  register_lowering({"argmin", "argmin.out"}, arg_lowering(false),
                    padded(with_meta(nonempty_reduction("argmin", 1, true)), along_a_dim({Fill::kHighest})));
  register_lowering({"var.correction", "var.correction_out"}, [](LoweringContext& c) {
    Value x = c.input_uncast(0);
    return Values{finish(c, variance(c, x, reduced_dims(c, 1, x.type.rank()), correction_of(c, 2)))};
  }, floating_moments());
  register_lowering({"std.correction", "std.correction_out"}, [](LoweringContext& c) {
    Value x = c.input_uncast(0);
    Value v = variance(c, x, reduced_dims(c, 1, x.type.rank()), correction_of(c, 2));
    return Values{finish(c, c.b.unary(UnaryOp::kSqrt, v))};
  }, floating_moments());
  // var_mean / std_mean(self, dim, correction, keepdim) -> (var or std, mean).
  for (bool take_root : {false, true}) {
    const char* name = take_root ? "std_mean.correction" : "var_mean.correction";
    const char* out = take_root ? "std_mean.correction_out" : "var_mean.correction_out";
    register_lowering({name, out}, [take_root](LoweringContext& c) {
      Value x = c.input_uncast(0);
      auto dims = reduced_dims(c, 1, x.type.rank());
      Value v = variance(c, x, dims, correction_of(c, 2));
      Value wide = is_complex(x.type.dtype) ? x : cast(c.b, x, accumulator(c.out().dtype));
      Value mean = c.padded() ? padded_moments(c, wide, dims).mean : Math{c.b}.mean(wide, dims);
      return Values{finish(c, take_root ? c.b.unary(UnaryOp::kSqrt, v) : v, 0), finish(c, mean, 1)};
    }, floating_moments());
  }
  register_lowering({"nansum", "nansum.out"}, [](LoweringContext& c) {
    Value x = c.input_uncast(0);
    x = c.b.select(is_nan(x), c.full(0, x), x);
    return Values{finish(c, sum_of(c, x, reduced_dims(c, 1, x.type.rank())))};
  });
  register_lowering({"count_nonzero.dim_IntList", "count_nonzero.dim_IntList_out"}, [](LoweringContext& c) {
    Value x = c.input_uncast(0);
    Value nonzero = c.b.convert(c.b.compare(Compare::kNE, x, c.full(0, x)), DType::kS64);
    return Values{finish(c, reduce(c, nonzero, reduced_dims(c, 1, x.type.rank()), BinaryOp::kAdd, 0))};
  });
  register_lowering({"aminmax", "aminmax.out"}, [](LoweringContext& c) {
    Value x = c.input_uncast(0);  // (self, dim?, keepdim) -> (min, max)
    auto dims = reduced_dims(c, 1, x.type.rank());
    auto extreme_of = [&](bool is_max) {
      BinaryOp op = is_max ? BinaryOp::kMaximum : BinaryOp::kMinimum;
      return c.b.reduce({x}, {extreme_identity(c, x.type.dtype, is_max)}, dims, nan_extreme_with(op))[0];
    };
    return Values{finish(c, extreme_of(false), 0), finish(c, extreme_of(true), 1)};
  });
  register_lowering({"trace", "trace.out"}, [](LoweringContext& c) {
    Value x = cast(c.b, c.input_uncast(0), accumulator(c.out().dtype));
    hlo::TensorType index{DType::kS64, x.type.dims};
    Value diagonal = c.b.compare(Compare::kEQ, c.b.iota(index, 0), c.b.iota(index, 1));
    return Values{finish(c, reduce(c, c.b.select(diagonal, x, c.full(0, x)), {0, 1}, BinaryOp::kAdd, 0))};
  });
  // Padding reads as what leaves the answer unchanged: false for any, true for all.
  LoweringOptions any_padded = padded({}, {exec::Fill::kZero}), all_padded = padded({}, {exec::Fill::kOne});
  register_lowering({"any", "any.all_out"}, boolean_reduce(BinaryOp::kOr, kAll), any_padded);
  register_lowering({"any.dim", "any.out", "any.dims", "any.dims_out"}, boolean_reduce(BinaryOp::kOr, 1), any_padded);
  register_lowering({"all", "all.all_out"}, boolean_reduce(BinaryOp::kAnd, kAll), all_padded);
  register_lowering({"all.dim", "all.out", "all.dims", "all.dims_out"}, boolean_reduce(BinaryOp::kAnd, 1), all_padded);
  register_lowering({"logsumexp", "logsumexp.out"}, [](LoweringContext& c) {
    Value x = cast(c.b, c.input_uncast(0), accumulator(c.out().dtype));
    auto dims = reduced_dims(c, 1, x.type.rank());
    std::vector<int64_t> kept;
    for (int64_t d = 0; d < x.type.rank(); ++d)
      if (!std::binary_search(dims.begin(), dims.end(), d)) kept.push_back(d);
    // Complex values shift by the largest real part, as CPU does.
    bool complex = is_complex(x.type.dtype);
    Value m = reduce(c, complex ? c.b.unary(UnaryOp::kReal, x) : x, dims, BinaryOp::kMaximum, -INFINITY);
    // An all -inf slice would give -inf - -inf = NaN: shift by 0 there instead.
    Value finite_m = c.b.select(c.b.unary(UnaryOp::kIsFinite, m), m, c.full(0, m));
    if (complex) finite_m = c.b.binary(BinaryOp::kComplex, finite_m, c.full(0, finite_m));
    Value shifted = x - c.b.broadcast_in_dim(finite_m, x.type.dims, kept);
    Value s = reduce(c, c.b.unary(UnaryOp::kExponential, shifted), dims, BinaryOp::kAdd, 0);
    return Values{finish(c, c.b.unary(UnaryOp::kLog, s) + finite_m)};
  });
  // The older norm(self, p=2, [dim, keepdim], [dtype]): a vector norm over dim (default all).
  register_lowering({"norm.Scalar", "norm.Scalar_out", "norm.ScalarOpt_dim", "norm.out", "norm.ScalarOpt_dim_dtype",
                     "norm.dtype_out", "norm.ScalarOpt_dtype", "norm.ScalarOpt_dtype_out"}, [](LoweringContext& c) {
    Value x = c.input_uncast(0);
    double ord = c.arg(1).isNone() ? 2.0 : c.arg(1).toScalar().toDouble();
    bool has_dims = c.num_args() > 2 && c.arg(2).isIntList();
    auto dims = reduced_dims(c, has_dims ? 2 : kAll, x.type.rank());
    return Values{finish(c, Math{c.b}.vector_norm(x, dims, ord, accumulator(c.out().dtype)))};
  }, [] {
    LoweringOptions o;
    o.static_scalars = {1};
    return o;
  }());
  // renorm(x, p, dim, maxnorm): each slice along dim whose p-norm exceeds maxnorm scaled down to
  // it, by maxnorm / (norm + 1e-7) as on CPU
  register_with_variants("renorm", {""}, [](LoweringContext& c) {
    Math m{c.b};
    DType acc = accumulator(c.out().dtype);
    Value x = c.input_as(0, acc);
    int64_t dim = wrap_dim(c.arg(2).toInt(), x.type.rank());
    Value norm = m.vector_norm(x, dims_except(x.type.rank(), dim), c.arg(1).toScalar().toDouble(), acc);
    Value maxnorm = c.b.broadcast_in_dim(c.input_as(3, acc), norm.type.dims, {});
    Value factor = c.b.select(c.b.compare(Compare::kGT, norm, maxnorm), maxnorm / (norm + m.k(1e-7, norm)),
                              m.k(1, norm));
    return Values{cast(c.b, x * c.b.broadcast_in_dim(factor, x.type.dims, {dim}), c.out().dtype)};
  }, [] {
    LoweringOptions o;
    o.static_scalars = {1};
    return o;
  }());
  register_lowering({"linalg_vector_norm", "linalg_vector_norm.out"}, [](LoweringContext& c) {
    Value x = c.input_uncast(0);
    double ord = c.arg(1).toScalar().toDouble();
    return Values{finish(c, Math{c.b}.vector_norm(x, reduced_dims(c, 2, x.type.rank()), ord, accumulator(c.out().dtype)))};
  }, [] {
    LoweringOptions o = with_meta(vector_norm_meta);
    o.static_scalars = {1};
    return o;
  }());
}

// The dtypes CPU's kernels refuse that PyTorch's meta kernels let through (aten/dtype_support.h),
// measured against CPU PyTorch 2.11.
TORCHTPU_LOWERINGS(reduction_cpu_refusals) {
  refuse_on_cpu("max", {Refused::kComplex, "max_all", nullptr, false, ""});
  refuse_on_cpu("min", {Refused::kComplex, "min_all", nullptr, false, ""});
  // CPU computes few ops in complex32 (add, sub, mul, neg, conj, abs, cat, fill_, copies, ...);
  // tpu computes every lowered op in complex64 and rounds (as CUDA's chalf kernels), except
  // these, which CPU refuses and PyTorch code meets (foreach ops with a complex Scalar).
  refuse_on_cpu("sum", {Refused::kComplexHalf, "sum_cpu"});
  // float8: CPU stores, converts, copies, indexes, multiplies and matmuls them, little else.
  refuse_on_cpu("sum", {Refused::kFloat8, "sum_cpu"});
  refuse_on_cpu("mean", {Refused::kFloat8, "sum_cpu"});
  refuse_on_cpu("max", {Refused::kFloat8, "max_all", nullptr, false, ""});
  refuse_on_cpu("min", {Refused::kFloat8, "min_all", nullptr, false, ""});
  refuse_on_cpu("amax", {Refused::kFloat8, "max_values_cpu"});
}

}  // namespace torchtpu::aten
