// Ops with dimension numbers or regions: dot_general, reduce, reduce_window, gather, scatter, sort,
// plus while, rng_bit_generator and custom_call.
#include <algorithm>

#include "hlo/attributes.h"
#include "hlo/builder.h"

namespace torchtpu::hlo {
namespace {

bool contains(const std::vector<int64_t>& v, int64_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// Non-empty "name = [..]" entries of a #stablehlo.<...> attribute, comma separated.
void add_list(std::string& s, const char* name, const std::vector<int64_t>& v) {
  if (v.empty()) return;
  if (s.back() != '<') s += ", ";
  s += std::string(name) + " = " + int_list(v);
}

std::string padding_attr(const std::vector<std::pair<int64_t, int64_t>>& padding) {
  std::vector<std::vector<int64_t>> rows;
  for (auto [lo, hi] : padding) rows.push_back({lo, hi});
  return i64_matrix(rows);
}

std::vector<int64_t> or_ones(const std::vector<int64_t>& v, size_t rank) {
  return v.empty() ? std::vector<int64_t>(rank, 1) : v;
}

}  // namespace

namespace {

std::string precision_attr(Builder::Precision p) {
  if (p == Builder::Precision::kDefault) return "";
  std::string one = p == Builder::Precision::kHigh ? "#stablehlo<precision HIGH>" : "#stablehlo<precision HIGHEST>";
  return ", precision_config = [" + one + ", " + one + "]";
}

}  // namespace

Value Builder::dot_general(const Value& lhs, const Value& rhs, const DotDims& d,
                           DType result_dtype, Precision precision) {
  require(d.lhs_batch.size() == d.rhs_batch.size() && d.lhs_contract.size() == d.rhs_contract.size(),
          "dot_general dimension lists differ in length");
  TensorType type{result_dtype, {}};
  for (size_t i = 0; i < d.lhs_batch.size(); ++i) {
    require(lhs.type.dims.at(d.lhs_batch[i]) == rhs.type.dims.at(d.rhs_batch[i]),
            "dot_general batch sizes differ");
    type.dims.push_back(lhs.type.dims[d.lhs_batch[i]]);
  }
  for (size_t i = 0; i < d.lhs_contract.size(); ++i)
    require(lhs.type.dims.at(d.lhs_contract[i]) == rhs.type.dims.at(d.rhs_contract[i]),
            "dot_general contracting sizes differ: " + lhs.type.str() + " x " + rhs.type.str());
  for (int64_t i = 0; i < lhs.type.rank(); ++i)
    if (!contains(d.lhs_batch, i) && !contains(d.lhs_contract, i)) type.dims.push_back(lhs.type.dims[i]);
  for (int64_t i = 0; i < rhs.type.rank(); ++i)
    if (!contains(d.rhs_batch, i) && !contains(d.rhs_contract, i)) type.dims.push_back(rhs.type.dims[i]);

  std::string attr = "#stablehlo.dot<";
  add_list(attr, "lhs_batching_dimensions", d.lhs_batch);
  add_list(attr, "rhs_batching_dimensions", d.rhs_batch);
  add_list(attr, "lhs_contracting_dimensions", d.lhs_contract);
  add_list(attr, "rhs_contracting_dimensions", d.rhs_contract);
  return emit1("stablehlo.dot_general", {lhs, rhs}, type,
               "dot_dimension_numbers = " + attr + ">" + precision_attr(precision));
}

Value Builder::fft(const Value& x, FftType fft_type, const std::vector<int64_t>& fft_length) {
  static constexpr const char* kNames[] = {"FFT", "IFFT", "RFFT", "IRFFT"};
  size_t rank = x.type.dims.size(), n = fft_length.size();
  require(n >= 1 && n <= 3 && n <= rank, "fft transforms 1 to 3 trailing dimensions");
  bool wide = x.type.dtype == DType::kF64 || x.type.dtype == DType::kC128;
  TensorType result = x.type;
  switch (fft_type) {
    case FftType::kFFT:
    case FftType::kIFFT:
      require(is_complex(x.type.dtype), "FFT and IFFT take complex input");
      break;
    case FftType::kRFFT:
      require(is_floating(x.type.dtype), "RFFT takes real input");
      result.dtype = wide ? DType::kC128 : DType::kC64;
      result.dims.back() = fft_length.back() / 2 + 1;
      break;
    case FftType::kIRFFT:
      require(is_complex(x.type.dtype), "IRFFT takes complex input");
      result.dtype = wide ? DType::kF64 : DType::kF32;
      result.dims.back() = fft_length.back();
      break;
  }
  return emit1("stablehlo.fft", {x}, result,
               std::string("fft_type = #stablehlo<fft_type ") + kNames[static_cast<int>(fft_type)] +
                   ">, fft_length = " + i64_array(fft_length));
}

Value Builder::convolution(const Value& lhs, const Value& rhs, const ConvSpec& spec,
                           const std::vector<int64_t>& result_dims, DType result_dtype,
                           Precision precision) {
  size_t spatial = lhs.type.dims.size() - 2;
  auto ones = [&](const std::vector<int64_t>& v) { return v.empty() ? std::vector<int64_t>(spatial, 1) : v; };
  auto padding = spec.padding.empty() ? std::vector<std::pair<int64_t, int64_t>>(spatial, {0, 0}) : spec.padding;
  require(padding.size() == spatial, "convolution padding needs one pair per spatial dimension");
  std::string attrs = "batch_group_count = " + i64_attr(spec.batch_group_count) +
                      ", dimension_numbers = #stablehlo.conv<" + spec.layout + ">" +
                      ", feature_group_count = " + i64_attr(spec.feature_group_count) +
                      ", lhs_dilation = " + i64_array(ones(spec.lhs_dilation)) +
                      ", padding = " + padding_attr(padding) +
                      ", rhs_dilation = " + i64_array(ones(spec.rhs_dilation)) +
                      ", window_strides = " + i64_array(ones(spec.window_strides)) +
                      precision_attr(precision);
  return emit1("stablehlo.convolution", {lhs, rhs}, {result_dtype, result_dims}, attrs);
}

std::vector<Value> Builder::reduce(const std::vector<Value>& inputs, const std::vector<Value>& inits,
                                   const std::vector<int64_t>& dimensions, const RegionBody& body) {
  require(!inputs.empty() && inputs.size() == inits.size(), "reduce needs one init per input");
  std::vector<TensorType> types;
  for (size_t k = 0; k < inputs.size(); ++k) {
    require(inputs[k].type.dims == inputs[0].type.dims, "reduce inputs differ in shape");
    TensorType t{inits[k].type.dtype, {}};
    for (int64_t i = 0; i < inputs[k].type.rank(); ++i)
      if (!contains(dimensions, i)) t.dims.push_back(inputs[k].type.dims[i]);
    types.push_back(t);
  }
  std::string body_text = region(scalar_pairs(inits, false), body);
  std::vector<Value> operands = inputs;
  operands.insert(operands.end(), inits.begin(), inits.end());
  return emit("stablehlo.reduce", operands, types, "dimensions = " + i64_array(dimensions),
              {body_text});
}

std::vector<Value> Builder::reduce_window(const std::vector<Value>& inputs,
                                          const std::vector<Value>& inits, const Window& w,
                                          const RegionBody& body) {
  require(!inputs.empty() && inputs.size() == inits.size(), "reduce_window needs one init per input");
  size_t rank = inputs[0].type.dims.size();
  require(w.dims.size() == rank, "reduce_window needs a window size per dimension");
  std::vector<int64_t> strides = or_ones(w.strides, rank);
  std::vector<int64_t> base_dil = or_ones(w.base_dilations, rank);
  std::vector<int64_t> win_dil = or_ones(w.window_dilations, rank);
  auto padding = w.padding.empty() ? std::vector<std::pair<int64_t, int64_t>>(rank, {0, 0}) : w.padding;
  std::vector<int64_t> out_dims;
  for (size_t i = 0; i < rank; ++i) {
    int64_t n = inputs[0].type.dims[i];
    int64_t padded = (n > 0 ? (n - 1) * base_dil[i] + 1 : 0) + padding[i].first + padding[i].second;
    int64_t window = (w.dims[i] - 1) * win_dil[i] + 1;
    out_dims.push_back(padded < window ? 0 : (padded - window) / strides[i] + 1);
  }
  std::vector<TensorType> types;
  for (const Value& init : inits) types.push_back({init.type.dtype, out_dims});
  std::string attrs = "window_dimensions = " + i64_array(w.dims) +
                      ", window_strides = " + i64_array(strides) +
                      ", base_dilations = " + i64_array(base_dil) +
                      ", window_dilations = " + i64_array(win_dil) +
                      ", padding = " + padding_attr(padding);
  std::string body_text = region(scalar_pairs(inits, false), body);
  std::vector<Value> operands = inputs;
  operands.insert(operands.end(), inits.begin(), inits.end());
  return emit("stablehlo.reduce_window", operands, types, attrs, {body_text});
}

Value Builder::gather(const Value& operand, const Value& indices, const GatherDims& d,
                      const std::vector<int64_t>& slice_sizes,
                      const std::vector<int64_t>& result_dims) {
  require(static_cast<int64_t>(slice_sizes.size()) == operand.type.rank(),
          "gather needs a slice size per operand dimension");
  std::string attr = "#stablehlo.gather<";
  add_list(attr, "offset_dims", d.offset_dims);
  add_list(attr, "collapsed_slice_dims", d.collapsed_slice_dims);
  add_list(attr, "start_index_map", d.start_index_map);
  attr += (attr.back() == '<' ? "" : ", ") + std::string("index_vector_dim = ") +
          std::to_string(d.index_vector_dim) + ">";
  return emit1("stablehlo.gather", {operand, indices}, {operand.type.dtype, result_dims},
               "dimension_numbers = " + attr + ", slice_sizes = " + i64_array(slice_sizes) +
                   ", indices_are_sorted = false");
}

Value Builder::scatter(const Value& operand, const Value& indices, const Value& updates,
                       const ScatterDims& d, const RegionBody& combine) {
  std::string attr = "#stablehlo.scatter<";
  add_list(attr, "update_window_dims", d.update_window_dims);
  add_list(attr, "inserted_window_dims", d.inserted_window_dims);
  add_list(attr, "scatter_dims_to_operand_dims", d.scatter_dims_to_operand_dims);
  attr += (attr.back() == '<' ? "" : ", ") + std::string("index_vector_dim = ") +
          std::to_string(d.index_vector_dim) + ">";
  std::string body_text = region(scalar_pairs({operand}, false), combine);
  return emit("stablehlo.scatter", {operand, indices, updates}, {operand.type},
              "scatter_dimension_numbers = " + attr +
                  ", indices_are_sorted = false, unique_indices = false",
              {body_text})[0];
}

std::vector<Value> Builder::sort(const std::vector<Value>& inputs, int64_t dimension, bool stable,
                                 const RegionBody& comparator) {
  require(!inputs.empty(), "sort of nothing");
  std::vector<TensorType> types;
  for (const Value& v : inputs) {
    require(v.type.dims == inputs[0].type.dims, "sort inputs differ in shape");
    types.push_back(v.type);
  }
  std::string body_text = region(scalar_pairs(inputs, true), comparator);
  return emit("stablehlo.sort", inputs, types,
              "dimension = " + i64_attr(dimension) + ", is_stable = " + (stable ? "true" : "false"),
              {body_text});
}

std::pair<Value, Value> Builder::rng_bit_generator(const Value& state, const TensorType& bits_type) {
  require(!is_floating(bits_type.dtype), "rng_bit_generator produces unsigned integers");
  auto out = emit("stablehlo.rng_bit_generator", {state}, {state.type, bits_type},
                  "rng_algorithm = #stablehlo<rng_algorithm THREE_FRY>");
  return {out[0], out[1]};
}

std::vector<Value> Builder::while_loop(const std::vector<Value>& carried, const RegionBody& condition,
                                       const RegionBody& body) {
  std::vector<TensorType> types;
  for (const Value& v : carried) types.push_back(v.type);
  std::string condition_text = region(types, condition);
  std::string body_text = region(types, body);
  return emit("stablehlo.while", carried, types, "", {condition_text, body_text});
}

std::vector<Value> Builder::custom_call(const std::string& target, const std::vector<Value>& operands,
                                        const std::vector<TensorType>& result_types,
                                        const std::string& backend_config, bool has_side_effect) {
  std::string attrs = "call_target_name = \"" + target + "\", has_side_effect = " +
                      (has_side_effect ? "true" : "false") + ", backend_config = \"" +
                      backend_config + "\", api_version = 2 : i32";
  return emit("stablehlo.custom_call", operands, result_types, attrs);
}

}  // namespace torchtpu::hlo
