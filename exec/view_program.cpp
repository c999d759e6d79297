#include "exec/view_program.h"

#include <algorithm>
#include <optional>
#include <stdexcept>

namespace torchtpu::exec {
namespace {

using hlo::Builder;
using hlo::Value;

// Reinterprets a flat buffer as another element type: a bitcast between types of one width, or
// complex <-> its real parts (view_as_real), where [N] complex is [2N] interleaved reals.
Value as_dtype(Builder& b, const Value& v, DType to) {
  DType from = v.type.dtype;
  if (from == to) return v;
  int64_t n = v.type.dims.at(0);
  if (is_complex(from) && to == component_dtype(from)) {
    Value re = b.reshape(b.unary(hlo::UnaryOp::kReal, v), {n, 1});
    Value im = b.reshape(b.unary(hlo::UnaryOp::kImag, v), {n, 1});
    return b.reshape(b.concatenate({re, im}, 1), {2 * n});
  }
  if (is_complex(to) && from == component_dtype(to)) {
    Value pairs = b.reshape(v, {n / 2, 2});
    Value re = b.reshape(b.slice(pairs, {0, 0}, {n / 2, 1}, {1, 1}), {n / 2});
    Value im = b.reshape(b.slice(pairs, {0, 1}, {n / 2, 2}, {1, 1}), {n / 2});
    return b.binary(hlo::BinaryOp::kComplex, re, im);
  }
  // Complex and another type: through the complex type's interleaved real parts.
  if (is_complex(from)) return as_dtype(b, as_dtype(b, v, component_dtype(from)), to);
  if (is_complex(to)) return as_dtype(b, as_dtype(b, v, component_dtype(to)), to);
  if (from == DType::kBool || to == DType::kBool) return b.convert(v, to);  // bools are 0/1 bytes
  int64_t from_size = static_cast<int64_t>(element_size(from));
  int64_t to_size = static_cast<int64_t>(element_size(to));
  if (from_size >= to_size) return b.reshape(b.bitcast_convert(v, to), {n * (from_size / to_size)});
  // A wider view of narrower storage (bytes seen as float32, as torch.load rebuilds storages).
  int64_t parts = to_size / from_size;
  if (n % parts != 0)
    throw std::invalid_argument(std::string("cannot view ") + std::to_string(n) + " " +
                                std::string(dtype_name(from)) + " elements as " + std::string(dtype_name(to)));
  return b.bitcast_convert(b.reshape(v, {n / parts, parts}), to);
}

bool same_layout(DType a, DType b) {
  return is_complex(a) == is_complex(b) && element_size(a) == element_size(b);
}

// Flat storage index of every view element, as a [numel, 1] s64 tensor (row-major view order).
Value linear_indices(Builder& b, const View& view) {
  int64_t numel = view.numel();
  hlo::TensorType idx_type{DType::kS64, view.sizes};
  Value index = b.constant(static_cast<double>(view.offset), idx_type);
  for (size_t d = 0; d < view.sizes.size(); ++d) {
    if (view.sizes[d] == 1 || view.strides[d] == 0) continue;
    Value along = b.iota(idx_type, static_cast<int64_t>(d));
    Value scaled = b.binary(hlo::BinaryOp::kMultiply, along,
                            b.constant(static_cast<double>(view.strides[d]), idx_type));
    index = b.binary(hlo::BinaryOp::kAdd, index, scaled);
  }
  return b.reshape(index, {numel, 1});
}

int64_t flat_length(const Value& flat) { return flat.type.dims.at(0); }

bool covers_whole(const View& view, const Value& flat) {
  return view.is_contiguous() && view.offset == 0 && view.numel() == flat_length(flat);
}

// A strided view read with slices, a reshape, a transpose and a broadcast instead of a gather,
// when its elements form a box in the flat buffer: distinct non-zero strides, each dividing the
// next larger one with room for its dimension (transposes, permutes, expands, step slices, most
// narrows). Returns nothing when the view is not such a box.
std::optional<Value> read_strided_box(Builder& b, const Value& flat, const View& view) {
  struct Dim {
    int64_t size, stride, index;
  };
  std::vector<Dim> dims;  // the dimensions that move through memory
  for (size_t d = 0; d < view.sizes.size(); ++d)
    if (view.sizes[d] != 1 && view.strides[d] != 0)
      dims.push_back({view.sizes[d], view.strides[d], static_cast<int64_t>(d)});
  if (dims.empty()) return std::nullopt;
  std::sort(dims.begin(), dims.end(), [](const Dim& a, const Dim& c) { return a.stride > c.stride; });
  int64_t step = dims.back().stride;
  if (step <= 0) return std::nullopt;
  for (size_t i = 0; i + 1 < dims.size(); ++i) {
    const Dim& outer = dims[i];
    const Dim& inner = dims[i + 1];
    if (outer.stride % inner.stride != 0 || outer.stride < inner.stride * inner.size) return std::nullopt;
  }
  // Elements at offset + k * step, k < n, laid out as the box [size0, stride0/stride1, ...].
  std::vector<int64_t> box{dims[0].size};
  for (size_t i = 1; i < dims.size(); ++i) box.push_back(dims[i - 1].stride / dims[i].stride);
  int64_t n = dims[0].size * (dims[0].stride / step);
  int64_t available = (flat_length(flat) - view.offset + step - 1) / step;
  Value line = b.slice(flat, {view.offset}, {view.offset + std::min(n, available) * step - (step - 1)}, {step});
  if (available < n) line = b.pad(line, b.constant(0, {flat.type.dtype, {}}), {0}, {n - available}, {0});
  Value boxed = b.reshape(line, box);
  std::vector<int64_t> zeros(box.size(), 0), limits, ones(box.size(), 1);
  for (const Dim& d : dims) limits.push_back(d.size);
  Value sorted = b.slice(boxed, zeros, limits, ones);
  // Back to the view's dimension order, then its size-1 and broadcast (stride 0) dimensions.
  std::vector<size_t> order(dims.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t c) { return dims[a].index < dims[c].index; });
  std::vector<int64_t> perm, moving_dims;
  for (size_t i : order) {
    perm.push_back(static_cast<int64_t>(i));
    moving_dims.push_back(dims[i].index);
  }
  Value ordered = b.transpose(sorted, perm);
  return b.broadcast_in_dim(ordered, view.sizes, moving_dims);
}

// The dimension order in which a view's elements lie in memory, when the view is a permutation
// of a contiguous block (a transpose or permute of a whole tensor, or of a contiguous part of one,
// as an op's output that keeps its input's strides): size-1 dimensions first, then the others by
// decreasing stride. Returns nothing for any other view (gaps, overlaps, broadcasts).
std::optional<std::vector<int64_t>> dense_permutation(const View& view) {
  std::vector<int64_t> ones, moving;
  for (size_t d = 0; d < view.sizes.size(); ++d)
    (view.sizes[d] == 1 ? ones : moving).push_back(static_cast<int64_t>(d));
  std::sort(moving.begin(), moving.end(), [&](int64_t a, int64_t c) { return view.strides[a] > view.strides[c]; });
  int64_t expected = 1;
  for (size_t i = moving.size(); i-- > 0;) {
    if (view.strides[moving[i]] != expected) return std::nullopt;
    expected *= view.sizes[moving[i]];
  }
  ones.insert(ones.end(), moving.begin(), moving.end());
  return ones;
}

}  // namespace

Value read_view(Builder& b, const Value& flat, const View& view) {
  Value typed = as_dtype(b, flat, view.dtype);
  int64_t numel = view.numel();
  if (numel == 0) return b.constant(0, {view.dtype, view.sizes});
  if (covers_whole(view, typed)) return b.reshape(typed, view.sizes);
  if (view.is_contiguous()) {
    Value part = b.slice(typed, {view.offset}, {view.offset + numel}, {1});
    return b.reshape(part, view.sizes);
  }
  if (std::optional<Value> box = read_strided_box(b, typed, view)) return *box;
  Value gathered = b.gather(typed, linear_indices(b, view), {{}, {0}, {0}, 1}, {1}, {numel});
  return b.reshape(gathered, view.sizes);
}

Value write_view(Builder& b, const Value& flat, const View& view, const Value& value) {
  int64_t numel = view.numel();
  if (numel == 0) return flat;
  if (!same_layout(flat.type.dtype, view.dtype)) {  // through view_as_real/complex, or bytes
    Value as_view_type = as_dtype(b, flat, view.dtype);
    return as_dtype(b, write_view(b, as_view_type, view, value), flat.type.dtype);
  }
  // A permuted dense view is written as a contiguous one once its value is transposed into
  // memory order (an op's output that keeps a transposed input's strides).
  std::optional<std::vector<int64_t>> order;
  if (!view.is_contiguous()) order = dense_permutation(view);
  Value in_memory_order = order ? b.transpose(b.reshape(value, view.sizes), *order) : value;
  Value elems = as_dtype(b, b.reshape(in_memory_order, {numel}), flat.type.dtype);
  if (view.is_contiguous() || order) {
    if (view.offset == 0 && numel == flat_length(flat)) return elems;
    Value start = b.constant(static_cast<double>(view.offset), {DType::kS64, {}});
    return b.dynamic_update_slice(flat, elems, {start});
  }
  // Where a view overlaps itself (stride 0) one of the written values lands, as PyTorch leaves
  // such writes unspecified.
  auto replace = [](Builder&, const std::vector<Value>& a) { return std::vector<Value>{a[1]}; };
  return b.scatter(flat, linear_indices(b, view), elems, {{}, {0}, {0}, 1}, replace);
}

}  // namespace torchtpu::exec
