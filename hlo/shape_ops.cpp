// Ops that move data without arithmetic: broadcast, reshape, transpose, slices, concat, pad, iota.
#include "hlo/attributes.h"
#include "hlo/builder.h"

namespace torchtpu::hlo {
namespace {

void require_index_scalars(const std::vector<Value>& indices, int64_t rank) {
  require(static_cast<int64_t>(indices.size()) == rank, "need one start index per dimension");
  for (const Value& i : indices)
    require(i.type.dims.empty() && !is_floating(i.type.dtype), "start indices are integer scalars");
}

}  // namespace

Value Builder::broadcast_in_dim(const Value& x, const std::vector<int64_t>& dims,
                                const std::vector<int64_t>& broadcast_dimensions) {
  require(static_cast<int64_t>(broadcast_dimensions.size()) == x.type.rank(),
          "broadcast_dimensions needs one entry per operand dimension");
  for (size_t i = 0; i < broadcast_dimensions.size(); ++i) {
    int64_t d = broadcast_dimensions[i];
    require(d >= 0 && d < static_cast<int64_t>(dims.size()), "broadcast dimension out of range");
    require(x.type.dims[i] == 1 || x.type.dims[i] == dims[d], "broadcast of incompatible size");
  }
  return emit1("stablehlo.broadcast_in_dim", {x}, {x.type.dtype, dims},
               "broadcast_dimensions = " + i64_array(broadcast_dimensions));
}

Value Builder::reshape(const Value& x, const std::vector<int64_t>& dims) {
  TensorType type{x.type.dtype, dims};
  require(type.element_count() == x.type.element_count(),
          "reshape " + x.type.str() + " to " + type.str() + " changes the element count");
  return emit1("stablehlo.reshape", {x}, type);
}

Value Builder::transpose(const Value& x, const std::vector<int64_t>& permutation) {
  require(static_cast<int64_t>(permutation.size()) == x.type.rank(), "permutation rank mismatch");
  TensorType type{x.type.dtype, {}};
  for (int64_t p : permutation) {
    require(p >= 0 && p < x.type.rank(), "permutation entry out of range");
    type.dims.push_back(x.type.dims[p]);
  }
  return emit1("stablehlo.transpose", {x}, type, "permutation = " + i64_array(permutation));
}

Value Builder::slice(const Value& x, const std::vector<int64_t>& start,
                     const std::vector<int64_t>& limit, const std::vector<int64_t>& strides) {
  int64_t rank = x.type.rank();
  require(static_cast<int64_t>(start.size()) == rank &&
              static_cast<int64_t>(limit.size()) == rank &&
              static_cast<int64_t>(strides.size()) == rank,
          "slice needs start, limit and stride per dimension");
  TensorType type{x.type.dtype, {}};
  for (int64_t i = 0; i < rank; ++i) {
    require(0 <= start[i] && start[i] <= limit[i] && limit[i] <= x.type.dims[i] && strides[i] > 0,
            "slice bounds out of range for " + x.type.str());
    type.dims.push_back((limit[i] - start[i] + strides[i] - 1) / strides[i]);
  }
  return emit1("stablehlo.slice", {x}, type,
               "start_indices = " + i64_array(start) + ", limit_indices = " + i64_array(limit) +
                   ", strides = " + i64_array(strides));
}

Value Builder::dynamic_slice(const Value& x, const std::vector<Value>& start_indices,
                             const std::vector<int64_t>& sizes) {
  require_index_scalars(start_indices, x.type.rank());
  std::vector<Value> operands{x};
  operands.insert(operands.end(), start_indices.begin(), start_indices.end());
  return emit1("stablehlo.dynamic_slice", operands, {x.type.dtype, sizes},
               "slice_sizes = " + i64_array(sizes));
}

Value Builder::dynamic_update_slice(const Value& x, const Value& update,
                                    const std::vector<Value>& start_indices) {
  require_index_scalars(start_indices, x.type.rank());
  require(update.type.dtype == x.type.dtype && update.type.rank() == x.type.rank(),
          "dynamic_update_slice update must match the operand's dtype and rank");
  std::vector<Value> operands{x, update};
  operands.insert(operands.end(), start_indices.begin(), start_indices.end());
  return emit1("stablehlo.dynamic_update_slice", operands, x.type);
}

Value Builder::concatenate(const std::vector<Value>& xs, int64_t dimension) {
  require(!xs.empty(), "concatenate of nothing");
  TensorType type = xs[0].type;
  require(dimension >= 0 && dimension < type.rank(), "concatenate dimension out of range");
  for (size_t i = 1; i < xs.size(); ++i) {
    TensorType t = xs[i].type;
    require(t.dtype == type.dtype && t.rank() == type.rank(), "concatenate operands differ");
    for (int64_t d = 0; d < type.rank(); ++d)
      require(d == dimension || t.dims[d] == type.dims[d], "concatenate shapes differ");
    type.dims[dimension] += t.dims[dimension];
  }
  return emit1("stablehlo.concatenate", xs, type, "dimension = " + i64_attr(dimension));
}

Value Builder::pad(const Value& x, const Value& padding_value, const std::vector<int64_t>& low,
                   const std::vector<int64_t>& high, const std::vector<int64_t>& interior) {
  int64_t rank = x.type.rank();
  require(static_cast<int64_t>(low.size()) == rank &&
              static_cast<int64_t>(high.size()) == rank &&
              static_cast<int64_t>(interior.size()) == rank,
          "pad needs low, high and interior per dimension");
  TensorType type{x.type.dtype, {}};
  for (int64_t i = 0; i < rank; ++i) {
    int64_t n = x.type.dims[i];
    type.dims.push_back(low[i] + high[i] + n + (n > 0 ? (n - 1) * interior[i] : 0));
  }
  return emit1("stablehlo.pad", {x, padding_value}, type,
               "edge_padding_low = " + i64_array(low) + ", edge_padding_high = " +
                   i64_array(high) + ", interior_padding = " + i64_array(interior));
}

Value Builder::reverse(const Value& x, const std::vector<int64_t>& dimensions) {
  for (int64_t d : dimensions) require(d >= 0 && d < x.type.rank(), "reverse dimension out of range");
  return emit1("stablehlo.reverse", {x}, x.type, "dimensions = " + i64_array(dimensions));
}

Value Builder::iota(const TensorType& type, int64_t dimension) {
  require(dimension >= 0 && dimension < type.rank(), "iota dimension out of range");
  return emit1("stablehlo.iota", {}, type, "iota_dimension = " + i64_attr(dimension));
}

}  // namespace torchtpu::hlo
