// What an op's schema says about its arguments and returns, decoded once when the op's kernel is
// installed, so that a call does not walk the schema's types again (each test is a virtual call
// and a cast, several per argument per call).
#pragma once

#include <ATen/core/function_schema.h>

#include <algorithm>
#include <string>
#include <vector>

#include "aten/dtype_support.h"
#include "aten/lowering.h"

namespace torchtpu::aten {

enum class ArgKind : uint8_t {
  kTensor,      // Tensor or Tensor?
  kTensorList,  // Tensor[] (cat's inputs, foreach lists)
  kIndexList,   // Tensor?[] (index's and index_put's indices)
  kScalar,      // Scalar or Scalar?: a runtime input of the program
  kScalarList,  // Scalar[] (foreach scalars): runtime inputs too
  kOther,       // ints, bools, lists of ints, strings, ...: part of the cache key
};

struct ArgPlan {
  ArgKind kind;
  bool written;      // the op writes it (in-place self, out=)
  bool static_value; // a Scalar the lowering branches on (LoweringOptions::static_scalars)

  bool tensor_list() const { return kind == ArgKind::kTensorList || kind == ArgKind::kIndexList; }
};

struct OpPlan {
  std::string name;  // "aten::add.Tensor"
  const LoweringEntry* entry;
  std::vector<ArgPlan> args;
  std::vector<size_t> written_args;   // positions of the written arguments
  std::vector<bool> aliased_returns;  // per return: it is a written argument, not a fresh tensor
  bool has_index_list = false;
  // PyTorch lets tensors with a conjugate (or negative) bit reach this op's kernel, which must
  // apply the bit itself (BLAS-style ops: the Conjugate dispatch key falls through for them).
  bool sees_conjugate_bits = false;
  ScalarRangeChecks scalar_ranges;

  OpPlan(const c10::FunctionSchema& schema, std::string op_name, const LoweringEntry& lowering)
      : name(std::move(op_name)), entry(&lowering) {
    const StaticScalars& statics = lowering.options.static_scalars;
    for (size_t i = 0; i < schema.arguments().size(); ++i) {
      const c10::Argument& a = schema.arguments()[i];
      bool written = a.alias_info() && a.alias_info()->isWrite();
      bool is_static = std::find(statics.begin(), statics.end(), i) != statics.end();
      args.push_back({kind_of(a.type()), written, is_static});
      if (written) written_args.push_back(i);
      has_index_list |= args.back().kind == ArgKind::kIndexList;
    }
    for (const c10::Argument& r : schema.returns()) aliased_returns.push_back(r.alias_info() != nullptr);
    scalar_ranges = scalar_range_checks(schema);
    static const std::vector<std::string> bit_aware = {"dot", "vdot", "mm", "addmm", "addmm_", "bmm",
                                                       "baddbmm", "baddbmm_", "linalg_solve_triangular"};
    sees_conjugate_bits = std::find(bit_aware.begin(), bit_aware.end(), schema.name().substr(6)) != bit_aware.end();
  }

 private:
  static ArgKind kind_of(c10::TypePtr t) {
    if (auto opt = t->cast<c10::OptionalType>()) t = opt->getElementType();
    if (t->kind() == c10::TypeKind::TensorType) return ArgKind::kTensor;
    if (t->kind() == c10::TypeKind::NumberType) return ArgKind::kScalar;
    auto list = t->cast<c10::ListType>();
    if (!list) return ArgKind::kOther;
    c10::TypePtr e = list->getElementType();
    if (e->kind() == c10::TypeKind::NumberType) return ArgKind::kScalarList;
    if (e->kind() == c10::TypeKind::TensorType) return ArgKind::kTensorList;
    auto opt = e->cast<c10::OptionalType>();
    if (opt && opt->getElementType()->kind() == c10::TypeKind::TensorType) return ArgKind::kIndexList;
    return ArgKind::kOther;
  }
};

}  // namespace torchtpu::aten
