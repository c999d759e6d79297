// The _foreach_* ops optimizers use (torch.optim picks them for tpu, as for cuda): one program
// updates every tensor of the list.
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <numeric>
#include <optional>
#include <string>

#include "aten/lowering.h"
#include "aten/ops/lowering_util.h"
#include "aten/ops/math.h"

namespace torchtpu::aten {
namespace {

// Element k's operand from argument i: a list (tensors or scalars) or one shared value.
Value operand_of(LoweringContext& c, size_t i, size_t k) {
  const auto& values = c.list(i);
  const Value& v = values.size() == 1 ? values[0] : values.at(k);
  return broadcast_to(c.b, cast(c.b, v, c.out(k).dtype), c.out(k).dims);
}

// Element k of self, broadcast too: _foreach_mul([0-d tensors], [matrices]) (NAdam's capturable
// step) broadcasts each pair as mul does.
Value self_of(LoweringContext& c, size_t k) {
  return broadcast_to(c.b, cast(c.b, c.list(0).at(k), c.out(k).dtype), c.out(k).dims);
}

template <typename F>
Lowering per_element(F f) {
  return [f](LoweringContext& c) {
    V out;
    for (size_t k = 0; k < c.num_outputs(); ++k) out.push_back(f(c, k));
    return out;
  };
}

Lowering binary(BinaryOp op, bool with_alpha) {
  return per_element([op, with_alpha](LoweringContext& c, size_t k) {
    Value other = operand_of(c, 1, k);
    if (with_alpha && c.has(2)) other = c.b.binary(BinaryOp::kMultiply, other, operand_of(c, 2, k));
    return c.b.binary(op, self_of(c, k), other);
  });
}

Lowering unary(UnaryOp op) {
  return per_element([op](LoweringContext& c, size_t k) { return c.b.unary(op, self_of(c, k)); });
}

// self + value * (t1 op t2), value a Scalar, a ScalarList or a Tensor of scalars.
Lowering pointwise(BinaryOp op) {
  return per_element([op](LoweringContext& c, size_t k) {
    Value t = c.b.binary(op, operand_of(c, 1, k), operand_of(c, 2, k));
    Value scale = c.list(3).size() == 1 && c.list(3)[0].type.rank() == 1
                      ? c.b.reshape(c.b.slice(c.list(3)[0], {static_cast<int64_t>(k)}, {static_cast<int64_t>(k) + 1}, {1}), {})
                      : c.list(3).size() == 1 ? c.list(3)[0] : c.list(3).at(k);
    scale = broadcast_to(c.b, cast(c.b, scale, c.out(k).dtype), c.out(k).dims);
    return c.b.binary(BinaryOp::kAdd, self_of(c, k), c.b.binary(BinaryOp::kMultiply, scale, t));
  });
}

// The single-tensor op behind _foreach_<name>[_].<overload> (its functional form): _foreach_x is x
// applied to each element, so x's meta kernel gives each result's dtype (int / int divides into
// float, a complex scalar makes a complex result) and raises x's errors. Null when x has no
// matching overload (the results then keep self's dtype).
std::optional<c10::OperatorHandle> element_op(const c10::FunctionSchema& schema) {
  std::string name = schema.name().substr(std::string("aten::_foreach_").size());
  std::string ov = schema.overload_name();
  if (ov.size() > 4 && ov.compare(ov.size() - 4, 4, "_out") == 0) ov.resize(ov.size() - 4);  // List_out
  std::string base = !name.empty() && name.back() == '_' ? name.substr(0, name.size() - 1) : name;
  std::string overload = ov == "List" ? "Tensor" : ov == "ScalarList" ? "Scalar" : ov;
  if (base == "pow") overload = overload == "Tensor" ? "Tensor_Tensor" : "Tensor_Scalar";
  if (base == "addcmul" || base == "addcdiv") overload = "";
  if (base == "addcmul" || base == "addcdiv" || base == "lerp") {
    if (ov == "Tensor") return std::nullopt;  // scalars given as a tensor: no per-element op
  }
  return c10::Dispatcher::singleton().findSchema({"aten::" + base, overload});
}

// Element k's arguments for the element op: list arguments give their k-th entry, the others
// are shared; arguments the foreach op lacks take the element op's defaults (alpha = 1).
torch::jit::Stack element_args(const c10::FunctionSchema& element, const std::vector<c10::IValue>& args, size_t k) {
  torch::jit::Stack stack;
  for (size_t i = 0; i < element.arguments().size(); ++i) {
    if (i >= args.size()) {
      stack.push_back(element.arguments()[i].default_value().value_or(c10::IValue()));
    } else if (args[i].isTensorList()) {
      stack.push_back(args[i].toTensorList().get(k));
    } else if (args[i].isList()) {
      stack.push_back(args[i].toListRef().at(k));
    } else {
      stack.push_back(args[i]);
    }
  }
  return stack;
}

std::vector<c10::IValue> foreach_meta(const c10::FunctionSchema& schema,
                                      const std::vector<c10::IValue>& meta_args) {
  // In-place and out= forms write their arguments (the boxed kernel checks that results fit).
  if (schema.returns().empty()) return {};
  std::optional<c10::OperatorHandle> op = element_op(schema);
  std::vector<at::Tensor> selves = meta_args[0].toTensorList().vec();
  c10::List<at::Tensor> out;
  for (size_t k = 0; k < selves.size(); ++k) {
    if (!op) {
      out.push_back(at::empty_like(selves[k]));
      continue;
    }
    torch::jit::Stack stack = element_args(op->schema(), meta_args, k);
    op->callBoxedForDispatchKey(c10::DispatchKey::Meta, stack);  // raises as the element op would
    out.push_back(stack.at(0).toTensor());
  }
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

void register_foreach(std::initializer_list<const char*> ops, Lowering fn, StaticScalars s = {},
                      MetaFn meta = foreach_meta) {
  register_lowering(ops, std::move(fn), {std::move(s), std::move(meta), nullptr});
}

void with_overloads(const char* name, std::initializer_list<const char*> overloads, Lowering fn) {
  for (const char* ov : overloads) {
    std::string o = ov;
    std::string functional = std::string(name) + "." + o, inplace = std::string(name) + "_." + o,
                out = std::string(name) + "." + o + "_out";
    register_foreach({functional.c_str(), inplace.c_str(), out.c_str()}, fn);
  }
}

}  // namespace

TORCHTPU_LOWERINGS(foreach) {
  with_overloads("_foreach_add", {"List", "Scalar", "ScalarList", "Tensor"}, binary(BinaryOp::kAdd, true));
  with_overloads("_foreach_sub", {"List", "Scalar", "ScalarList"}, binary(BinaryOp::kSubtract, true));
  with_overloads("_foreach_mul", {"List", "Scalar", "ScalarList", "Tensor"}, binary(BinaryOp::kMultiply, false));
  with_overloads("_foreach_div", {"List", "Scalar", "ScalarList", "Tensor"}, binary(BinaryOp::kDivide, false));
  with_overloads("_foreach_maximum", {"List", "Scalar", "ScalarList"}, binary(BinaryOp::kMaximum, false));
  with_overloads("_foreach_minimum", {"List", "Scalar", "ScalarList"}, binary(BinaryOp::kMinimum, false));
  with_overloads("_foreach_pow", {"List", "Scalar", "ScalarList"}, binary(BinaryOp::kPower, false));
  with_overloads("_foreach_addcmul", {"Scalar", "ScalarList", "Tensor"}, pointwise(BinaryOp::kMultiply));
  with_overloads("_foreach_addcdiv", {"Scalar", "ScalarList", "Tensor"}, pointwise(BinaryOp::kDivide));
  with_overloads("_foreach_lerp", {"List", "Scalar", "ScalarList"},
                 per_element([](LoweringContext& c, size_t k) {
                   Value start = self_of(c, k), end = operand_of(c, 1, k), w = operand_of(c, 2, k);
                   Value diff = c.b.binary(BinaryOp::kSubtract, end, start);
                   return c.b.binary(BinaryOp::kAdd, start, c.b.binary(BinaryOp::kMultiply, w, diff));
                 }));
  for (auto [name, op] : {std::pair{"_foreach_sqrt", UnaryOp::kSqrt}, {"_foreach_neg", UnaryOp::kNegate},
                          {"_foreach_abs", UnaryOp::kAbs}, {"_foreach_exp", UnaryOp::kExponential},
                          {"_foreach_log", UnaryOp::kLog}, {"_foreach_sign", UnaryOp::kSign}}) {
    std::string inplace = std::string(name) + "_", out = std::string(name) + ".out";
    register_foreach({name, inplace.c_str(), out.c_str()}, unary(op));
  }
  register_foreach({"_foreach_reciprocal", "_foreach_reciprocal_", "_foreach_reciprocal.out"},
                    per_element([](LoweringContext& c, size_t k) {
                      Value x = self_of(c, k);
                      return c.b.binary(BinaryOp::kDivide, c.b.constant(1, x.type), x);
                    }));
  register_foreach({"_foreach_zero_", "_foreach_zero", "_foreach_zero.out"},
                    per_element([](LoweringContext& c, size_t k) {
                      return c.b.constant(0, c.out(k));
                    }));
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
}

}  // namespace torchtpu::aten
