// The emitter's text: deterministic, generic-form syntax, inferred result types.
#include <cmath>
#include <gtest/gtest.h>

#include "hlo/builder.h"
#include "hlo/float8.h"

namespace torchtpu::hlo {
namespace {

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::string small_program() {
  Builder b;
  TensorType t{DType::kF32, {2, 3}};
  Value x = b.parameter(t);
  Value y = b.parameter(t);
  Value s = b.binary(BinaryOp::kAdd, x, y);
  Value r = b.reduce({s}, {b.constant(0.0, {DType::kF32, {}})}, {1},
                     [](Builder& rb, const std::vector<Value>& a) {
                       return std::vector<Value>{rb.binary(BinaryOp::kAdd, a[0], a[1])};
                     })[0];
  b.results({r, s});
  return b.module_text();
}

TEST(Builder, SameGraphSameText) { EXPECT_EQ(small_program(), small_program()); }

TEST(Builder, ModuleShape) {
  std::string text = small_program();
  EXPECT_TRUE(has(text, "module @torchtpu attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32}"));
  EXPECT_TRUE(has(text, "func.func public @main(%arg0: tensor<2x3xf32>, %arg1: tensor<2x3xf32>) -> (tensor<2xf32>, tensor<2x3xf32>)"));
  EXPECT_TRUE(has(text, "%0 = \"stablehlo.add\"(%arg0, %arg1) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>"));
  EXPECT_TRUE(has(text, "\"func.return\"(%5, %0) : (tensor<2xf32>, tensor<2x3xf32>) -> ()"));
}

TEST(Builder, RegionsUseBlockArguments) {
  std::string text = small_program();
  EXPECT_TRUE(has(text, "^bb0(%2: tensor<f32>, %3: tensor<f32>):"));
  EXPECT_TRUE(has(text, "\"stablehlo.return\"("));
  EXPECT_TRUE(has(text, "{dimensions = array<i64: 1>} : (tensor<2x3xf32>, tensor<f32>) -> tensor<2xf32>"));
}

TEST(Builder, InfersResultTypes) {
  Builder b;
  Value x = b.parameter({DType::kBF16, {4, 6, 8}});
  EXPECT_EQ(b.transpose(x, {2, 0, 1}).type.dims, (std::vector<int64_t>{8, 4, 6}));
  EXPECT_EQ(b.slice(x, {0, 1, 0}, {4, 6, 8}, {2, 2, 3}).type.dims, (std::vector<int64_t>{2, 3, 3}));
  EXPECT_EQ(b.pad(x, b.constant(0, {DType::kBF16, {}}), {1, 0, 0}, {0, 2, 0}, {0, 0, 1}).type.dims,
            (std::vector<int64_t>{5, 8, 15}));
  EXPECT_EQ(b.compare(Compare::kLT, x, x).type.dtype, DType::kBool);
  EXPECT_EQ(b.unary(UnaryOp::kIsFinite, x).type.dtype, DType::kBool);
  Window w{{1, 3, 3}, {1, 2, 2}, {}, {}, {{0, 0}, {1, 1}, {1, 1}}};
  auto pooled = b.reduce_window({x}, {b.constant(0, {DType::kBF16, {}})}, w,
                                [](Builder& rb, const std::vector<Value>& a) {
                                  return std::vector<Value>{rb.binary(BinaryOp::kMaximum, a[0], a[1])};
                                });
  EXPECT_EQ(pooled[0].type.dims, (std::vector<int64_t>{4, 3, 4}));
  EXPECT_EQ(b.all_gather(x, 1, {{0, 1}}).type.dims, (std::vector<int64_t>{4, 12, 8}));
  EXPECT_EQ(b.all_to_all(x, 0, 2, {{0, 1, 2, 3}}).type.dims, (std::vector<int64_t>{1, 6, 32}));
}

TEST(Builder, AttributeSyntax) {
  Builder b;
  Value x = b.parameter({DType::kF32, {2, 3}});
  Value y = b.parameter({DType::kF32, {3, 4}});
  b.dot_general(x, y, {{}, {}, {1}, {0}}, DType::kF32);
  b.compare(Compare::kGE, x, x);
  b.broadcast_in_dim(b.parameter({DType::kF32, {3}}), {2, 3}, {1});
  b.all_reduce(x, {{0, 1}, {2, 3}}, [](Builder& rb, const std::vector<Value>& a) {
    return std::vector<Value>{rb.binary(BinaryOp::kAdd, a[0], a[1])};
  });
  b.collective_permute(x, {{0, 1}, {1, 0}});
  b.rng_bit_generator(b.parameter({DType::kU64, {2}}), {DType::kU32, {4}});
  b.constant(1.5, {DType::kF32, {}});
  b.constant(1, {DType::kBool, {}});
  b.constant(-7, {DType::kS64, {}});
  b.results({x});
  std::string text = b.module_text();
  EXPECT_TRUE(has(text, "dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0]>"));
  EXPECT_TRUE(has(text, "comparison_direction = #stablehlo<comparison_direction GE>, compare_type = #stablehlo<comparison_type FLOAT>"));
  EXPECT_TRUE(has(text, "broadcast_dimensions = array<i64: 1>"));
  EXPECT_TRUE(has(text, "replica_groups = dense<[[0, 1], [2, 3]]> : tensor<2x2xi64>"));
  EXPECT_TRUE(has(text, "source_target_pairs = dense<[[0, 1], [1, 0]]> : tensor<2x2xi64>"));
  EXPECT_TRUE(has(text, ":2 = \"stablehlo.rng_bit_generator\""));
  EXPECT_TRUE(has(text, "rng_algorithm = #stablehlo<rng_algorithm THREE_FRY>"));
  EXPECT_TRUE(has(text, "dense<1.50000000000000000e+00> : tensor<f32>"));
  EXPECT_TRUE(has(text, "dense<true> : tensor<i1>"));
  EXPECT_TRUE(has(text, "dense<-7> : tensor<i64>"));
}

TEST(Builder, IntegerConstantsSaturate) {
  Builder b;
  b.constant(9223372036854775807.0, {DType::kS64, {}});  // rounds to 2^63 as a double
  b.constant(-1e300, {DType::kS64, {}});
  b.constant(1e30, {DType::kU64, {}});
  b.constant_int(-5, {DType::kS64, {}});
  // Infinities are every type's "lowest/highest": they saturate to the type's own range.
  b.constant(-INFINITY, {DType::kS8, {}});
  b.constant(INFINITY, {DType::kS16, {}});
  b.constant(INFINITY, {DType::kU8, {}});
  b.constant(-INFINITY, {DType::kU32, {}});
  b.constant(-INFINITY, {DType::kS32, {}});
  b.constant(INFINITY, {DType::kBool, {}});
  b.results({b.parameter({DType::kF32, {}})});
  std::string text = b.module_text();
  EXPECT_TRUE(has(text, "dense<9223372036854775807> : tensor<i64>"));
  EXPECT_TRUE(has(text, "dense<-9223372036854775808> : tensor<i64>"));
  EXPECT_TRUE(has(text, "dense<18446744073709551615> : tensor<ui64>"));
  EXPECT_TRUE(has(text, "dense<-5> : tensor<i64>"));
  EXPECT_TRUE(has(text, "dense<-128> : tensor<i8>"));
  EXPECT_TRUE(has(text, "dense<32767> : tensor<i16>"));
  EXPECT_TRUE(has(text, "dense<255> : tensor<ui8>"));
  EXPECT_TRUE(has(text, "dense<0> : tensor<ui32>"));
  EXPECT_TRUE(has(text, "dense<-2147483648> : tensor<i32>"));
  EXPECT_TRUE(has(text, "dense<true> : tensor<i1>"));
  EXPECT_THROW(b.constant(NAN, {DType::kS32, {}}), std::invalid_argument);
}

TEST(Builder, BitcastBetweenWidthsAddsOrTakesTheLastDimension) {
  Builder b;
  Value words = b.parameter({DType::kF32, {3}});
  EXPECT_EQ(b.bitcast_convert(words, DType::kU8).type.dims, (std::vector<int64_t>{3, 4}));
  Value bytes = b.parameter({DType::kU8, {3, 4}});
  EXPECT_EQ(b.bitcast_convert(bytes, DType::kF32).type.dims, (std::vector<int64_t>{3}));
  EXPECT_THROW(b.bitcast_convert(b.parameter({DType::kU8, {3, 2}}), DType::kF32), std::exception);
}

TEST(Builder, Float8ConversionsGoThroughFloat32AndSaturateWhenAsked) {
  auto program = [](DType from, DType to) {
    Builder b;
    b.results({b.convert(b.parameter({from, {2}}), to)});
    return b.module_text();
  };
  // a float64 or an integer rounds to float32 first, as PyTorch's float8 constructors take a float
  EXPECT_TRUE(has(program(DType::kF64, DType::kF8E5M2), "(tensor<2xf64>) -> tensor<2xf32>"));
  EXPECT_TRUE(has(program(DType::kS64, DType::kF8E4M3FN), "(tensor<2xi64>) -> tensor<2xf32>"));
  EXPECT_FALSE(has(program(DType::kF32, DType::kF8E4M3FN), "stablehlo.clamp"));
  set_float8_e4m3fn_saturates(true);
  std::string saturating = program(DType::kF32, DType::kF8E4M3FN);
  std::string e5m2 = program(DType::kF32, DType::kF8E5M2);
  set_float8_e4m3fn_saturates(false);
  EXPECT_TRUE(has(saturating, "stablehlo.clamp"));
  EXPECT_TRUE(has(saturating, "4.48000000000000000e+02"));
  EXPECT_TRUE(has(saturating, "stablehlo.select"));  // NaN stays NaN
  EXPECT_FALSE(has(e5m2, "stablehlo.clamp"));  // float8_e5m2 has infinities
}

TEST(Builder, ComplexAndUnsignedTypes) {
  EXPECT_EQ((TensorType{DType::kC64, {2}}.str()), "tensor<2xcomplex<f32>>");
  EXPECT_EQ((TensorType{DType::kU8, {}}.str()), "tensor<ui8>");
  EXPECT_EQ((TensorType{DType::kBool, {1, 0}}.str()), "tensor<1x0xi1>");
}

TEST(Builder, ModuleTextRecordsReplicaCount) {
  Builder b;
  b.results({b.parameter({DType::kF32, {}})});
  EXPECT_TRUE(has(b.module_text(4, 2), "mhlo.num_partitions = 2 : i32, mhlo.num_replicas = 4 : i32"));
}

}  // namespace
}  // namespace torchtpu::hlo
