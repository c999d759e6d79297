// Shorthands for lowerings of matrix ops: batches of matrices in the last two dimensions.
#pragma once

#include <utility>
#include <vector>

#include "aten/lowering.h"
#include "aten/ops/lowering_util.h"

namespace torchtpu::aten {

using hlo::Builder;

// `x` broadcast to `batch` leading dimensions followed by its own last two.
inline Value with_batch(Builder& b, const Value& x, std::vector<int64_t> batch) {
  batch.push_back(x.type.dims[x.type.rank() - 2]);
  batch.push_back(x.type.dims.back());
  return broadcast_to(b, x, batch);
}

inline std::vector<int64_t> batch_of(const hlo::TensorType& t) { return {t.dims.begin(), t.dims.end() - 2}; }

inline hlo::TensorType index_type(const std::vector<int64_t>& dims) { return {DType::kS64, dims}; }

// x @ y over the last two dimensions, batched over the leading ones, at full float32 precision
// (the iterations of the decompositions must not lose bits to a backend's fast matmul).
inline Value matmul(const Value& x, const Value& y) {
  int64_t rank = x.type.rank();
  std::vector<int64_t> batch;
  for (int64_t d = 0; d < rank - 2; ++d) batch.push_back(d);
  return hlo::builder_of(x).dot_general(x, y, {batch, batch, {rank - 1}, {rank - 2}}, x.type.dtype,
                                        Builder::Precision::kHighest);
}

// Per matrix of the batch, a value ([batch...]) broadcast over `dims` (batch dimensions first).
inline Value per_matrix(Builder& b, const Value& v, const std::vector<int64_t>& dims) {
  std::vector<int64_t> lead;
  for (int64_t d = 0; d < v.type.rank(); ++d) lead.push_back(d);
  return b.broadcast_in_dim(v, dims, lead);
}

// v ([..., k], batch dims first) broadcast to `dims` with its last dimension at `dim`.
inline Value spread_at(Builder& b, const Value& v, const std::vector<int64_t>& dims, int64_t dim) {
  std::vector<int64_t> map;
  for (int64_t d = 0; d + 1 < v.type.rank(); ++d) map.push_back(d);
  map.push_back(dim);
  return b.broadcast_in_dim(v, dims, map);
}

// The lower (or upper) triangle of the last two dimensions from diagonal k on (tril / triu), the
// rest zero.
inline Value triangle(Builder& b, const Value& x, bool lower, int64_t k = 0) {
  hlo::TensorType index{DType::kS64, x.type.dims};
  int64_t rank = x.type.rank();
  Value offset = b.iota(index, rank - 1) - b.iota(index, rank - 2);
  Value keep = b.compare(lower ? Compare::kLE : Compare::kGE, offset, b.constant_int(k, index));
  return b.select(keep, x, b.constant(0, x.type));
}

// Identity matrices shaped like `type` (ones where row == column).
inline Value identity(Builder& b, const hlo::TensorType& type) {
  hlo::TensorType index{DType::kS64, type.dims};
  int64_t rank = type.rank();
  return b.convert(b.compare(Compare::kEQ, b.iota(index, rank - 2), b.iota(index, rank - 1)), type.dtype);
}

// The diagonal of the last two dimensions ([..., m, n] -> [..., min(m, n)]).
inline Value diagonal(Builder& b, const Value& x) {
  int64_t rank = x.type.rank();
  hlo::TensorType index{DType::kS64, x.type.dims};
  Value on = b.compare(Compare::kEQ, b.iota(index, rank - 2), b.iota(index, rank - 1));
  int64_t keep = x.type.dims[rank - 2] <= x.type.dims[rank - 1] ? rank - 1 : rank - 2;  // sum over the longer
  return b.reduce({b.select(on, x, b.constant(0, x.type))}, {b.constant(0, {x.type.dtype, {}})}, {keep},
                  combine_with(BinaryOp::kAdd))[0];
}

// Slice j of `dim`, the dimension dropped.
inline Value take_slice(Builder& b, const Value& x, int64_t dim, int64_t j) {
  std::vector<int64_t> start(x.type.rank(), 0), limit = x.type.dims, step(x.type.rank(), 1), dims;
  start[dim] = j;
  limit[dim] = j + 1;
  for (int64_t d = 0; d < x.type.rank(); ++d)
    if (d != dim) dims.push_back(x.type.dims[d]);
  return b.reshape(b.slice(x, start, limit, step), dims);
}

// x's slice at the (0-d s64, runtime) index i of `dim`, that dimension dropped.
inline Value slice_at(Builder& b, const Value& x, int64_t dim, const Value& i) {
  std::vector<Value> start;
  std::vector<int64_t> sizes = x.type.dims, dims;
  for (int64_t d = 0; d < x.type.rank(); ++d) {
    start.push_back(d == dim ? i : b.constant(0, i.type));
    if (d != dim) dims.push_back(x.type.dims[d]);
  }
  sizes[dim] = 1;
  return b.reshape(b.dynamic_slice(x, start, sizes), dims);
}

// Where the iota along `dim` of `dims` compares `dir` to the index i: 0-d, or one per matrix of
// the batch ([batch...], the leading dimensions of `dims`).
inline Value positions(Builder& b, const std::vector<int64_t>& dims, int64_t dim, Compare dir, const Value& i) {
  return b.compare(dir, b.iota(index_type(dims), dim), per_matrix(b, i, dims));
}

inline Value conj(Builder& b, const Value& x) {
  if (!is_complex(x.type.dtype)) return x;
  return b.binary(BinaryOp::kComplex, b.unary(UnaryOp::kReal, x), -b.unary(UnaryOp::kImag, x));
}

// The transpose of the last two dimensions, conjugated when `conjugate` (the adjoint).
inline Value transpose_last(Builder& b, const Value& x, bool conjugate = false) {
  std::vector<int64_t> perm;
  for (int64_t d = 0; d < x.type.rank(); ++d) perm.push_back(d);
  std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
  Value t = b.transpose(x, perm);
  return conjugate ? conj(b, t) : t;
}

inline Value adjoint(Builder& b, const Value& x) { return transpose_last(b, x, true); }

// The real part of x (x itself when real).
inline Value real_part(Builder& b, const Value& x) { return is_complex(x.type.dtype) ? b.unary(UnaryOp::kReal, x) : x; }

// The real value x in `like`'s dtype: x + 0i when that is complex.
inline Value real_as(Builder& b, const Value& x, const Value& like) {
  if (!is_complex(like.type.dtype)) return x;
  return b.binary(BinaryOp::kComplex, x, b.constant(0, x.type));
}

}  // namespace torchtpu::aten
