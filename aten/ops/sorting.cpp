// Sorting and order statistics: sort, topk, median, nanmedian, kthvalue. NaN sorts last
// (largest), as in PyTorch.
#include "aten/lowering.h"
#include "aten/ops/lowering_util.h"

namespace torchtpu::aten {
namespace {

// The op's dimension argument `i` checked as CPU checks it (IndexError out of range), before
// PyTorch's meta kernel (some assert instead, some skip the check).
MetaFn dim_checked(size_t i) {
  return checked_meta([i](const std::vector<c10::IValue>& args) {
    if (args[i].isInt()) c10::maybe_wrap_dim(args[i].toInt(), args[0].toTensor().dim());
  });
}

// Sort comparator placing NaN last (largest), as PyTorch does.
hlo::RegionBody sort_order(bool descending, DType dtype) {
  return [descending, dtype](hlo::Builder& b, const Values& a) {
    Value x = a[0], y = a[1];
    Value less = b.compare(descending ? Compare::kGT : Compare::kLT, x, y);
    if (!is_floating(dtype)) return Values{less};
    Value x_nan = is_nan(x), y_nan = is_nan(y);
    // ascending: non-NaN before NaN; descending: NaN first.
    Value nan_order = descending ? b.binary(BinaryOp::kAnd, x_nan, b.unary(UnaryOp::kNot, y_nan))
                                 : b.binary(BinaryOp::kAnd, y_nan, b.unary(UnaryOp::kNot, x_nan));
    return Values{b.binary(BinaryOp::kOr, nan_order, less)};
  };
}

std::pair<Value, Value> sort_along(LoweringContext& c, const Value& x, int64_t dim, bool descending) {
  Value idx = c.b.iota({DType::kS64, x.type.dims}, dim);
  auto body = sort_order(descending, x.type.dtype);
  auto sorted = c.b.sort({x, idx}, dim, true, [body](hlo::Builder& b, const Values& a) {
    return body(b, {a[0], a[1]});
  });
  return {sorted[0], sorted[1]};
}

// Each slice's element at position `k` (one per slice: the slice dims without `dim`) of the
// sorted values along `dim`, with its index before sorting.
std::pair<Value, Value> pick(hlo::Builder& b, const Value& sorted, const Value& order, int64_t dim, const Value& k) {
  std::vector<int64_t> kept = dims_except(sorted.type.rank(), dim);
  hlo::TensorType positions{DType::kS64, sorted.type.dims};
  Value at_k = b.compare(Compare::kEQ, b.iota(positions, dim), b.broadcast_in_dim(k, sorted.type.dims, kept));
  auto sum = [&](const Value& v) {
    return b.reduce({b.select(at_k, v, b.constant(0, v.type))}, {b.constant(0, {v.type.dtype, {}})}, {dim},
                    combine_with(BinaryOp::kAdd))[0];
  };
  return {sum(sorted), sum(order)};
}

// median / nanmedian along `dim` -> (value, index). The lower median of the slice; median gives
// the first NaN when the slice has one, nanmedian the median of the other values.
std::pair<Value, Value> median_along(hlo::Builder& b, const Value& x, int64_t dim, bool ignore_nan,
                                     const std::pair<Value, Value>& sorted) {
  int64_t n = x.type.dims[dim];
  Value nan = b.convert(is_nan(x), DType::kS64);
  Value nans = b.reduce({nan}, {b.constant(0, {DType::kS64, {}})}, {dim}, combine_with(BinaryOp::kAdd))[0];
  Value count = b.constant_int(n, nans.type) - nans;
  Value lower_median = (count - b.constant(1, count.type)) / b.constant(2, count.type);
  Value k = lower_median;
  if (!ignore_nan) {
    Value middle = b.constant_int((n - 1) / 2, count.type);
    k = b.select(b.compare(Compare::kGT, nans, b.constant(0, nans.type)), count, middle);
  }
  return pick(b, sorted.first, sorted.second, dim, b.binary(BinaryOp::kMaximum, k, b.constant(0, k.type)));
}

// median(self) / nanmedian(self): over all elements (NaN for an empty tensor).
Lowering median_all(bool ignore_nan) {
  return [ignore_nan](LoweringContext& c) {
    Value x = c.input_uncast(0);
    int64_t n = x.type.element_count();
    if (n == 0) return Values{c.b.constant(NAN, c.out())};
    x = c.b.reshape(x, {n});
    return Values{median_along(c.b, x, 0, ignore_nan, sort_along(c, x, 0, false)).first};
  };
}

// median.dim / nanmedian.dim (self, dim, keepdim) -> (values, indices).
Lowering median_dim(bool ignore_nan) {
  return [ignore_nan](LoweringContext& c) {
    Value x = c.input_uncast(0);
    if (x.type.rank() == 0) return Values{x, c.b.constant(0, {DType::kS64, {}})};
    int64_t dim = wrap_dim(c.arg(1).toInt(), x.type.rank());
    auto [value, index] = median_along(c.b, x, dim, ignore_nan, sort_along(c, x, dim, false));
    return Values{c.b.reshape(value, c.out(0).dims), c.b.reshape(index, c.out(1).dims)};
  };
}

// mode(self, dim, keepdim) -> (values, indices): the most frequent value along dim, the smallest
// among equally frequent ones, and its last position (CPU's choices). Each element's count is a
// sum over an [n, n] equality mask; one reduction then picks by (count, value, position).
Values mode(LoweringContext& c) {
  hlo::Builder& b = c.b;
  Value x = c.input_uncast(0);
  int64_t rank = x.type.rank(), dim = rank ? wrap_dim(c.arg(1).toInt(), rank) : 0;
  if (rank == 0) return Values{x, b.constant(0, c.out(1))};
  std::vector<int64_t> pairs = x.type.dims, other(x.type.rank());
  pairs.insert(pairs.begin() + dim + 1, x.type.dims[dim]);  // [.., n (i), n (j), ..]
  for (int64_t d = 0; d < rank; ++d) other[d] = d < dim ? d : d + 1;
  std::vector<int64_t> mine = other;
  mine[dim] = dim;
  Value same = b.compare(Compare::kEQ, b.broadcast_in_dim(x, pairs, mine), b.broadcast_in_dim(x, pairs, other));
  Value count = b.reduce({b.convert(same, DType::kS64)}, {b.constant(0, {DType::kS64, {}})}, {dim + 1},
                         combine_with(BinaryOp::kAdd))[0];
  Value index = b.iota({DType::kS64, x.type.dims}, dim);
  auto better = [](hlo::Builder& rb, const Values& a) {  // (count, value, index) of the accumulator, then of the element
    Value more = rb.compare(Compare::kGT, a[3], a[0]), tie = rb.compare(Compare::kEQ, a[3], a[0]);
    Value smaller = rb.compare(Compare::kLT, a[4], a[1]), equal = rb.compare(Compare::kEQ, a[4], a[1]);
    if (is_floating(a[1].type.dtype)) {  // NaN counts as the largest value
      Value nan_x = is_nan(a[4]), nan_acc = is_nan(a[1]);
      smaller = rb.binary(BinaryOp::kOr, smaller, rb.binary(BinaryOp::kAnd, nan_acc, rb.unary(UnaryOp::kNot, nan_x)));
      equal = rb.binary(BinaryOp::kOr, equal, rb.binary(BinaryOp::kAnd, nan_acc, nan_x));
    }
    Value later = rb.binary(BinaryOp::kAnd, equal, rb.compare(Compare::kGT, a[5], a[2]));
    Value take = rb.binary(BinaryOp::kOr, more, rb.binary(BinaryOp::kAnd, tie, rb.binary(BinaryOp::kOr, smaller, later)));
    return Values{rb.select(take, a[3], a[0]), rb.select(take, a[4], a[1]), rb.select(take, a[5], a[2])};
  };
  Values picked = b.reduce({count, x, index}, {b.constant(-1, {DType::kS64, {}}), b.constant(0, {x.type.dtype, {}}),
                                               b.constant(-1, {DType::kS64, {}})},
                      {dim}, better);
  return Values{b.reshape(picked[1], c.out(0).dims), b.reshape(picked[2], c.out(1).dims)};
}

}  // namespace

TORCHTPU_LOWERINGS(sorting) {
  register_lowering({"sort.stable", "sort.values_stable"}, [](LoweringContext& c) {
    Value x = c.input_uncast(0);  // (self, stable, dim, descending)
    if (x.type.rank() == 0) return Values{x, c.b.constant(0, {DType::kS64, {}})};
    auto [values, indices] = sort_along(c, x, wrap_dim(c.arg(2).toInt(), x.type.rank()), c.arg(3).toBool());
    return Values{values, indices};
  }, with_meta(dim_checked(2)));
  register_lowering({"sort", "sort.values"}, [](LoweringContext& c) {
    Value x = c.input_uncast(0);  // (self, dim, descending)
    if (x.type.rank() == 0) return Values{x, c.b.constant(0, {DType::kS64, {}})};
    auto [values, indices] = sort_along(c, x, wrap_dim(c.arg(1).toInt(), x.type.rank()), c.arg(2).toBool());
    return Values{values, indices};
  }, with_meta(dim_checked(1)));
  register_lowering({"topk", "topk.values"}, [](LoweringContext& c) {
    Value x = c.input_uncast(0);  // (self, k, dim, largest, sorted)
    if (x.type.rank() == 0) return Values{x, c.b.constant(0, {DType::kS64, {}})};
    int64_t k = c.arg(1).toInt(), dim = wrap_dim(c.arg(2).toInt(), x.type.rank());
    auto [values, indices] = sort_along(c, x, dim, c.arg(3).toBool());
    std::vector<int64_t> start(x.type.rank(), 0), limit = x.type.dims, step(x.type.rank(), 1);
    limit[dim] = k;
    return Values{c.b.slice(values, start, limit, step), c.b.slice(indices, start, limit, step)};
  }, with_meta(dim_checked(2)));
  register_lowering({"mode", "mode.values"}, mode, with_meta(dim_checked(1)));
  register_lowering({"median", "median.out"}, median_all(false));
  register_lowering({"nanmedian", "nanmedian.out"}, median_all(true));
  register_lowering({"median.dim", "median.dim_values"}, median_dim(false), with_meta(dim_checked(1)));
  register_lowering({"nanmedian.dim", "nanmedian.dim_values"}, median_dim(true), with_meta(dim_checked(1)));
  register_lowering({"kthvalue", "kthvalue.values"}, [](LoweringContext& c) {
    Value x = c.input_uncast(0);  // (self, k, dim, keepdim) -> (values, indices)
    if (x.type.rank() == 0) return Values{x, c.b.constant(0, {DType::kS64, {}})};
    int64_t k = c.arg(1).toInt(), dim = wrap_dim(c.arg(2).toInt(), x.type.rank());
    auto [values, indices] = sort_along(c, x, dim, false);
    std::vector<int64_t> start(x.type.rank(), 0), limit = x.type.dims, step(x.type.rank(), 1);
    start[dim] = k - 1;
    limit[dim] = k;
    return Values{c.b.reshape(c.b.slice(values, start, limit, step), c.out(0).dims),
                  c.b.reshape(c.b.slice(indices, start, limit, step), c.out(1).dims)};
  }, with_meta(checked_meta([](const std::vector<c10::IValue>& args) {
    const at::Tensor& x = args[0].toTensor();
    int64_t dim = c10::maybe_wrap_dim(args[2].toInt(), x.dim()), k = args[1].toInt();
    TORCH_CHECK(k >= 1 && k <= (x.dim() > 0 ? x.size(dim) : 1), "kthvalue(): selected number k out of range for dimension ", dim);
  })));
}

// The dtypes CPU's kernels refuse that PyTorch's meta kernels let through (aten/dtype_support.h),
// measured against CPU PyTorch 2.11.
TORCHTPU_LOWERINGS(sorting_cpu_refusals) {
  // float8: CPU stores, converts, copies, indexes, multiplies and matmuls them, little else.
  refuse_on_cpu("sort", {Refused::kFloat8, "sorting_kernel_method_name"});
}

}  // namespace torchtpu::aten
