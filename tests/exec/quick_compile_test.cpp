// Which programs compile quickly first: those whose bits code generation cannot change.
#include <gtest/gtest.h>

#include <functional>

#include "exec/quick_compile.h"
#include "hlo/operators.h"

namespace torchtpu::exec {
namespace {

using hlo::Builder;
using hlo::Value;

std::string program(DType dtype, const std::function<Value(Builder&, const Value&, const Value&)>& body) {
  Builder b;
  hlo::TensorType t{dtype, {4, 3}};
  Value x = b.parameter(t), y = b.parameter(t);
  b.results({body(b, x, y)});
  return b.module_text();
}

TEST(QuickCompile, FloatsMovedComparedOrAddedCompileTheSameEitherWay) {
  EXPECT_TRUE(same_bits_however_compiled(program(DType::kF32, [](Builder& b, const Value& x, const Value& y) {
    Value cat = b.concatenate({x, y}, 0);
    Value kept = b.slice(cat, {2, 0}, {6, 3}, {1, 1});
    return b.select(b.compare(hlo::Compare::kGT, kept, y), kept - y, -x + 1.0);
  })));
  EXPECT_TRUE(same_bits_however_compiled(program(DType::kF32, [](Builder&, const Value& x, const Value& y) {
    return x * y / 3.0;  // products and quotients without a sum: nothing to contract
  })));
}

TEST(QuickCompile, IntegerArithmeticOfAnyKindCompilesTheSameEitherWay) {
  EXPECT_TRUE(same_bits_however_compiled(program(DType::kS64, [](Builder& b, const Value& x, const Value& y) {
    return b.binary(hlo::BinaryOp::kRemainder, x * y + 3.0, y);
  })));
  EXPECT_TRUE(same_bits_however_compiled(program(DType::kBool, [](Builder& b, const Value& x, const Value& y) {
    Value either = b.binary(hlo::BinaryOp::kOr, x, y);  // isin's and any's reduction
    Value any = b.reduce({either}, {b.constant(0, {DType::kBool, {}})}, {1}, [](Builder& rb, const std::vector<Value>& a) {
      return std::vector<Value>{rb.binary(hlo::BinaryOp::kOr, a[0], a[1])};
    })[0];
    return b.broadcast_in_dim(any, {4, 3}, {0});
  })));
}

TEST(QuickCompile, FloatProductsReductionsAndFunctionsMayNot) {
  EXPECT_FALSE(same_bits_however_compiled(program(DType::kF32, [](Builder&, const Value& x, const Value& y) {
    return x * y + y;  // a fused multiply-add when optimized
  })));
  EXPECT_FALSE(same_bits_however_compiled(program(DType::kF16, [](Builder& b, const Value& x, const Value&) {
    return b.unary(hlo::UnaryOp::kExponential, x);
  })));
  EXPECT_FALSE(same_bits_however_compiled(program(DType::kF64, [](Builder& b, const Value& x, const Value&) {
    return b.reduce({x}, {b.constant(0, {DType::kF64, {}})}, {1},
                    [](Builder&, const std::vector<Value>& a) { return std::vector<Value>{a[0] + a[1]}; })[0];
  })));
  // types the CPU emulates: a conversion to float8 and a float16 copy did change when optimized
  EXPECT_FALSE(same_bits_however_compiled(program(DType::kF32, [](Builder& b, const Value& x, const Value&) {
    return b.convert(b.convert(x, DType::kF8E5M2), DType::kF32);
  })));
  EXPECT_FALSE(same_bits_however_compiled(program(DType::kF16, [](Builder& b, const Value& x, const Value& y) {
    return b.concatenate({x, y}, 0);
  })));
  // an integer program that converts to float and multiplies and adds there
  EXPECT_FALSE(same_bits_however_compiled(program(DType::kS32, [](Builder& b, const Value& x, const Value& y) {
    Value f = b.convert(x, DType::kF32);
    return b.convert(f * f + f, DType::kS32) + y;
  })));
}

TEST(QuickCompile, BytesPerRunCountEveryOperandAndResult) {
  EXPECT_EQ(bytes_per_run("module @m {\n  func.func public @main(%arg0: tensor<4x256xf32>, %arg1: tensor<i1>) -> "
                          "(tensor<2x3xcomplex<f64>>, tensor<8xbf16>) {\n  }\n}"),
            4 * 256 * 4 + 1 + 2 * 3 * 16 + 8 * 2);
  EXPECT_EQ(bytes_per_run("func.func public @main() -> (tensor<f8E4M3FN>, tensor<3xi64>) {"), 1 + 24);
  EXPECT_EQ(bytes_per_run("no main function"), 0);
}

TEST(QuickCompile, ResultBytesCountOnlyResults) {
  EXPECT_EQ(result_bytes("module @m {\n  func.func public @main(%arg0: tensor<4x256xf32>, %arg1: tensor<i1>) -> "
                         "(tensor<2x3xcomplex<f64>>, tensor<8xbf16>) {\n  }\n}"),
            2 * 3 * 16 + 8 * 2);
  EXPECT_EQ(result_bytes("func.func public @main(%arg0: tensor<1024xf32>) -> tensor<f32> {"), 4);
  EXPECT_EQ(result_bytes("no main function"), 0);
}

TEST(QuickCompile, EmulatedTypesAnywhereInTheProgram) {
  EXPECT_FALSE(has_emulated_types("func.func public @main(%arg0: tensor<4xf32>) -> (tensor<4xi1>) {"));
  EXPECT_TRUE(has_emulated_types("func.func public @main(%arg0: tensor<4xf32>) -> (tensor<4xf32>) {\n"
                                 "  %0 = \"stablehlo.convert\"(%arg0) : (tensor<4xf32>) -> tensor<4xf8E4M3FN>\n"));
  EXPECT_TRUE(has_emulated_types("func.func public @main(%arg0: tensor<bf16>) -> (tensor<f32>) {"));
  EXPECT_TRUE(has_emulated_types("func.func public @main(%arg0: tensor<2xcomplex<f32>>) -> (tensor<2xi1>) {"));
}

TEST(QuickCompile, MatrixVectorProductsWithoutReductions) {
  const std::string gemv =
      "  %2 = \"stablehlo.dot_general\"(%0, %1) {dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = "
      "[1], rhs_contracting_dimensions = [0]>} : (tensor<1x256xf32>, tensor<256x768xf32>) -> tensor<1x768xf32>\n";
  const std::string gemm =
      "  %2 = \"stablehlo.dot_general\"(%0, %1) {dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = "
      "[1], rhs_contracting_dimensions = [0]>} : (tensor<16x256xf32>, tensor<256x768xf32>) -> tensor<16x768xf32>\n";
  const std::string batched =
      "  %2 = \"stablehlo.dot_general\"(%0, %1) {dot_dimension_numbers = #stablehlo.dot<lhs_batching_dimensions = [0], "
      "rhs_batching_dimensions = [0], lhs_contracting_dimensions = [2], rhs_contracting_dimensions = [1]>} : "
      "(tensor<1x8x64xf32>, tensor<1x64x32xf32>) -> tensor<1x8x32xf32>\n";
  const std::string reduce = "  %3 = \"stablehlo.reduce\"(%2, %c) ({\n";
  EXPECT_TRUE(matrix_vector_without_reductions(gemv));
  EXPECT_FALSE(matrix_vector_without_reductions(gemm));
  EXPECT_FALSE(matrix_vector_without_reductions(batched));  // a batch of one is not a row of one
  EXPECT_FALSE(matrix_vector_without_reductions(gemv + reduce));
}

}  // namespace
}  // namespace torchtpu::exec
