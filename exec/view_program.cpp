#include "exec/view_program.h"

#include <stdexcept>

namespace torchtpu::exec {
namespace {

using hlo::Builder;
using hlo::Value;

DType complex_part(DType t) { return t == DType::kC128 ? DType::kF64 : DType::kF32; }

// Reinterprets a flat buffer as another element type: a bitcast between types of one width, or
// complex <-> its real parts (view_as_real), where [N] complex is [2N] interleaved reals.
Value as_dtype(Builder& b, const Value& v, DType to) {
  DType from = v.type.dtype;
  if (from == to) return v;
  int64_t n = v.type.dims.at(0);
  if (is_complex(from) && to == complex_part(from)) {
    Value re = b.reshape(b.unary(hlo::UnaryOp::kReal, v), {n, 1});
    Value im = b.reshape(b.unary(hlo::UnaryOp::kImag, v), {n, 1});
    return b.reshape(b.concatenate({re, im}, 1), {2 * n});
  }
  if (is_complex(to) && from == complex_part(to)) {
    Value pairs = b.reshape(v, {n / 2, 2});
    Value re = b.reshape(b.slice(pairs, {0, 0}, {n / 2, 1}, {1, 1}), {n / 2});
    Value im = b.reshape(b.slice(pairs, {0, 1}, {n / 2, 2}, {1, 1}), {n / 2});
    return b.binary(hlo::BinaryOp::kComplex, re, im);
  }
  if (element_size(from) != element_size(to) || is_complex(from) || is_complex(to))
    throw std::invalid_argument(std::string("cannot view ") + std::string(dtype_name(from)) +
                                " storage as " + std::string(dtype_name(to)));
  return b.bitcast_convert(v, to);
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
  Value gathered = b.gather(typed, linear_indices(b, view), {{}, {0}, {0}, 1}, {1}, {numel});
  return b.reshape(gathered, view.sizes);
}

Value write_view(Builder& b, const Value& flat, const View& view, const Value& value) {
  int64_t numel = view.numel();
  if (numel == 0) return flat;
  if (is_complex(flat.type.dtype) != is_complex(view.dtype)) {  // write through view_as_real/complex
    Value as_view_type = as_dtype(b, flat, view.dtype);
    return as_dtype(b, write_view(b, as_view_type, view, value), flat.type.dtype);
  }
  Value elems = as_dtype(b, b.reshape(value, {numel}), flat.type.dtype);
  if (covers_whole(view, flat)) return elems;
  if (view.is_contiguous()) {
    Value start = b.constant(static_cast<double>(view.offset), {DType::kS64, {}});
    return b.dynamic_update_slice(flat, elems, {start});
  }
  // Where a view overlaps itself (stride 0) one of the written values lands, as PyTorch leaves
  // such writes unspecified.
  auto replace = [](Builder&, const std::vector<Value>& a) { return std::vector<Value>{a[1]}; };
  return b.scatter(flat, linear_indices(b, view), elems, {{}, {0}, {0}, 1}, replace);
}

}  // namespace torchtpu::exec
