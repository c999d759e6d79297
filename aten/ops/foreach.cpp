// The _foreach_* ops optimizers use (torch.optim picks them for tpu, as for cuda): one program
// updates every tensor of the list. _foreach_x is x applied to each element, so each element is
// lowered by x's own lowering (promotion, integer division, low-precision rounding and NaN rules
// come out as for x itself) and typed by x's meta kernel (x's errors are raised too).
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <numeric>
#include <optional>
#include <string>

#include "aten/dtype_support.h"
#include "aten/lowering.h"
#include "aten/ops/lowering_util.h"
#include "aten/ops/math.h"

namespace torchtpu::aten {
namespace {

constexpr const char* kPrefix = "aten::_foreach_";

// The single-tensor op that _foreach_<x>.<overload> applies to each element (its functional
// form): List takes x's Tensor overload, Scalar and ScalarList its Scalar one; maximum/minimum
// of a scalar are clamp_min/clamp_max. Null where there is none (scalars given as a tensor).
std::optional<c10::OperatorHandle> element_op(const c10::FunctionSchema& schema) {
  std::string base = schema.name().substr(std::string(kPrefix).size());
  if (!base.empty() && base.back() == '_') base.pop_back();
  std::string ov = schema.overload_name();
  if (ov.size() > 4 && ov.compare(ov.size() - 4, 4, "_out") == 0) ov.resize(ov.size() - 4);  // List_out
  bool list = ov == "List", scalar = ov == "Scalar" || ov == "ScalarList";
  if ((base == "addcmul" || base == "addcdiv" || base == "lerp") && ov == "Tensor") return std::nullopt;
  if ((base == "maximum" || base == "minimum") && !list) base = base == "maximum" ? "clamp_min" : "clamp_max";
  std::string overload = list ? "Tensor" : scalar ? "Scalar" : ov;
  if (base == "maximum" || base == "minimum" || base == "addcmul" || base == "addcdiv") overload = "";
  if (base == "clamp_min" || base == "clamp_max") overload = list ? "Tensor" : "";
  if (base == "pow") overload = list ? "Tensor_Tensor" : scalar ? "Tensor_Scalar" : "Scalar";  // ScalarAndTensor
  return c10::Dispatcher::singleton().findSchema({"aten::" + base, overload});
}

// The foreach op's inputs: its arguments before the out= list.
size_t num_inputs(const c10::FunctionSchema& schema) {
  size_t n = 0;
  while (n < schema.arguments().size() && !schema.arguments()[n].is_out()) ++n;
  return n;
}

// Element k's arguments for the element op: list arguments give their k-th entry, the others are
// shared; arguments the foreach op lacks take the element op's defaults (alpha = 1).
std::vector<c10::IValue> element_args(const c10::FunctionSchema& element, const std::vector<c10::IValue>& args,
                                      size_t inputs, size_t k) {
  std::vector<c10::IValue> out;
  for (size_t i = 0; i < element.arguments().size(); ++i) {
    if (i >= inputs) out.push_back(element.arguments()[i].default_value().value_or(c10::IValue()));
    else if (args[i].isTensorList()) out.push_back(args[i].toTensorList().get(k));
    else if (args[i].isList()) out.push_back(args[i].toListRef().at(k));
    else out.push_back(args[i]);
  }
  return out;
}

std::string registry_name(const c10::OperatorName& op) {
  std::string name = op.name.substr(std::string("aten::").size());
  return op.overload_name.empty() ? name : name + "." + op.overload_name;
}

// Each element through the element op's lowering, with that element's arguments and values.
Lowering each_element(c10::OperatorName foreach_op, c10::OperatorName element_name, const LoweringEntry* element) {
  return [foreach_op, element_name, element](LoweringContext& c) {
    auto& dispatcher = c10::Dispatcher::singleton();
    size_t inputs = num_inputs(dispatcher.findOp(foreach_op)->schema());
    const c10::FunctionSchema& schema = dispatcher.findOp(element_name)->schema();
    std::vector<c10::IValue> all_args;
    for (size_t i = 0; i < inputs; ++i) all_args.push_back(c.arg(i));
    Values out;
    for (size_t k = 0; k < c.num_outputs(); ++k) {
      std::vector<c10::IValue> args = element_args(schema, all_args, inputs, k);
      std::vector<Values> values;
      for (size_t i = 0; i < args.size(); ++i) {
        if (i >= inputs) values.emplace_back();
        else if (c.arg(i).isList()) values.push_back({c.list(i).at(k)});
        else values.push_back(c.list(i));
      }
      LoweringContext e(c.b, std::move(values), args, {c.out(k)});
      e.set_precision(c.precision());
      out.push_back(element->fn(e).at(0));
    }
    return out;
  };
}

// Element k's operand from argument i: a list (tensors or scalars) or one shared value.
Value operand_of(LoweringContext& c, size_t i, size_t k) {
  const auto& values = c.list(i);
  const Value& v = values.size() == 1 ? values[0] : values.at(k);
  return broadcast_to(c.b, cast(c.b, v, c.out(k).dtype), c.out(k).dims);
}

template <typename F>
Lowering per_element(F f) {
  return [f](LoweringContext& c) {
    Values out;
    for (size_t k = 0; k < c.num_outputs(); ++k) out.push_back(f(c, k));
    return out;
  };
}

// self + scalars[k] * t1 op t2: addcmul/addcdiv with the scalars given as one 1-D tensor, in the
// element ops' order and opmath ((value * t1) op t2 in float32 for bfloat16/float16 lists).
Lowering pointwise_tensor_scalars(BinaryOp op) {
  return per_element([op](LoweringContext& c, size_t k) {
    DType t = accumulator(c.out(k).dtype);
    auto operand = [&](const Value& v) { return broadcast_to(c.b, cast(c.b, v, t), c.out(k).dims); };
    auto element = [&](size_t i) { return operand(c.list(i).size() == 1 ? c.list(i)[0] : c.list(i).at(k)); };
    int64_t at = static_cast<int64_t>(k);
    Value scale = operand(c.b.reshape(c.b.slice(c.list(3)[0], {at}, {at + 1}, {1}), {}));
    Value scaled = scale * element(1);
    return element(0) + c.b.binary(op, scaled, element(2));
  });
}

// The result types: the element op's, per element (PyTorch has no meta kernels for foreach ops).
std::vector<c10::IValue> foreach_meta(const c10::FunctionSchema& schema,
                                      const std::vector<c10::IValue>& meta_args) {
  std::optional<c10::OperatorHandle> op = element_op(schema);
  // The first list: self, or the exponents of _foreach_pow(scalar, tensors).
  std::vector<at::Tensor> selves = (meta_args[0].isTensorList() ? meta_args[0] : meta_args.at(1)).toTensorList().vec();
  c10::List<at::Tensor> out;
  for (size_t k = 0; k < selves.size(); ++k) {
    if (!op) {
      out.push_back(at::empty_like(selves[k]));
      continue;
    }
    std::vector<c10::IValue> stack = element_args(op->schema(), meta_args, num_inputs(schema), k);
    // CPU's foreach maximum/minimum of two lists run clamp_min/clamp_max.Tensor, whose dtype
    // errors differ.
    const std::string& element_name = op->schema().name();
    bool clamps = element_name == "aten::maximum" || element_name == "aten::minimum";
    std::string checked = !clamps ? element_name : element_name == "aten::maximum" ? "aten::clamp_min" : "aten::clamp_max";
    const LoweringEntry* element = find_lowering(registry_name(op->operator_name()));
    const LoweringEntry* judged = clamps ? find_lowering(checked.substr(6) + ".Tensor") : element;
    check_cpu_dtype_support(checked + (schema.name().back() == '_' ? "_" : ""),
                            clamps ? "Tensor" : op->schema().overload_name(),
                            judged ? judged->options.cpu_refusals : std::vector<CpuRefusal>{}, stack);
    if (element && element->options.meta)  // checks CPU makes that PyTorch's meta kernel skips
      stack = element->options.meta(op->schema(), stack);
    else
      op->callBoxedForDispatchKey(c10::DispatchKey::Meta, stack);  // raises as the element op would
    out.push_back(stack.at(0).toTensor());
  }
  // In-place and out= forms write their arguments (the boxed kernel checks that results fit);
  // their element ops' checks ran above.
  if (schema.returns().empty()) return {};
  return {c10::IValue(out)};
}

// One 0-d norm per tensor: real for complex tensors, in `dtype` when given.
std::vector<c10::IValue> foreach_norm_meta(const c10::FunctionSchema& schema,
                                           const std::vector<c10::IValue>& args) {
  if (schema.returns().empty()) return {};
  c10::List<at::Tensor> out;
  for (const at::Tensor& t : args[0].toTensorList().vec()) {
    TORCH_CHECK(t.is_floating_point() || t.is_complex(),
                "linalg.vector_norm: Expected a floating point or complex tensor as input. Got ", t.scalar_type());
    c10::ScalarType dtype = args.size() > 2 && !args[2].isNone() ? args[2].toScalarType() : t.scalar_type();
    out.push_back(at::empty({}, t.options().dtype(c10::toRealValueType(dtype))));
  }
  return {c10::IValue(out)};
}

// Every _foreach_* op without a lowering of its own whose element op has a plain element-wise
// lowering (no CPU cases, randomness, device checks or baked scalars) gets one made of it.
void derive_from_element_ops() {
  for (const c10::OperatorName& name : c10::Dispatcher::singleton().getAllOpNames()) {
    if (name.name.rfind(kPrefix, 0) != 0 || find_lowering(registry_name(name))) continue;
    std::optional<c10::OperatorHandle> op = element_op(c10::Dispatcher::singleton().findOp(name)->schema());
    if (!op) continue;
    const LoweringEntry* element = find_lowering(registry_name(op->operator_name()));
    if (!element) continue;
    const LoweringOptions& o = element->options;
    if (o.cpu_when || o.random || o.device_check || !o.static_scalars.empty() || o.shape_from_scalars) continue;
    std::string full = registry_name(name);
    register_lowering({full.c_str()}, each_element(name, op->operator_name(), element), with_meta(foreach_meta));
  }
}

void register_foreach(std::initializer_list<const char*> ops, Lowering fn, StaticScalars s = {},
                      MetaFn meta = foreach_meta) {
  register_lowering(ops, std::move(fn), {std::move(s), std::move(meta), nullptr});
}

}  // namespace

// The ops with no element op to derive them from; the rest come from derive_from_element_ops.
TORCHTPU_LOWERINGS(foreach) {
  register_foreach({"_foreach_addcmul.Tensor", "_foreach_addcmul_.Tensor", "_foreach_addcmul.Tensor_out"},
                   pointwise_tensor_scalars(BinaryOp::kMultiply));
  register_foreach({"_foreach_addcdiv.Tensor", "_foreach_addcdiv_.Tensor", "_foreach_addcdiv.Tensor_out"},
                   pointwise_tensor_scalars(BinaryOp::kDivide));
  register_foreach({"_foreach_zero_", "_foreach_zero", "_foreach_zero.out"},
                   per_element([](LoweringContext& c, size_t k) { return c.b.constant(0, c.out(k)); }));
  register_foreach({"_foreach_copy_", "_foreach_copy", "_foreach_copy.out"},
                   per_element([](LoweringContext& c, size_t k) { return operand_of(c, 1, k); }));
  register_foreach({"_foreach_norm.Scalar", "_foreach_norm.Scalar_out"},
                   per_element([](LoweringContext& c, size_t k) {
                     Value x = c.list(0).at(k);
                     std::vector<int64_t> all(x.type.rank());
                     std::iota(all.begin(), all.end(), 0);
                     double ord = c.arg(1).toScalar().toDouble();
                     return Math{c.b}.vector_norm(x, all, ord, accumulator(c.out(k).dtype));
                   }),
                   {1}, foreach_norm_meta);
  register_derived_lowerings(derive_from_element_ops);
}

}  // namespace torchtpu::aten
