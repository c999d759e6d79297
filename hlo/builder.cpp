// Core of the emitter: SSA naming, blocks and regions, the generic op syntax, the module wrapper.
#include "hlo/builder.h"

#include <algorithm>

#include "hlo/attributes.h"

namespace torchtpu::hlo {
namespace {

std::string join_types(const std::vector<TensorType>& types) {
  std::string s;
  for (size_t i = 0; i < types.size(); ++i) s += (i ? ", " : "") + types[i].str();
  return s;
}

std::string join_names(const std::vector<Value>& values) {
  std::string s;
  for (size_t i = 0; i < values.size(); ++i) s += (i ? ", " : "") + values[i].name;
  return s;
}

std::vector<TensorType> types_of(const std::vector<Value>& values) {
  std::vector<TensorType> types;
  for (const Value& v : values) types.push_back(v.type);
  return types;
}

}  // namespace

Builder::Builder(std::string function_name) : function_name_(std::move(function_name)) {
  blocks_.push_back({{}, 4});
}

Value Builder::parameter(const TensorType& type) {
  params_.push_back(type);
  return {"%arg" + std::to_string(params_.size() - 1), type, this};
}

void Builder::results(const std::vector<Value>& values) { results_ = values; }

std::string Builder::fresh_name() { return "%" + std::to_string(next_id_++); }

std::vector<Value> Builder::emit(std::string_view op, const std::vector<Value>& operands,
                                 const std::vector<TensorType>& result_types,
                                 const std::string& attributes,
                                 const std::vector<std::string>& regions) {
  std::string name = result_types.empty() ? "" : fresh_name();
  std::string line;
  if (result_types.size() == 1) line = name + " = ";
  if (result_types.size() > 1) line = name + ":" + std::to_string(result_types.size()) + " = ";
  line += "\"" + std::string(op) + "\"(" + join_names(operands) + ")";
  if (!regions.empty()) {
    line += " (";
    for (size_t i = 0; i < regions.size(); ++i) line += (i ? ", " : "") + regions[i];
    line += ")";
  }
  if (!attributes.empty()) line += " {" + attributes + "}";
  std::string results = result_types.size() == 1 ? result_types[0].str()
                                                 : "(" + join_types(result_types) + ")";
  line += " : (" + join_types(types_of(operands)) + ") -> " + results;
  blocks_.back().lines.push_back(std::move(line));

  std::vector<Value> out;
  for (size_t i = 0; i < result_types.size(); ++i)
    out.push_back({result_types.size() == 1 ? name : name + "#" + std::to_string(i),
                   result_types[i], this});
  bool from_constants = op == "stablehlo.constant" ||
                        (!operands.empty() && op != "stablehlo.optimization_barrier" &&
                         std::all_of(operands.begin(), operands.end(),
                                     [&](const Value& v) { return constant_.count(v.name) > 0; }));
  if (from_constants) {
    for (const Value& v : out) constant_.insert(v.name);
    if (op == "stablehlo.broadcast_in_dim" && operands[0].type.rank() == 0) broadcast_scalar_.emplace(name, operands[0]);
  }
  return out;
}

Value Builder::opaque_if_constant(const Value& x) {
  if (!constant_.count(x.name)) return x;
  auto scalar = broadcast_scalar_.find(x.name);
  if (scalar == broadcast_scalar_.end()) return emit1("stablehlo.optimization_barrier", {x}, x.type);
  return broadcast_in_dim(emit1("stablehlo.optimization_barrier", {scalar->second}, scalar->second.type), x.type.dims, {});
}

Value Builder::emit1(std::string_view op, const std::vector<Value>& operands,
                     const TensorType& type, const std::string& attributes) {
  return emit(op, operands, {type}, attributes)[0];
}

std::string Builder::region(const std::vector<TensorType>& arg_types, const RegionBody& body) {
  // The op line sits at `outer`; the block label two deeper, its ops four deeper.
  int outer = blocks_.back().indent;
  blocks_.push_back({{}, outer + 4});
  std::vector<Value> args;
  std::string header = std::string(outer + 2, ' ') + "^bb0(";
  for (size_t i = 0; i < arg_types.size(); ++i) {
    args.push_back({fresh_name(), arg_types[i], this});
    header += (i ? ", " : "") + args.back().name + ": " + arg_types[i].str();
  }
  header += "):";
  std::vector<Value> yielded = body(*this, args);
  emit("stablehlo.return", yielded, {});

  std::string text = "{\n" + header + "\n";
  for (const std::string& line : blocks_.back().lines)
    text += std::string(blocks_.back().indent, ' ') + line + "\n";
  text += std::string(outer, ' ') + "}";
  blocks_.pop_back();
  return text;
}

std::vector<TensorType> Builder::scalar_pairs(const std::vector<Value>& values, bool interleave) {
  // reduce / reduce_window / sort take (acc0.., x0..) or (a0, b0, a1, b1..) block arguments.
  std::vector<TensorType> types;
  if (interleave) {
    for (const Value& v : values) types.insert(types.end(), 2, TensorType{v.type.dtype, {}});
  } else {
    for (int pass = 0; pass < 2; ++pass)
      for (const Value& v : values) types.push_back({v.type.dtype, {}});
  }
  return types;
}

std::string Builder::module_text(int num_replicas, int num_partitions) const {
  require(blocks_.size() == 1, "module_text called while a region is still open");
  std::string s = "module @torchtpu attributes {mhlo.num_partitions = " +
                  std::to_string(num_partitions) + " : i32, mhlo.num_replicas = " +
                  std::to_string(num_replicas) + " : i32} {\n";
  s += "  func.func public @" + function_name_ + "(";
  for (size_t i = 0; i < params_.size(); ++i) {
    s += (i ? ", " : "") + std::string("%arg") + std::to_string(i) + ": " + params_[i].str();
    for (const auto& [param, result] : aliases_)
      if (param == i) s += " {tf.aliasing_output = " + std::to_string(result) + " : i32}";
  }
  s += ") -> (" + join_types(types_of(results_)) + ") {\n";
  for (const std::string& line : blocks_.front().lines) s += "    " + line + "\n";
  s += "    \"func.return\"(" + join_names(results_) + ") : (" + join_types(types_of(results_)) +
       ") -> ()\n";
  s += "  }\n";
  for (const auto& [key, text] : functions_) s += text + "\n";
  return s + "}\n";
}

void Builder::add_functions(const std::string& key, const std::string& text) {
  for (const auto& f : functions_)
    if (f.first == key) return;
  functions_.emplace_back(key, text);
}

std::vector<Value> Builder::call(const std::string& symbol, const std::vector<Value>& args,
                                 const std::vector<TensorType>& result_types) {
  return emit("func.call", args, result_types, "callee = @" + symbol);
}

Value Builder::constant(double value, const TensorType& type) {
  // A splat is a broadcast scalar, so that a division by it can hide the scalar (binary()).
  if (type.rank() > 0) return broadcast_in_dim(constant(value, TensorType{type.dtype, {}}), type.dims, {});
  std::string attr = "value = dense<" + splat_literal(value, type.dtype) + "> : " + type.str();
  return emit1("stablehlo.constant", {}, type, attr);
}

Value Builder::constant_int(int64_t value, const TensorType& type) {
  if (is_floating(type.dtype) || is_complex(type.dtype) || type.dtype == DType::kBool)
    return constant(static_cast<double>(value), type);
  // Wrapped to the type's width, as C++'s integer conversions (and so CPU: filling uint8 with -9
  // gives 247) do.
  int unused = 64 - 8 * static_cast<int>(element_size(type.dtype));
  uint64_t bits = static_cast<uint64_t>(value) << unused >> unused;
  std::string literal = is_unsigned(type.dtype) ? std::to_string(bits)
                                                : std::to_string(static_cast<int64_t>(bits << unused) >> unused);
  return emit1("stablehlo.constant", {}, type, "value = dense<" + literal + "> : " + type.str());
}

Value Builder::constant_bytes(const void* data, const TensorType& type) {
  // MLIR reads i1 hex data as packed bits: bools (one byte each here) travel as u8 and convert.
  if (type.dtype == DType::kBool) return convert(constant_bytes(data, type.with_dtype(DType::kU8)), DType::kBool);
  std::string attr = "value = dense<" +
                     hex_literal(data, type.element_count() * element_size(type.dtype)) +
                     "> : " + type.str();
  return emit1("stablehlo.constant", {}, type, attr);
}

}  // namespace torchtpu::hlo
