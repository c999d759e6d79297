// Indexing and data movement: cat, index_select, gather, scatter family, advanced indexing
// (index / index_put), cumulative sums, take/put, arange, linspace/logspace, eye, constant padding.
#include <cmath>
#include <optional>

#include <ATen/ExpandUtils.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/index.h>
#include <torch/library.h>

#include "aten/lowering.h"
#include "aten/origin.h"
#include "aten/tensor_operand.h"
#include "exec/executor.h"
#include "aten/ops/lowering_util.h"
#include "aten/ops/math.h"

namespace torchtpu::aten {
namespace {

std::vector<int64_t> range(int64_t begin, int64_t end) {
  std::vector<int64_t> v;
  for (int64_t i = begin; i < end; ++i) v.push_back(i);
  return v;
}

// Index values made non-negative (Python-style negative indices count from the end).
Value wrapped_index(hlo::Builder& b, const Value& index, int64_t size) {
  Value i = cast(b, index, DType::kS64);
  Value negative = b.compare(Compare::kLT, i, b.constant(0, i.type));
  return b.select(negative, i + b.constant_int(size, i.type), i);
}

// Full coordinates [index.shape..., rank] that address self along every dimension, with `index`
// substituted along `dim` (the addressing of gather and scatter).
Value coordinates(hlo::Builder& b, const Value& index, int64_t dim, int64_t rank, int64_t size) {
  std::vector<int64_t> shape = index.type.dims;
  shape.push_back(1);
  std::vector<Value> parts;
  for (int64_t d = 0; d < rank; ++d) {
    Value coord = d == dim ? cast(b, index, DType::kS64) : b.iota({DType::kS64, index.type.dims}, d);
    parts.push_back(b.reshape(coord, shape));
  }
  return b.concatenate(parts, rank);
}

hlo::RegionBody replace() {
  return [](hlo::Builder&, const Values& a) { return Values{a[1]}; };
}

// Scatters `updates` (shaped like index) into self at coordinates(index, dim).
Value scatter_along(LoweringContext& c, const Value& self, int64_t dim, const Value& index,
                    const Value& updates, const hlo::RegionBody& combine) {
  if (index.type.element_count() == 0) return self;  // nothing to scatter (CPU checks no shapes then)
  if (self.type.rank() == 0) {  // a 0-d tensor behaves as a 1-element vector
    Value r = scatter_along(c, c.b.reshape(self, {1}), 0, c.b.reshape(index, {index.type.element_count()}),
                            c.b.reshape(updates, {updates.type.element_count()}), combine);
    return c.b.reshape(r, {});
  }
  int64_t rank = self.type.rank();
  c.check_on_device(all_in_range(c.b, cast(c.b, index, DType::kS64), self.type.dims.at(dim)));
  Value coords = coordinates(c.b, index, dim, rank, self.type.dims.at(dim));
  auto all = range(0, rank);
  return c.b.scatter(self, coords, updates, {{}, all, all, index.type.rank()}, combine);
}

// The 1-d `index` of index_copy/index_add/index_fill spread over `shape` along `dim`: entry i of
// the index addresses every element of slice i (scatter coordinates for the whole slice).
Value along_dim(hlo::Builder& b, const Value& index, const std::vector<int64_t>& shape, int64_t dim) {
  Value flat = b.reshape(index, {index.type.element_count()});
  if (shape.empty()) return b.reshape(flat, {});
  return b.broadcast_in_dim(flat, shape, {dim});
}

// self with slice index[i] along `dim` replaced by (or combined with) slice i of `updates`. Only
// index_fill takes negative indices (from the end), as on CPU.
Value index_scatter(LoweringContext& c, const Value& updates, const hlo::RegionBody& combine,
                    bool negative_from_end = false) {
  Value self = c.input(0);
  int64_t dim = self.type.rank() == 0 ? 0 : wrap_dim(c.arg(1).toInt(), self.type.rank());
  Value raw = c.input_uncast(2);
  if (negative_from_end) raw = wrapped_index(c.b, raw, self.type.rank() == 0 ? 1 : self.type.dims[dim]);
  Value index = along_dim(c.b, raw, updates.type.dims, dim);
  return scatter_along(c, self, dim, index, updates, combine);
}

// src restricted to the index's shape (scatter only reads that corner of src).
Value corner(LoweringContext& c, const Value& src, const Value& index) {
  if (src.type.dims == index.type.dims) return src;
  if (index.type.element_count() == 0) return c.b.constant(0, {src.type.dtype, index.type.dims});
  return c.b.slice(src, std::vector<int64_t>(src.type.rank(), 0), index.type.dims,
                   std::vector<int64_t>(src.type.rank(), 1));
}

hlo::RegionBody reduce_named(const std::string& name) {
  if (name == "add" || name == "sum") return combine_with(BinaryOp::kAdd);
  if (name == "multiply" || name == "prod") return combine_with(BinaryOp::kMultiply);
  if (name == "amax") return combine_with(BinaryOp::kMaximum);
  if (name == "amin") return combine_with(BinaryOp::kMinimum);
  TORCH_CHECK(false, "scatter reduce '", name, "' is not supported on tpu");
}

// Advanced indexing: the present index tensors broadcast together; returns the stacked
// coordinates [B..., k], the indexed dimensions, and whether they are adjacent.
struct Advanced {
  Value coords;
  std::vector<int64_t> indexed;
  std::vector<int64_t> batch;  // the broadcast shape B
  bool adjacent;
};

// On a padded call, where `self` (argument 0) is a box: the index along dimension `dim`, negative
// ones wrapped by the exact size and the range checked against it (a position below it is the
// same in the box).
Value index_into_box(LoweringContext& c, const Value& index, int64_t dim) {
  Value i = cast(c.b, index, DType::kS64);
  Value size = c.b.broadcast_in_dim(c.exact_size(0, dim), i.type.dims, {});
  Value zero = c.b.constant(0, i.type);
  Value wrapped = c.b.select(c.b.compare(Compare::kLT, i, zero), i + size, i);
  Value inside = c.b.binary(BinaryOp::kAnd, c.b.compare(Compare::kGE, wrapped, zero), c.b.compare(Compare::kLT, wrapped, size));
  c.check_on_device(all_true(c.b, inside));
  return wrapped;
}

Advanced advanced_index(LoweringContext& c, const Value& self, size_t indices_arg) {
  Advanced a;
  const auto& list = c.arg(indices_arg).toListRef();
  const auto& values = c.list(indices_arg);
  std::vector<Value> present;
  size_t next = 0;
  for (size_t d = 0; d < list.size(); ++d) {
    if (!list[d].isTensor() || !list[d].toTensor().defined()) continue;  // None may come as an undefined tensor
    a.indexed.push_back(static_cast<int64_t>(d));
    if (c.padded()) {
      present.push_back(index_into_box(c, values.at(next++), d));
      continue;
    }
    present.push_back(wrapped_index(c.b, values.at(next++), self.type.dims[d]));
    c.check_on_device(all_in_range(c.b, present.back(), self.type.dims[d]));
  }
  for (const Value& v : present) {  // broadcast shape, aligned at the trailing end
    const auto& dims = v.type.dims;
    if (dims.size() > a.batch.size()) a.batch.insert(a.batch.begin(), dims.size() - a.batch.size(), 1);
    for (size_t i = 0; i < dims.size(); ++i) {
      int64_t& slot = a.batch[a.batch.size() - dims.size() + i];
      slot = slot == 1 ? dims[i] : slot;
    }
  }
  std::vector<int64_t> shape = a.batch;
  shape.push_back(1);
  std::vector<Value> parts;
  for (const Value& v : present) parts.push_back(c.b.reshape(broadcast_to(c.b, v, a.batch), shape));
  a.coords = c.b.concatenate(parts, static_cast<int64_t>(a.batch.size()));
  a.adjacent = a.indexed.back() - a.indexed.front() + 1 == static_cast<int64_t>(a.indexed.size());
  return a;
}

// Output dims of self[indices] and where self's remaining dims sit in it.
std::pair<std::vector<int64_t>, std::vector<int64_t>> advanced_layout(const Advanced& a, const Value& self) {
  std::vector<int64_t> dims, window;
  int64_t rank = self.type.rank(), first = a.indexed.front();
  auto is_indexed = [&](int64_t d) { return std::find(a.indexed.begin(), a.indexed.end(), d) != a.indexed.end(); };
  if (a.adjacent) {
    for (int64_t d = 0; d < first; ++d) { window.push_back(dims.size()); dims.push_back(self.type.dims[d]); }
    dims.insert(dims.end(), a.batch.begin(), a.batch.end());
    for (int64_t d = first; d < rank; ++d)
      if (!is_indexed(d)) { window.push_back(dims.size()); dims.push_back(self.type.dims[d]); }
  } else {
    dims = a.batch;
    for (int64_t d = 0; d < rank; ++d)
      if (!is_indexed(d)) { window.push_back(dims.size()); dims.push_back(self.type.dims[d]); }
  }
  return {dims, window};
}

Values index_tensor(LoweringContext& c) {
  Value self = c.input_uncast(0);
  Advanced a = advanced_index(c, self, 1);
  auto [dims, window] = advanced_layout(a, self);
  std::vector<int64_t> slice = self.type.dims;
  for (int64_t d : a.indexed) slice[d] = 1;
  return {c.b.gather(self, a.coords, {window, a.indexed, a.indexed, static_cast<int64_t>(a.batch.size())},
                     slice, dims)};
}

// No index selects from a dimension of size 0: there it is out of range whatever its value, which
// is known before anything runs (and XLA cannot build such a gather).
// `index_error`: the class CPU raises, IndexError (advanced indexing) or RuntimeError (gather).
void check_not_empty_dim(const at::Tensor& self, int64_t dim, const at::Tensor& index, bool index_error) {
  if (self.dim() == 0 || index.numel() == 0) return;
  dim = c10::maybe_wrap_dim(dim, self.dim());
  if (self.size(dim) > 0) return;
  std::string message = "index is out of bounds for dimension " + std::to_string(dim) + " with size 0";
  if (index_error) TORCH_CHECK_INDEX(false, message);
  TORCH_CHECK(false, message);
}

// The shape self[indices] has, from index's meta kernel (masks are integer indices by now).
std::vector<int64_t> index_result_sizes(const at::Tensor& self, const c10::IValue& indices) {
  c10::List<std::optional<at::Tensor>> list;
  for (const c10::IValue& i : indices.toListRef())
    list.push_back(i.isTensor() && i.toTensor().defined() ? std::optional<at::Tensor>(i.toTensor()) : std::nullopt);
  return at::index(self, list).sizes().vec();
}

// As CPU: index tensors are integers or masks.
void check_indices(const at::Tensor& self, const c10::IValue& indices) {
  const auto& list = indices.toListRef();
  for (size_t d = 0; d < list.size(); ++d) {
    if (!list[d].isTensor() || !list[d].toTensor().defined()) continue;  // a full slice (None)
    const at::Tensor& i = list[d].toTensor();
    c10::ScalarType t = i.scalar_type();
    TORCH_CHECK_INDEX(t == at::kLong || t == at::kInt || t == at::kByte || t == at::kBool,
                      "tensors used as indices must be long, int, byte or bool tensors");
    if (t != at::kBool && t != at::kByte && static_cast<int64_t>(d) < self.dim())
      check_not_empty_dim(self, static_cast<int64_t>(d), i, true);
  }
}


// index_select of a 0-d tensor takes exactly one index, as CPU checks.
LoweringOptions index_select_options() {
  LoweringOptions o = checked("index out of range in self");
  o.no_aliasing = true;
  o.index_is_not_out = true;  // CPU refuses the index as out=, unlike gather's
  o.padding = padding_of_args({2});  // padded indices read as 0, a row that exists
  o.meta = checked_meta([](const std::vector<c10::IValue>& args) {
    int64_t n = args[2].toTensor().numel();
    const at::Tensor& self = args[0].toTensor();
    int64_t dim = c10::maybe_wrap_dim(args[1].toInt(), self.dim());  // IndexError first, as CPU
    if (n > 0 && self.dim() > 0 && self.size(dim) == 0) {
      // CPU's two kernels word (and class) this differently
      TORCH_CHECK_INDEX(self.dim() > 1, "index out of range in self");
      TORCH_CHECK(false, "index_select(): self indexing axis dim should be positive");
    }
    TORCH_CHECK(args[0].toTensor().dim() > 0 || n == 1, "index_select(): Index to scalar can have only 1 value, got ",
                      n, " value(s)");
  });
  return o;
}

Values index_put(LoweringContext& c) {
  // (self, indices, values, accumulate)
  Value self = c.input(0);
  Advanced a = advanced_index(c, self, 1);
  auto [dims, window] = advanced_layout(a, self);
  Value updates = broadcast_to(c.b, c.input(2), dims);
  bool accumulate = c.arg(3).toBool();
  return {c.b.scatter(self, a.coords, updates,
                      {window, a.indexed, a.indexed, static_cast<int64_t>(a.batch.size())},
                      accumulate ? combine_with(BinaryOp::kAdd) : replace())};
}

// Cumulative reduction along dim as a reduce_window whose window reaches back over the prefix.
Value cumulative(hlo::Builder& b, const Value& x, int64_t dim, const hlo::RegionBody& combine, double init) {
  int64_t rank = x.type.rank();
  if (rank == 0) return x;
  int64_t n = x.type.dims[dim];
  if (n == 0) return x;
  hlo::Window w;
  w.dims.assign(rank, 1);
  w.dims[dim] = n;
  w.padding.assign(rank, {0, 0});
  w.padding[dim] = {n - 1, 0};
  return b.reduce_window({x}, {b.constant(init, {x.type.dtype, {}})}, w, combine)[0];
}

Value cumulative(hlo::Builder& b, const Value& x, int64_t dim, BinaryOp op, double init) {
  return cumulative(b, x, dim, combine_with(op), init);
}

// log(exp(a) + exp(b)) of two scalars, the step of logcumsumexp; equal infinities give themselves,
// a NaN gives NaN.
// A complex sum at real part -inf is -inf + 0i: CPU's running value starts at the identity
// -inf + 0i and wins the tie at -inf, so no imaginary part survives.
std::vector<Value> log_add_exp(hlo::Builder& b, const std::vector<Value>& a) {
  if (is_complex(a[0].type.dtype)) {
    Value r = complex_log_add_exp(b, a[0], a[1]), re = b.unary(UnaryOp::kReal, r);
    Value vanished = b.compare(Compare::kEQ, re, b.constant(-INFINITY, re.type));
    return {b.select(vanished, b.constant(-INFINITY, r.type), r)};
  }
  Value hi = b.binary(BinaryOp::kMaximum, a[0], a[1]), lo = b.binary(BinaryOp::kMinimum, a[0], a[1]);
  Value r = hi + b.unary(UnaryOp::kLogPlusOne, b.unary(UnaryOp::kExponential, lo - hi));
  Value same_inf = b.binary(BinaryOp::kAnd, b.compare(Compare::kEQ, hi, lo), b.unary(UnaryOp::kNot, b.unary(UnaryOp::kIsFinite, hi)));
  r = b.select(same_inf, hi, r);
  // A NaN carries on (XLA's maximum/minimum in a window's body need not propagate it).
  Value sum_is_nan = is_nan(a[0]);
  return {b.select(sum_is_nan, a[0], b.select(is_nan(a[1]), a[1], r))};
}

// unfold_backward(grad, input_sizes, dim, size, step): each window offset's gradient slice padded
// into place (offset, then every step) and summed.
Values unfold_backward(LoweringContext& c) {
  Value g = c.input(0);
  auto sizes = c.int_list(1);
  int64_t rank = static_cast<int64_t>(sizes.size());
  int64_t dim = wrap_dim(c.arg(2).toInt(), rank), size = c.arg(3).toInt(), step = c.arg(4).toInt();
  int64_t windows = rank == 0 ? 1 : g.type.dims[dim];
  Value result = c.b.constant(0, c.out());
  if (windows == 0 || rank == 0) return {rank == 0 ? c.b.reshape(g, {}) : result};
  std::vector<int64_t> start(g.type.rank(), 0), limit = g.type.dims, stride(g.type.rank(), 1);
  for (int64_t offset = 0; offset < size; ++offset) {
    start.back() = offset;
    limit.back() = offset + 1;
    Value piece = c.b.reshape(c.b.slice(g, start, limit, stride), std::vector<int64_t>(g.type.dims.begin(), g.type.dims.end() - 1));
    std::vector<int64_t> low(rank, 0), high(rank, 0), interior(rank, 0);
    low[dim] = offset;
    interior[dim] = step - 1;
    high[dim] = sizes[dim] - (offset + (windows - 1) * step + 1);
    result = result + c.b.pad(piece, c.scalar(0, g.type.dtype), low, high, interior);
  }
  return {result};
}

// cummax/cummin along `dim` with indices: (self, values (written), indices (written), dim). Equal
// values (and NaNs) go to the later index, as on CPU. Two single-operand running reductions: XLA's
// CPU compiler fails on a variadic (value, index) one whose length is not a power of two.
Lowering running_extreme(bool is_max) {
  return [is_max](LoweringContext& c) {
    Value x = c.input_uncast(0);
    int64_t rank = x.type.rank();
    if (rank == 0) return Values{x, c.b.constant(0, {DType::kS64, {}})};
    int64_t dim = wrap_dim(c.arg(3).toInt(), rank);
    if (x.type.dims[dim] == 0) return Values{x, c.b.constant(0, {DType::kS64, x.type.dims})};
    Value values = cumulative(c.b, x, dim, is_max ? BinaryOp::kMaximum : BinaryOp::kMinimum,
                              is_max ? -INFINITY : INFINITY);
    Value nan = is_nan(x);
    if (is_floating(x.type.dtype))  // a NaN sticks (XLA's running max/min may skip it)
      values = c.b.select(cumulative(c.b, nan, dim, BinaryOp::kOr, 0), c.b.constant(NAN, x.type), values);
    // where the running extreme takes x's value; each NaN takes the index too
    Value taken = c.b.binary(BinaryOp::kOr, c.b.compare(Compare::kEQ, x, values), nan);
    Value index = c.b.iota({DType::kS64, x.type.dims}, dim);
    Value last = c.b.select(taken, index, c.b.constant(0, index.type));
    return Values{values, cumulative(c.b, last, dim, BinaryOp::kMaximum, 0)};
  };
}

// scatter_reduce.two(self, dim, index, src, reduce, include_self)
// self with src reduced into it at `index` along `dim` (scatter_reduce's and index_reduce's
// (self, dim, index, src, reduce, include_self); index shaped like src).
Value reduce_into(LoweringContext& c, const Value& self, int64_t dim, const Value& index, const Value& src) {
  Math m{c.b};
  std::string reduce = c.arg(4).toStringRef();
  bool include_self = c.arg(5).toBool();
  DType t = self.type.dtype;
  double identity = reduce == "prod" ? 1 : reduce == "amax" ? -INFINITY : reduce == "amin" ? INFINITY : 0;
  Value base = self;
  if (!include_self)  // positions that receive values start from the reduction's identity
    base = scatter_along(c, self, dim, index, c.b.constant(identity, src.type), replace());
  Value result = scatter_along(c, base, dim, index, src, reduce_named(reduce == "mean" ? "sum" : reduce));
  if (reduce != "mean") return result;
  Value ones = c.b.constant(1, src.type);
  Value counts = scatter_along(c, c.b.constant(include_self ? 1 : 0, self.type), dim, index, ones,
                               combine_with(BinaryOp::kAdd));
  counts = c.b.binary(BinaryOp::kMaximum, counts, m.k(1, counts));
  Value mean = result / counts;
  if (is_floating(t) || is_complex(t)) return mean;
  // integers divide with floor rounding, as CPU does (XLA's division truncates); counts are > 0
  Value inexact = c.b.compare(Compare::kNE, c.b.binary(BinaryOp::kRemainder, result, counts), m.k(0, result));
  Value below = c.b.binary(BinaryOp::kAnd, inexact, c.b.compare(Compare::kLT, result, m.k(0, result)));
  return c.b.select(below, mean - m.k(1, mean), mean);
}

Values scatter_reduce(LoweringContext& c) {
  Value self = c.input(0), index = c.input_uncast(2);
  return {reduce_into(c, self, wrap_dim(c.arg(1).toInt(), self.type.rank()), index, corner(c, c.input(3), index))};
}

Values index_reduce(LoweringContext& c) {  // the 1-d index addresses whole slices of source along dim
  Value self = c.input(0), source = c.input(3);
  int64_t dim = self.type.rank() == 0 ? 0 : wrap_dim(c.arg(1).toInt(), self.type.rank());
  return {reduce_into(c, self, dim, along_dim(c.b, c.input_uncast(2), source.type.dims, dim), source)};
}

// masked_scatter(self, mask, source): the k-th true position of mask takes source.flatten()[k].
Values masked_scatter(LoweringContext& c) {
  Value self = c.elementwise_input(0);
  Value mask = c.broadcast_to_output(c.input_uncast(1));
  int64_t n = self.type.element_count();
  if (c.input_uncast(2).type.element_count() == 0) return {self};  // then mask has no true element
  Value flat_mask = c.b.reshape(mask, {n});
  Value counts = cumulative(c.b, cast(c.b, flat_mask, DType::kS64), 0, BinaryOp::kAdd, 0);
  Value pos = counts - c.b.constant(1, counts.type);
  pos = c.b.binary(BinaryOp::kMaximum, pos, c.b.constant(0, pos.type));
  Value source = c.b.reshape(cast(c.b, c.input_uncast(2), self.type.dtype), {c.input_uncast(2).type.element_count()});
  Value picked = c.b.gather(source, c.b.reshape(pos, {n, 1}), {{}, {0}, {0}, 1}, {1}, {n});
  return {c.b.select(mask, c.b.reshape(picked, self.type.dims), self)};
}

// The coordinates of x's non-zero elements in order, one per row, into `rows` rows: rows past the
// last element hold `fill`, elements past the last row are dropped (an out-of-bounds scatter).
Value nonzero_coordinates(hlo::Builder& b, const Value& x, int64_t rows, int64_t fill) {
  int64_t rank = x.type.rank(), total = x.type.element_count();
  Value mask = x.type.dtype == DType::kBool ? x : b.compare(Compare::kNE, x, b.constant(0, x.type));
  mask = b.reshape(mask, {total});
  Value rank_of = cumulative(b, cast(b, mask, DType::kS64), 0, BinaryOp::kAdd, 0) - b.constant(1, {DType::kS64, {total}});
  Value row = b.select(mask, rank_of, b.constant_int(rows, {DType::kS64, {total}}));
  std::vector<Value> columns;
  for (int64_t d = 0; d < rank; ++d)
    columns.push_back(b.reshape(b.iota({DType::kS64, x.type.dims}, d), {total, 1}));
  return b.scatter(b.constant_int(fill, {DType::kS64, {rows, rank}}), b.reshape(row, {total, 1}),
                   b.concatenate(columns, 1), {{1}, {0}, {0}, 1}, replace());
}

// nonzero's output size depends on the data: count on the device first (a host sync, as on
// CUDA), then place each true position's coordinates at its rank among the true positions. The
// result is laid out column by column, as CPU's and CUDA's are: nonzero(as_tuple=True) and
// `idx[:, d]` then give contiguous index tensors.
at::Tensor nonzero(const at::Tensor& self) {
  int64_t count = self.ne(0).sum().item<int64_t>();
  at::Tensor out = at::empty({self.dim(), count}, self.options().dtype(at::kLong)).t();
  if (count == 0 || self.dim() == 0) return out;
  exec::Lowering lower = [count](hlo::Builder& b, const Values& in) { return Values{nonzero_coordinates(b, in[0], count, 0)}; };
  run_on_device({"nonzero", lower, {operand(self)}, {operand(out)}, origin_of("aten::nonzero")});
  return out;
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) { m.impl("nonzero", nonzero); }

// linspace(start, end, steps >= 1) in `math`: both halves count from their own end, as PyTorch
// does, with start and end rounded to `math` (or first to `round_to`). With `round_each_step`,
// every step is rounded to `round_to` too (CPU's bfloat16/float16 linspace computes in the dtype).
Value evenly_spaced(LoweringContext& c, DType math, std::optional<DType> round_to = std::nullopt,
                    bool round_each_step = false) {
  Math m{c.b, round_each_step ? round_to : std::nullopt};
  int64_t steps = c.arg(2).toInt();
  auto endpoint = [&](size_t i) {
    Value v = round_to ? cast(c.b, c.input_as(i, *round_to), math) : cast(c.b, c.input(i), math);
    return c.broadcast_to_output(v);
  };
  Value start = endpoint(0), end = endpoint(1);
  if (steps == 1) return start;
  Value step = m.div(m.sub(end, start), m.k(static_cast<double>(steps - 1), start));
  Value i = c.b.iota({math, c.out().dims}, 0);
  Value from_start = m.add(start, m.mul(step, m.rounded(i)));
  Value back = c.b.constant(static_cast<double>(steps - 1), i.type) - i;
  Value from_end = m.sub(end, m.mul(step, m.rounded(back)));
  Value first_half = c.b.compare(Compare::kLT, i, c.b.constant(static_cast<double>(steps / 2), i.type));
  return c.b.select(first_half, from_start, from_end);
}

// tril_indices / triu_indices(row, col, offset): the coordinates of a row x col matrix's lower
// (upper) triangle in row-major order, as [2, N] (N from the meta kernel).
Value triangle_indices(LoweringContext& c, bool lower) {
  int64_t n = c.out().dims[1];
  if (n == 0) return c.b.constant(0, c.out());
  hlo::TensorType grid{DType::kS64, {c.arg(0).toInt(), c.arg(1).toInt()}};
  Value row = c.b.iota(grid, 0), col = c.b.iota(grid, 1);
  Value diagonal = row + c.b.constant_int(c.arg(2).toInt(), grid);
  Value inside = c.b.compare(lower ? Compare::kLE : Compare::kGE, col, diagonal);
  return c.b.convert(c.b.transpose(nonzero_coordinates(c.b, inside, n, 0), {1, 0}), c.out().dtype);
}

// take(self, index) and put_(self, index, source, accumulate): self as a flat vector addressed by
// (possibly negative) indices, checked on the device as CPU checks them.
Values take(LoweringContext& c) {
  Value x = c.input(0);
  int64_t n = x.type.element_count();
  Value index = c.input_uncast(1);
  int64_t k = index.type.element_count();
  c.check_on_device(all_in_range(c.b, wrapped_index(c.b, index, n), n));
  if (n == 0 || k == 0) return {c.b.constant(0, c.out())};
  Value at = c.b.reshape(wrapped_index(c.b, index, n), {k, 1});
  return {c.b.reshape(c.b.gather(c.b.reshape(x, {n}), at, {{}, {0}, {0}, 1}, {1}, {k}), c.out().dims)};
}

Values put(LoweringContext& c) {
  Value x = c.input(0);
  int64_t n = x.type.element_count(), k = c.input_uncast(1).type.element_count();
  if (k == 0) return {x};
  Value index = wrapped_index(c.b, c.input_uncast(1), n);
  c.check_on_device(all_in_range(c.b, index, n));
  Value source = c.b.reshape(c.input(2), {k});
  hlo::RegionBody combine = c.arg(3).toBool() ? combine_with(BinaryOp::kAdd) : replace();
  Value written = c.b.scatter(c.b.reshape(x, {n}), c.b.reshape(index, {k, 1}), source, {{}, {0}, {0}, 1}, combine);
  return {c.b.reshape(written, x.type.dims)};
}

// constant_pad_nd on a box: x shifted by each dimension's low pad into the result's box, and the
// value wherever a position maps outside x's exact sizes (the high pad starts at the exact end, a
// run-time position). Positions past the result's exact sizes are the padding's, never read.
Value padded_constant_pad(LoweringContext& c, const Value& x, const std::vector<int64_t>& low) {
  const std::vector<int64_t>& out = c.out().dims;
  int64_t rank = x.type.rank();
  Value value = cast(c.b, c.input(2), x.type.dtype);
  std::vector<int64_t> before(rank), after(rank), zeros(rank, 0), start(rank), ones(rank, 1);
  for (int64_t d = 0; d < rank; ++d) {
    before[d] = std::max<int64_t>(low[d], 0);
    after[d] = std::max<int64_t>(out[d] - (x.type.dims[d] + low[d]), 0);
    start[d] = std::max<int64_t>(-low[d], 0);
  }
  Value wide = c.b.pad(x, value, before, after, zeros);
  std::vector<int64_t> limit(rank);
  for (int64_t d = 0; d < rank; ++d) limit[d] = start[d] + out[d];
  Value shifted = c.b.slice(wide, start, limit, ones);
  hlo::TensorType index{DType::kS64, out};
  Value inside = c.b.constant(1, {DType::kBool, out});
  for (int64_t d = 0; d < rank; ++d) {
    Value p = c.b.iota(index, d);
    Value first = c.b.constant(static_cast<double>(low[d]), {DType::kS64, {}});
    Value end = first + c.exact_size(0, d);
    inside = c.b.binary(BinaryOp::kAnd, inside, c.b.compare(Compare::kGE, p, c.b.broadcast_in_dim(first, out, {})));
    inside = c.b.binary(BinaryOp::kAnd, inside, c.b.compare(Compare::kLT, p, c.b.broadcast_in_dim(end, out, {})));
  }
  return c.b.select(inside, shifted, c.b.broadcast_in_dim(value, out, {}));
}

}  // namespace

TORCHTPU_LOWERINGS(indexing) {
  register_lowering({"scatter_reduce.two", "scatter_reduce_.two", "scatter_reduce.two_out"}, scatter_reduce,
                    checked_runtime("index out of range in self"));
  register_lowering({"masked_scatter", "masked_scatter_", "masked_scatter.out"}, masked_scatter);
  register_lowering({"cat", "cat.out"}, [](LoweringContext& c) {
    std::vector<Value> parts;
    std::vector<size_t> elements;  // which list element each part is
    int64_t rank = c.out().rank();
    int64_t dim = wrap_dim(c.arg(1).toInt(), rank);
    for (size_t k = 0; k < c.list(0).size(); ++k) {
      const Value& v = c.list(0)[k];
      if (!(v.type.rank() == 1 && v.type.dims[0] == 0 && rank != 1)) {  // legacy: skip empty 1-D
        parts.push_back(cast(c.b, v, c.out().dtype));
        elements.push_back(k);
      }
    }
    if (parts.empty() || c.out().element_count() == 0) return Values{c.b.constant(0, c.out())};
    if (!c.padded()) return Values{c.b.concatenate(parts, dim)};
    // Padded parts go at the exact offsets, in order: each part's padding is overwritten by the
    // parts after it, and the last one's lies past the result's exact end. They are placed in
    // the sum of their boxes or the result's box (the bucket of its exact size), the larger.
    hlo::TensorType wide{c.out().dtype, parts[0].type.dims};
    wide.dims[dim] = 0;
    for (const Value& part : parts) wide.dims[dim] += part.type.dims[dim];
    for (int64_t d = 0; d < rank; ++d) wide.dims[d] = std::max(wide.dims[d], c.out().dims[d]);
    Value out = c.b.constant(0, wide);
    Value zero = c.scalar(0, DType::kS64), offset = zero;
    for (size_t p = 0; p < parts.size(); ++p) {
      std::vector<Value> start(rank, zero);
      start[dim] = offset;
      out = c.b.dynamic_update_slice(out, parts[p], start);
      offset = offset + c.exact_size(0, dim, elements[p]);
    }
    if (wide.dims == c.out().dims) return Values{out};
    return Values{c.b.slice(out, std::vector<int64_t>(rank, 0), c.out().dims, std::vector<int64_t>(rank, 1))};
  }, [] {
    LoweringOptions o = with_meta(checked_meta([](const std::vector<c10::IValue>& args) {
      const auto& tensors = args[0].toListRef();
      for (size_t i = 0; i < tensors.size(); ++i)
        TORCH_CHECK(tensors[i].toTensor().dim() > 0, "zero-dimensional tensor (at position ", i,
                    ") cannot be concatenated");
    }));
    o.no_aliasing = true;
    o.padding = PaddingRule{exec::Fill::kZero, nullptr, /*needs_sizes=*/true};
    o.padding->seeds = true;
    o.padding->results_in_buckets = true;
    return o;
  }());
  register_lowering({"index_select", "index_select.out"}, [](LoweringContext& c) {
    Value self = c.input_uncast(0);
    int64_t rank = self.type.rank();
    Value idx = cast(c.b, c.b.reshape(c.input_uncast(2), {c.input_uncast(2).type.element_count(), 1}), DType::kS64);
    c.check_on_device(all_in_range(c.b, idx, rank == 0 ? 1 : self.type.dims[wrap_dim(c.arg(1).toInt(), rank)]));
    if (rank == 0) return Values{self};
    int64_t dim = wrap_dim(c.arg(1).toInt(), rank);
    std::vector<int64_t> slice = self.type.dims, out = self.type.dims;
    slice[dim] = 1;
    out[dim] = idx.type.dims[0];
    return Values{c.b.gather(self, idx, {dims_except(rank, dim), {dim}, {dim}, 1}, slice, out)};
  }, index_select_options());
  register_lowering({"gather", "gather.out"}, [](LoweringContext& c) {
    Value self = c.input_uncast(0), index = c.input_uncast(2);
    int64_t rank = self.type.rank();
    int64_t dim = wrap_dim(c.arg(1).toInt(), rank);
    c.check_on_device(all_in_range(c.b, cast(c.b, index, DType::kS64), rank == 0 ? 1 : self.type.dims[dim]));
    if (rank == 0) return Values{self};
    Value coords = coordinates(c.b, index, dim, rank, self.type.dims[dim]);
    auto all = range(0, rank);
    return Values{c.b.gather(self, coords, {{}, all, all, index.type.rank()},
                             std::vector<int64_t>(rank, 1), index.type.dims)};
  }, [] {
    LoweringOptions o = checked_runtime("index out of range in self");
    o.meta = checked_meta([](const std::vector<c10::IValue>& args) {
      check_not_empty_dim(args[0].toTensor(), args[1].toInt(), args[2].toTensor(), false);
    });
    // Padded indices read 0, a position that exists; `self` is padded but along `dim`, whose
    // exact size the range check needs.
    return padded(o, {exec::Fill::kZero, [](const std::vector<c10::IValue>& args, size_t arg, int64_t d) {
      if (arg != 0) return arg == 2;
      const at::Tensor& self = args[0].toTensor();
      return self.dim() > 0 && d != c10::maybe_wrap_dim(args[1].toInt(), self.dim());
    }});
  }());
  register_lowering({"scatter.src", "scatter_.src", "scatter.src_out"}, [](LoweringContext& c) {
    Value self = c.input(0), index = c.input_uncast(2);
    int64_t dim = wrap_dim(c.arg(1).toInt(), self.type.rank());
    return Values{scatter_along(c, self, dim, index, corner(c, c.input(3), index), replace())};
  }, checked_runtime("index out of range in self"));
  register_lowering({"scatter.value", "scatter_.value", "scatter.value_out"}, [](LoweringContext& c) {
    Value self = c.input(0), index = c.input_uncast(2);
    int64_t dim = wrap_dim(c.arg(1).toInt(), self.type.rank());
    Value updates = c.b.broadcast_in_dim(c.input(3), index.type.dims, {});
    return Values{scatter_along(c, self, dim, index, updates, replace())};
  }, checked_runtime("index out of range in self"));
  register_lowering({"scatter.reduce", "scatter_.reduce", "scatter.reduce_out"}, [](LoweringContext& c) {
    Value self = c.input(0), index = c.input_uncast(2);
    int64_t dim = wrap_dim(c.arg(1).toInt(), self.type.rank());
    return Values{scatter_along(c, self, dim, index, corner(c, c.input(3), index), reduce_named(c.arg(4).toStringRef()))};
  }, checked_runtime("index out of range in self"));
  register_lowering({"scatter.value_reduce", "scatter_.value_reduce", "scatter.value_reduce_out"}, [](LoweringContext& c) {
    Value self = c.input(0), index = c.input_uncast(2);
    int64_t dim = wrap_dim(c.arg(1).toInt(), self.type.rank());
    Value updates = c.b.broadcast_in_dim(c.input(3), index.type.dims, {});
    return Values{scatter_along(c, self, dim, index, updates, reduce_named(c.arg(4).toStringRef()))};
  }, checked_runtime("index out of range in self"));
  register_lowering({"scatter_add", "scatter_add_", "scatter_add.out"}, [](LoweringContext& c) {
    Value self = c.input(0), index = c.input_uncast(2);
    int64_t dim = wrap_dim(c.arg(1).toInt(), self.type.rank());
    return Values{scatter_along(c, self, dim, index, corner(c, c.input(3), index), combine_with(BinaryOp::kAdd))};
  }, checked_runtime("index out of range in self"));
  register_lowering({"index_reduce", "index_reduce_", "index_reduce.out"}, index_reduce,
                    checked_runtime("index out of range in self"));
  register_lowering({"index_copy", "index_copy_", "index_copy.out"}, [](LoweringContext& c) {
    return Values{index_scatter(c, c.input(3), replace())};
  }, checked_runtime("index out of range in self"));
  register_lowering({"index_add", "index_add_", "index_add.out"}, [](LoweringContext& c) {
    Value source = c.input(3);
    if (c.has(4)) source = source * c.b.broadcast_in_dim(c.input(4), source.type.dims, {});
    return Values{index_scatter(c, source, combine_with(BinaryOp::kAdd))};
  }, checked_runtime("index out of range in self"));
  register_lowering({"index_fill.int_Scalar", "index_fill_.int_Scalar", "index_fill.int_Scalar_out",
                     "index_fill.int_Tensor", "index_fill_.int_Tensor", "index_fill.int_Tensor_out"},
                    [](LoweringContext& c) {
    // The filled slices: self's shape with as many entries along dim as the index has.
    std::vector<int64_t> shape = c.out().dims;
    if (!shape.empty()) shape[wrap_dim(c.arg(1).toInt(), shape.size())] = c.input_uncast(2).type.element_count();
    return Values{index_scatter(c, c.b.broadcast_in_dim(c.input(3), shape, {}), replace(), true)};
  }, checked_runtime("index out of range in self"));
  LoweringOptions index_options = checked("index out of range in self");
  index_options.meta = checked_meta([](const std::vector<c10::IValue>& args) {
    check_indices(args[0].toTensor(), args[1]);
  });
  // Padded index tensors read 0, a position that exists; a padded `self` is addressed as its exact
  // sizes (index_into_box).
  index_options.padding = padding_of_args({0, 1});
  index_options.padding->needs_sizes = true;
  register_lowering({"index.Tensor", "index.Tensor_out"}, index_tensor, index_options);
  LoweringOptions index_put_options = checked("index out of range in self");
  index_put_options.no_aliasing = true;
  index_put_options.meta = checked_meta([](const std::vector<c10::IValue>& args) {
    const at::Tensor& self = args[0].toTensor();
    int64_t dims = self.dim(), indices = static_cast<int64_t>(args[1].toListRef().size());
    TORCH_CHECK_INDEX(indices <= dims, "too many indices for tensor of dimension ", dims, " (got ", indices, ")");
    check_indices(self, args[1]);
    const at::Tensor& values = args[2].toTensor();
    TORCH_CHECK(values.scalar_type() == self.scalar_type(), "Index put requires the source and destination dtypes ",
                "match, got ", self.scalar_type(), " for the destination and ", values.scalar_type(), " for the source.");
    std::vector<int64_t> indexed = index_result_sizes(self, args[1]);
    TORCH_CHECK(at::is_expandable_to(values.sizes(), indexed), "shape mismatch: value tensor of shape ", values.sizes(),
                " cannot be broadcast to indexing result of shape ", c10::IntArrayRef(indexed));
  });
  register_lowering({"index_put", "index_put_", "index_put.out", "_index_put_impl_"}, index_put, index_put_options);
  // Low-precision floats accumulate in f32, as on CPU.
  register_lowering({"cumsum", "cumsum_", "cumsum.out"}, [](LoweringContext& c) {
    Value x = c.input_as(0, accumulator(c.compute_dtype()));
    return Values{cumulative(c.b, x, wrap_dim(c.arg(1).toInt(), x.type.rank()), BinaryOp::kAdd, 0)};
  }, padded({}));  // a prefix sum never reads the padding past a position
  register_lowering({"cumprod", "cumprod_", "cumprod.out"}, [](LoweringContext& c) {
    Value x = c.input_as(0, accumulator(c.compute_dtype()));
    return Values{cumulative(c.b, x, wrap_dim(c.arg(1).toInt(), x.type.rank()), BinaryOp::kMultiply, 1)};
  });
  register_lowering({"_cummax_helper"}, running_extreme(true), written_only());
  register_lowering({"_cummin_helper"}, running_extreme(false), written_only());
  register_lowering({"_logcumsumexp", "_logcumsumexp.out"}, [](LoweringContext& c) {
    Value x = c.input_as(0, accumulator(c.compute_dtype()));
    return Values{cumulative(c.b, x, wrap_dim(c.arg(1).toInt(), x.type.rank()), log_add_exp, -INFINITY)};
  }, [] {
    LoweringOptions o;
    o.meta = shaped_like(0);  // no meta kernel: the input's shape and dtype
    return o;
  }());
  register_lowering({"unfold_backward", "unfold_backward.out"}, unfold_backward);
  register_lowering({"channel_shuffle", "channel_shuffle.out"}, [](LoweringContext& c) {
    Value x = c.input(0);  // [N, C, ...] -> [N, g, C/g, ...] -> [N, C/g, g, ...] -> [N, C, ...]
    int64_t groups = c.arg(1).toInt(), rank = x.type.rank();
    std::vector<int64_t> split = x.type.dims, perm{0, 2, 1};
    split[1] = x.type.dims[1] / groups;
    split.insert(split.begin() + 1, groups);
    for (int64_t d = 3; d <= rank; ++d) perm.push_back(d);
    return Values{c.b.reshape(c.b.transpose(c.b.reshape(x, split), perm), x.type.dims)};
  });
  register_lowering({"take", "take.out"}, take, checked("take(): index out of range"));
  // nonzero with a static size (torch.compile-friendly): (self, size, fill_value)
  register_lowering({"nonzero_static", "nonzero_static.out"}, [](LoweringContext& c) {
    if (c.out().element_count() == 0) return Values{c.b.constant(0, c.out())};
    return Values{nonzero_coordinates(c.b, c.input_uncast(0), c.out().dims[0], c.arg(2).toInt())};
  });
  register_lowering({"put_"}, put, checked("put_(): index out of range"));
  register_lowering({"linspace", "linspace.out"}, [](LoweringContext& c) {
    DType t = c.out().dtype;
    if (c.arg(2).toInt() == 0) return Values{c.b.constant(0, c.out())};
    if (low_precision(t)) return Values{cast(c.b, evenly_spaced(c, accumulator(t), t, true), t)};
    return Values{evenly_spaced(c, is_floating(t) || is_complex(t) ? t : DType::kF64)};
  });
  // logspace(start, end, steps, base): base to the powers linspace gives, in the output dtype
  // (double for integer outputs, truncated at the end as on CPU).
  register_lowering({"logspace.out", "logspace.Tensor_Tensor_out", "logspace.Tensor_Scalar_out",
                     "logspace.Scalar_Tensor_out"}, [](LoweringContext& c) {
    DType t = c.out().dtype;
    int64_t steps = c.arg(2).toInt();
    if (steps == 0) return Values{c.b.constant(0, c.out())};
    if (steps == 1) {  // CPU fills base ** start, computed in double precision from the unrounded start
      DType wide = is_complex(t) ? DType::kC128 : DType::kF64;
      Value start = cast(c.b, c.input_uncast(0), wide);  // a Scalar start is a runtime f64 input
      Value power = c.b.binary(BinaryOp::kPower, c.b.constant(c.arg(3).toDouble(), start.type), start);
      return Values{c.b.broadcast_in_dim(power, c.out().dims, {})};
    }
    // Low-precision outputs: start and end rounded to the output dtype first, as CPU does.
    Value exponent = evenly_spaced(c, is_floating(t) || is_complex(t) ? accumulator(t) : DType::kF64, low_precision(t));
    return Values{c.b.binary(BinaryOp::kPower, c.b.constant(c.arg(3).toDouble(), exponent.type), exponent)};
  });
  register_lowering({"tril_indices", "tril_indices.out"}, [](LoweringContext& c) { return Values{triangle_indices(c, true)}; });
  register_lowering({"triu_indices", "triu_indices.out"}, [](LoweringContext& c) { return Values{triangle_indices(c, false)}; });
  register_lowering({"eye.out", "eye.m_out"}, [](LoweringContext& c) {
    hlo::TensorType index{DType::kS64, c.out().dims};
    Value diagonal = c.b.compare(Compare::kEQ, c.b.iota(index, 0), c.b.iota(index, 1));
    return Values{c.b.convert(diagonal, c.out().dtype)};
  });
  // torch.range (deprecated, still used) is arange with the end included
  register_lowering({"arange.start_out", "range.out"}, [](LoweringContext& c) {
    DType t = c.out().dtype;  // (start, end, step, out): start + i * step, computed in f64 / s64
    DType wide = is_floating(t) ? DType::kF64 : DType::kS64;
    Value i = c.b.iota({wide, c.out().dims}, 0);
    Value start = c.broadcast_to_output(c.input_as(0, wide)), step = c.broadcast_to_output(c.input_as(2, wide));
    return Values{start + i * step};
  }, [] {
    LoweringOptions o;
    o.shape_from_scalars = true;
    // A line whose length changes (positions of a growing sequence) starts padding here: the
    // iota fills the box, and PyTorch's meta kernel, which would resize `out` back, is skipped.
    PaddingRule rule;
    rule.seeds = true;
    rule.box_meta = [](const c10::FunctionSchema&, const std::vector<c10::IValue>& args) {
      return std::vector<c10::IValue>{args.back()};
    };
    return padded(o, rule);
  }());
  LoweringOptions pad_options;
  pad_options.meta = [](const c10::FunctionSchema&, const std::vector<c10::IValue>& args) {
    // PyTorch has no meta kernel for constant_pad_nd: each pad pair widens a trailing dim; CPU
    // keeps the input's layout.
    const at::Tensor& x = args[0].toTensor();
    std::vector<int64_t> sizes = x.sizes().vec(), pad = args[1].toIntVector();
    for (size_t i = 0; 2 * i + 1 < pad.size(); ++i) sizes[sizes.size() - 1 - i] += pad[2 * i] + pad[2 * i + 1];
    return std::vector<c10::IValue>{at::empty(sizes, x.options().memory_format(x.suggest_memory_format()))};
  };
  register_lowering({"constant_pad_nd", "constant_pad_nd.out"}, [](LoweringContext& c) {
    Value x = c.input(0);
    auto pad = c.int_list(1);
    int64_t rank = x.type.rank();
    std::vector<int64_t> low(rank, 0), high(rank, 0), interior(rank, 0);
    for (size_t i = 0; i + 1 < pad.size() + 1 && i / 2 < static_cast<size_t>(rank); i += 2) {
      int64_t d = rank - 1 - static_cast<int64_t>(i / 2);
      low[d] = pad[i];
      high[d] = pad[i + 1];
    }
    if (c.padded()) return Values{padded_constant_pad(c, x, low)};
    // Negative padding crops: pad by the positive parts, then slice off the negative ones.
    std::vector<int64_t> plow(rank), phigh(rank);
    for (int64_t d = 0; d < rank; ++d) {
      plow[d] = std::max<int64_t>(low[d], 0);
      phigh[d] = std::max<int64_t>(high[d], 0);
    }
    Value padded = c.b.pad(x, cast(c.b, c.input(2), x.type.dtype), plow, phigh, interior);
    std::vector<int64_t> start(rank), limit = padded.type.dims, step(rank, 1);
    for (int64_t d = 0; d < rank; ++d) {
      start[d] = std::max<int64_t>(-low[d], 0);
      limit[d] -= std::max<int64_t>(-high[d], 0);
    }
    return Values{c.b.slice(padded, start, limit, step)};
  }, [&] {
    // Labels shifted by a pad (Hugging Face's causal LM loss pads the length by one): a padded
    // call finds the pad's end from the exact sizes (padded_constant_pad).
    PaddingRule rule;
    rule.needs_sizes = true;
    return padded(pad_options, rule);
  }());
  register_lowering({"fill_.Tensor", "fill.Tensor", "fill.Tensor_out"}, [](LoweringContext& c) {
    return Values{c.broadcast_to_output(c.input(1))};
  });
}

}  // namespace torchtpu::aten
