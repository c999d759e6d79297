// segment_reduce and its backward: data reduced over consecutive segments of one dimension, the
// segments given by their lengths or offsets (device tensors: their values stay runtime inputs).
// A segment is a mask over the dimension (start <= j < end); reductions are masked reductions
// over it, and the backward spreads each segment's value back to its elements with the same
// mask. Elements past the last segment (lengths summing to less than the dimension) get no
// gradient, as on CPU.
#include <optional>

#include "aten/lowering.h"
#include "aten/ops/math.h"
#include "aten/ops/matrix_util.h"

namespace torchtpu::aten {
namespace {

using hlo::Builder;

// The segments of data's dimension `axis` ([D..., J, R...] with D the dims before it).
struct Segments {
  Value member;   // [D..., S, J] bool: element j lies in segment s
  Value lengths;  // [D..., S] s64
};

// dims 0..n-1 of a value placed at the same positions of a larger shape.
std::vector<int64_t> leading(int64_t n) {
  std::vector<int64_t> d;
  for (int64_t i = 0; i < n; ++i) d.push_back(i);
  return d;
}

// From the lengths ([D..., S]) or offsets ([D..., S + 1]) argument, whichever the call passed.
Segments segments(LoweringContext& c, int64_t axis, int64_t count, size_t lengths_arg, size_t offsets_arg) {
  Builder& b = c.b;
  Math m{b};
  Value starts, ends, lengths;
  if (c.has(lengths_arg)) {
    lengths = cast(b, c.input_uncast(lengths_arg), DType::kS64);
    int64_t s = lengths.type.dims.back();
    std::vector<int64_t> square = lengths.type.dims;
    square.push_back(s);  // [D..., s, t]: t <= s
    hlo::TensorType index{DType::kS64, square};
    std::vector<int64_t> map = leading(axis);
    map.push_back(axis + 1);
    Value upto = b.compare(Compare::kLE, b.iota(index, axis + 1), b.iota(index, axis));
    ends = m.sum(b.select(upto, b.broadcast_in_dim(lengths, square, map), b.constant(0, index)), {axis + 1});
    starts = ends - lengths;
  } else {
    Value offsets = cast(b, c.input_uncast(offsets_arg), DType::kS64);
    int64_t s = offsets.type.dims.back() - 1;
    std::vector<int64_t> start(offsets.type.rank(), 0), limit = offsets.type.dims, step(offsets.type.rank(), 1);
    limit.back() = s;
    starts = b.slice(offsets, start, limit, step);
    start.back() = 1;
    limit.back() = s + 1;
    ends = b.slice(offsets, start, limit, step);
    lengths = ends - starts;
  }
  std::vector<int64_t> member_dims = lengths.type.dims;
  member_dims.push_back(count);
  std::vector<int64_t> map = leading(axis + 1);
  Value j = b.iota({DType::kS64, member_dims}, axis + 1);
  Value after_start = b.compare(Compare::kGE, j, b.broadcast_in_dim(starts, member_dims, map));
  Value before_end = b.compare(Compare::kLT, j, b.broadcast_in_dim(ends, member_dims, map));
  return {b.binary(BinaryOp::kAnd, after_start, before_end), lengths};
}

// Shapes around the [D..., S, J, R...] layout where each segment sees every element.
struct Layout {
  int64_t axis;
  std::vector<int64_t> all;  // [D..., S, J, R...]

  Layout(const hlo::TensorType& data, int64_t axis, int64_t segments) : axis(axis), all(data.dims) {
    all.insert(all.begin() + axis, segments);
  }
  // data-shaped [D..., J, R...] (skip S) or output-shaped [D..., S, R...] (skip J) values
  Value spread(Builder& b, const Value& v, bool data_shaped) const {
    std::vector<int64_t> map;
    int64_t skipped = data_shaped ? axis : axis + 1;
    for (int64_t d = 0; d < static_cast<int64_t>(all.size()); ++d)
      if (d != skipped) map.push_back(d);
    return b.broadcast_in_dim(v, all, map);
  }
  Value mask(Builder& b, const Segments& s) const { return b.broadcast_in_dim(s.member, all, leading(axis + 2)); }
  std::vector<int64_t> out_dims() const {  // [D..., S, R...]
    std::vector<int64_t> out = all;
    out.erase(out.begin() + axis + 1);
    return out;
  }
  Value lengths(Builder& b, const Segments& s, DType t) const {  // output-shaped
    return b.broadcast_in_dim(b.convert(s.lengths, t), out_dims(), leading(axis + 1));
  }
};

Value masked_reduce(Builder& b, const Value& in, const Value& x, int64_t dim, BinaryOp op, double identity) {
  Value kept = b.select(in, x, b.constant(identity, x.type));
  bool extreme = op == BinaryOp::kMaximum || op == BinaryOp::kMinimum;
  return b.reduce({kept}, {b.constant(identity, {x.type.dtype, {}})}, {dim},
                  extreme ? nan_extreme_with(op) : combine_with(op))[0];
}

// A bfloat16/float16 sum or product as CPU's kernel folds it: from `start` (output-shaped), one
// element at a time in order, rounding the running value to `stored` after each.
Value rounded_fold(Builder& b, const Value& in, const Value& x, int64_t dim, BinaryOp op, double identity,
                   const Value& start, DType stored) {
  Value kept = b.select(in, x, b.constant(identity, x.type));
  return counted_loop(b, x.type.dims[dim], {rounded_to(b, start, stored), kept}, [&](Builder& lb, const Value& j, const Values& s) {
    return Values{rounded_to(lb, lb.binary(op, s[0], slice_at(lb, s[1], dim, j)), stored), s[1]};
  })[0];
}

// Where both directions start: the data, the reduction, the segments and their layout, from the
// argument positions (data, reduce, lengths, offsets, axis).
struct SegmentCall {
  Value data;
  DType acc;
  int64_t axis;
  std::string reduce;
  Segments seg;
  Layout layout;

  SegmentCall(LoweringContext& c, size_t data_arg, size_t reduce_arg, size_t lengths_arg, size_t offsets_arg,
              size_t axis_arg)
      : data(c.input_uncast(data_arg)),
        acc(accumulator(data.type.dtype)),
        axis(wrap_dim(c.arg(axis_arg).toInt(), data.type.rank())),
        reduce(c.arg(reduce_arg).toStringRef()),
        seg(segments(c, axis, data.type.dims[axis], lengths_arg, offsets_arg)),
        layout(data.type, axis, seg.lengths.type.dims.back()) {}

  Values forward(LoweringContext& c) const;
  Values backward(LoweringContext& c) const;
};

// segment_reduce(data, reduce, *, lengths, indices, offsets, axis, unsafe, initial)
Values SegmentCall::forward(LoweringContext& c) const {
  Builder& b = c.b;
  Math m{b};
  Value x = layout.spread(b, cast(b, data, acc), true), in = layout.mask(b, seg);
  int64_t j = axis + 1;
  Value r;
  std::optional<Value> initial;
  if (c.has(7)) initial = b.broadcast_in_dim(cast(b, c.input_uncast(7), acc), layout.out_dims(), {});
  DType stored = c.out().dtype;
  bool folds = stored != acc;  // CPU folds bfloat16/float16 in their own dtype
  if (reduce == "sum" || reduce == "mean") {
    if (folds) {
      r = rounded_fold(b, in, x, j, BinaryOp::kAdd, 0, initial ? *initial : b.constant(0, {acc, layout.out_dims()}), stored);
    } else {
      r = masked_reduce(b, in, x, j, BinaryOp::kAdd, 0);
      if (initial) r = r + (*initial);
    }
    if (reduce == "mean") {
      Value n = layout.lengths(b, seg, acc);
      r = r / n;
      if (initial) r = b.select(b.compare(Compare::kEQ, n, m.k(0, n)), *initial, r);
    }
  } else if (reduce == "prod") {
    if (folds) {
      r = rounded_fold(b, in, x, j, BinaryOp::kMultiply, 1, initial ? *initial : b.constant(1, {acc, layout.out_dims()}), stored);
    } else {
      r = masked_reduce(b, in, x, j, BinaryOp::kMultiply, 1);
      if (initial) r = r * (*initial);
    }
  } else {
    bool is_max = reduce == "max";
    TORCH_CHECK(is_max || reduce == "min", "segment_reduce: unsupported reduction ", reduce);
    BinaryOp op = is_max ? BinaryOp::kMaximum : BinaryOp::kMinimum;
    r = masked_reduce(b, in, x, j, op, is_max ? -INFINITY : INFINITY);
    if (initial) r = nan_extreme(b, op, r, *initial);
  }
  return {cast(b, r, c.out().dtype)};
}

// _segment_reduce_backward(grad, output, data, reduce, *, lengths, offsets, axis, initial)
Values SegmentCall::backward(LoweringContext& c) const {
  Builder& b = c.b;
  Math m{b};
  Value in = layout.mask(b, seg), x = cast(b, data, acc), x_all = layout.spread(b, x, true);
  Value grad = cast(b, c.input_uncast(0), acc), out = cast(b, c.input_uncast(1), acc);
  // each element gets its segment's value (0 outside every segment)
  auto to_elements = [&](const Value& per_segment) {
    return masked_reduce(b, in, layout.spread(b, per_segment, false), axis, BinaryOp::kAdd, 0);
  };
  Value in_any = b.reduce({in}, {b.constant(0, {DType::kBool, {}})}, {axis}, combine_with(BinaryOp::kOr))[0];
  Value r;
  if (reduce == "sum") {
    r = to_elements(grad);
  } else if (reduce == "mean") {
    r = to_elements(grad / layout.lengths(b, seg, acc));
  } else if (reduce == "prod") {
    // the product of the segment's other elements: output / x without zeros, the product of the
    // non-zeros (times initial) for a segment's only zero, else 0
    Value zero_all = b.compare(Compare::kEQ, x_all, m.k(0, x_all));
    Value zeros = masked_reduce(b, in, b.convert(zero_all, acc), axis + 1, BinaryOp::kAdd, 0);
    Value nonzero_product = masked_reduce(b, b.binary(BinaryOp::kAnd, in, b.unary(UnaryOp::kNot, zero_all)), x_all,
                                          axis + 1, BinaryOp::kMultiply, 1);
    if (c.has(7)) nonzero_product = nonzero_product * b.broadcast_in_dim(cast(b, c.input_uncast(7), acc), nonzero_product.type.dims, {});
    Value g = to_elements(grad), z = to_elements(zeros);
    Value only_zero = b.binary(BinaryOp::kAnd, b.compare(Compare::kEQ, x, m.k(0, x)), b.compare(Compare::kEQ, z, m.k(1, z)));
    r = b.select(b.compare(Compare::kEQ, z, m.k(0, z)), g * to_elements(out) / x,
                 b.select(only_zero, g * to_elements(nonzero_product), m.k(0, x)));
  } else {  // max / min: shared equally by the elements equal to the result
    Value tie_all = b.binary(BinaryOp::kAnd, in, b.compare(Compare::kEQ, x_all, layout.spread(b, out, false)));
    Value ties = masked_reduce(b, tie_all, b.convert(tie_all, acc), axis + 1, BinaryOp::kAdd, 0);
    Value is_tie = b.reduce({tie_all}, {b.constant(0, {DType::kBool, {}})}, {axis}, combine_with(BinaryOp::kOr))[0];
    r = b.select(is_tie, to_elements(b.select(b.compare(Compare::kEQ, ties, m.k(0, ties)), m.k(0, ties), grad / ties)),
                 m.k(0, x));
  }
  return {cast(b, b.select(in_any, r, m.k(0, r)), c.out().dtype)};
}

}  // namespace

TORCHTPU_LOWERINGS(segment_reduce) {
  register_lowering({"segment_reduce", "segment_reduce.out"},
                    [](LoweringContext& c) { return SegmentCall(c, 0, 1, 2, 4, 5).forward(c); });
  register_lowering({"_segment_reduce_backward", "_segment_reduce_backward.out"},
                    [](LoweringContext& c) { return SegmentCall(c, 2, 3, 4, 5, 6).backward(c); });
}

}  // namespace torchtpu::aten
