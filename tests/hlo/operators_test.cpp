// Operators on values emit exactly what the builder's calls emit.
#include <gtest/gtest.h>

#include <stdexcept>

#include "hlo/operators.h"

namespace torchtpu::hlo {
namespace {

TEST(Operators, EmitTheSameTextAsBuilderCalls) {
  TensorType t{DType::kF32, {4}};
  Builder with_calls;
  Value x = with_calls.parameter(t), y = with_calls.parameter(t);
  Value sum = with_calls.binary(BinaryOp::kAdd, x, with_calls.binary(BinaryOp::kMultiply, y, x));
  Value half = with_calls.binary(BinaryOp::kDivide, with_calls.constant(1, t), with_calls.unary(UnaryOp::kNegate, sum));
  with_calls.results({with_calls.binary(BinaryOp::kSubtract, half, with_calls.constant(2, t))});

  Builder with_operators;
  Value a = with_operators.parameter(t), b = with_operators.parameter(t);
  with_operators.results({1.0 / -(a + b * a) - 2.0});

  EXPECT_EQ(with_calls.module_text(), with_operators.module_text());
}

TEST(Operators, RegionArgumentsAndResultsKnowTheirBuilder) {
  Builder b;
  Value x = b.parameter({DType::kS32, {3}});
  Value r = b.reduce({x * 2.0}, {b.constant(0, {DType::kS32, {}})}, {0},
                     [](Builder&, const std::vector<Value>& a) { return std::vector<Value>{a[0] + a[1]}; })[0];
  EXPECT_EQ(r.builder, &b);
  EXPECT_NE(b.module_text().find("stablehlo.multiply"), std::string::npos);
}

TEST(Operators, ShapesMustMatch) {
  Builder b;
  Value x = b.parameter({DType::kF32, {2}}), y = b.parameter({DType::kF32, {3}});
  EXPECT_THROW(x + y, std::invalid_argument);
  Value unowned{"%none", {DType::kF32, {2}}};
  EXPECT_THROW(unowned + 1.0, std::logic_error);
}

}  // namespace
}  // namespace torchtpu::hlo
