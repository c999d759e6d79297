// Programs built with the emitter, compiled by XLA and run on one device; results are checked
// against plain C++ loops.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "tests/runtime/test_util.h"

namespace torchtpu {
namespace {

using hlo::Builder;
using hlo::TensorType;
using hlo::Value;
using testing::download;
using testing::run_single;
using testing::upload;

hlo::RegionBody add_body() {
  return [](Builder& b, const std::vector<Value>& a) {
    return std::vector<Value>{b.binary(hlo::BinaryOp::kAdd, a[0], a[1])};
  };
}

hlo::RegionBody max_body() {
  return [](Builder& b, const std::vector<Value>& a) {
    return std::vector<Value>{b.binary(hlo::BinaryOp::kMaximum, a[0], a[1])};
  };
}

TEST(Compute, ElementwiseArithmetic) {
  Builder b;
  TensorType t{DType::kF32, {4}};
  Value x = b.parameter(t), y = b.parameter(t);
  Value sum = b.binary(hlo::BinaryOp::kAdd, x, y);
  Value prod = b.binary(hlo::BinaryOp::kMultiply, sum, b.constant(2.0, t));
  Value e = b.unary(hlo::UnaryOp::kExponential, b.unary(hlo::UnaryOp::kNegate, x));
  b.results({prod, e});
  std::vector<float> xs{1, 2, 3, 4}, ys{10, 20, 30, 40};
  auto bx = upload(xs, DType::kF32, {4}), by = upload(ys, DType::kF32, {4});
  auto out = run_single(b, {&bx, &by});
  ASSERT_EQ(out.size(), 2u);
  auto p = download<float>(out[0]), ex = download<float>(out[1]);
  for (int i = 0; i < 4; ++i) {
    EXPECT_FLOAT_EQ(p[i], (xs[i] + ys[i]) * 2);
    EXPECT_NEAR(ex[i], std::exp(-xs[i]), 1e-6);
  }
}

TEST(Compute, CompareSelectClampConvert) {
  Builder b;
  TensorType t{DType::kS32, {5}};
  Value x = b.parameter(t);
  Value zero = b.constant(0, t);
  Value relu = b.select(b.compare(hlo::Compare::kGT, x, zero), x, zero);
  Value clamped = b.clamp(b.constant(-1, t), x, b.constant(1, t));
  Value half = b.binary(hlo::BinaryOp::kDivide, b.convert(x, DType::kF32),
                        b.constant(2.0, {DType::kF32, {5}}));
  b.results({relu, clamped, half});
  std::vector<int32_t> xs{-3, -1, 0, 2, 7};
  auto bx = upload(xs, DType::kS32, {5});
  auto out = run_single(b, {&bx});
  EXPECT_EQ(download<int32_t>(out[0]), (std::vector<int32_t>{0, 0, 0, 2, 7}));
  EXPECT_EQ(download<int32_t>(out[1]), (std::vector<int32_t>{-1, -1, 0, 1, 1}));
  EXPECT_EQ(download<float>(out[2]), (std::vector<float>{-1.5f, -0.5f, 0, 1, 3.5f}));
}

TEST(Compute, BitcastConvert) {
  Builder b;
  Value x = b.parameter({DType::kF32, {2}});
  b.results({b.bitcast_convert(x, DType::kS32)});
  auto bx = upload(std::vector<float>{1.0f, -2.0f}, DType::kF32, {2});
  auto out = run_single(b, {&bx});
  EXPECT_EQ(download<int32_t>(out[0]), (std::vector<int32_t>{0x3F800000, static_cast<int32_t>(0xC0000000)}));
}

TEST(Compute, MatmulMatchesLoop) {
  const int m = 16, k = 32, n = 8;
  Builder b;
  Value x = b.parameter({DType::kF32, {m, k}}), y = b.parameter({DType::kF32, {k, n}});
  b.results({b.dot_general(x, y, {{}, {}, {1}, {0}}, DType::kF32)});
  std::vector<float> xs(m * k), ys(k * n);
  for (int i = 0; i < m * k; ++i) xs[i] = static_cast<float>((i % 7) - 3) * 0.5f;
  for (int i = 0; i < k * n; ++i) ys[i] = static_cast<float>((i % 5) - 2) * 0.25f;
  auto bx = upload(xs, DType::kF32, {m, k}), by = upload(ys, DType::kF32, {k, n});
  auto got = download<float>(run_single(b, {&bx, &by})[0]);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      float want = 0;
      for (int p = 0; p < k; ++p) want += xs[i * k + p] * ys[p * n + j];
      EXPECT_NEAR(got[i * n + j], want, 1e-4) << i << "," << j;
    }
}

TEST(Compute, BatchedDotGeneral) {
  Builder b;
  Value x = b.parameter({DType::kF32, {2, 2, 3}}), y = b.parameter({DType::kF32, {2, 3, 1}});
  Value z = b.dot_general(x, y, {{0}, {0}, {2}, {1}}, DType::kF32);
  EXPECT_EQ(z.type.dims, (std::vector<int64_t>{2, 2, 1}));
  b.results({z});
  std::vector<float> xs{1, 2, 3, 4, 5, 6, 1, 0, 0, 0, 1, 0}, ys{1, 1, 1, 2, 3, 4};
  auto bx = upload(xs, DType::kF32, {2, 2, 3}), by = upload(ys, DType::kF32, {2, 3, 1});
  EXPECT_EQ(download<float>(run_single(b, {&bx, &by})[0]), (std::vector<float>{6, 15, 2, 3}));
}

TEST(Compute, ReduceSumAndMax) {
  Builder b;
  Value x = b.parameter({DType::kF32, {2, 3}});
  Value zero = b.constant(0.0, {DType::kF32, {}});
  Value ninf = b.constant(-INFINITY, {DType::kF32, {}});
  Value rows = b.reduce({x}, {zero}, {1}, add_body())[0];
  Value all_max = b.reduce({x}, {ninf}, {0, 1}, max_body())[0];
  b.results({rows, all_max});
  auto bx = upload(std::vector<float>{1, 2, 3, -4, 9, 5}, DType::kF32, {2, 3});
  auto out = run_single(b, {&bx});
  EXPECT_EQ(download<float>(out[0]), (std::vector<float>{6, 10}));
  EXPECT_EQ(download<float>(out[1]), (std::vector<float>{9}));
}

TEST(Compute, VariadicReduceArgmax) {
  // argmax as one reduce over (value, index) pairs, the way torch.argmax lowers.
  Builder b;
  TensorType t{DType::kF32, {5}};
  Value x = b.parameter(t);
  Value idx = b.iota({DType::kS32, {5}}, 0);
  auto r = b.reduce({x, idx}, {b.constant(-INFINITY, {DType::kF32, {}}), b.constant(0, {DType::kS32, {}})}, {0},
                    [](Builder& rb, const std::vector<Value>& a) {
                      // a = (acc_value, acc_index, x_value, x_index)
                      Value take = rb.compare(hlo::Compare::kGT, a[2], a[0]);
                      return std::vector<Value>{rb.select(take, a[2], a[0]), rb.select(take, a[3], a[1])};
                    });
  b.results({r[0], r[1]});
  auto bx = upload(std::vector<float>{3, 1, 8, 2, 8}, DType::kF32, {5});
  auto out = run_single(b, {&bx});
  EXPECT_EQ(download<float>(out[0]), std::vector<float>{8});
  EXPECT_EQ(download<int32_t>(out[1]), std::vector<int32_t>{2});
}

TEST(Compute, ReduceWindowMaxPool) {
  Builder b;
  Value x = b.parameter({DType::kF32, {4, 4}});
  hlo::Window w{{2, 2}, {2, 2}, {}, {}, {}};
  b.results(b.reduce_window({x}, {b.constant(-INFINITY, {DType::kF32, {}})}, w, max_body()));
  std::vector<float> xs(16);
  for (int i = 0; i < 16; ++i) xs[i] = static_cast<float>(i);
  auto bx = upload(xs, DType::kF32, {4, 4});
  EXPECT_EQ(download<float>(run_single(b, {&bx})[0]), (std::vector<float>{5, 7, 13, 15}));
}

TEST(Compute, ShapeOps) {
  Builder b;
  Value x = b.parameter({DType::kS32, {2, 3}});
  Value t = b.transpose(x, {1, 0});                                  // 3x2
  Value r = b.reshape(x, {3, 2});
  Value s = b.slice(x, {0, 0}, {2, 3}, {1, 2});                       // columns 0 and 2
  Value bc = b.broadcast_in_dim(b.slice(x, {0, 0}, {1, 3}, {1, 1}), {2, 3}, {0, 1});
  Value cat = b.concatenate({x, x}, 0);                               // 4x3
  Value padded = b.pad(x, b.constant(0, {DType::kS32, {}}), {1, 0}, {0, 1}, {0, 0});  // 3x4
  b.results({t, r, s, bc, cat, padded});
  auto bx = upload(std::vector<int32_t>{1, 2, 3, 4, 5, 6}, DType::kS32, {2, 3});
  auto out = run_single(b, {&bx});
  EXPECT_EQ(download<int32_t>(out[0]), (std::vector<int32_t>{1, 4, 2, 5, 3, 6}));
  EXPECT_EQ(download<int32_t>(out[1]), (std::vector<int32_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(download<int32_t>(out[2]), (std::vector<int32_t>{1, 3, 4, 6}));
  EXPECT_EQ(download<int32_t>(out[3]), (std::vector<int32_t>{1, 2, 3, 1, 2, 3}));
  EXPECT_EQ(out[4].dims(), (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(download<int32_t>(out[5]), (std::vector<int32_t>{0, 0, 0, 0, 1, 2, 3, 0, 4, 5, 6, 0}));
}

TEST(Compute, DynamicSliceAndUpdate) {
  Builder b;
  Value x = b.parameter({DType::kF32, {4}});
  Value start = b.parameter({DType::kS32, {}});
  Value piece = b.dynamic_slice(x, {start}, {2});
  Value updated = b.dynamic_update_slice(x, b.constant(-1.0, {DType::kF32, {2}}), {start});
  b.results({piece, updated});
  auto bx = upload(std::vector<float>{10, 20, 30, 40}, DType::kF32, {4});
  auto bs = upload(std::vector<int32_t>{1}, DType::kS32, {});
  auto out = run_single(b, {&bx, &bs});
  EXPECT_EQ(download<float>(out[0]), (std::vector<float>{20, 30}));
  EXPECT_EQ(download<float>(out[1]), (std::vector<float>{10, -1, -1, 40}));
}

TEST(Compute, IotaAndConstantBytes) {
  Builder b;
  Value i = b.iota({DType::kS64, {2, 3}}, 1);
  std::vector<float> data{0.5f, -0.25f, 1e30f};
  Value c = b.constant_bytes(data.data(), {DType::kF32, {3}});
  b.results({i, c});
  auto out = run_single(b, {});
  EXPECT_EQ(download<int64_t>(out[0]), (std::vector<int64_t>{0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(download<float>(out[1]), data);
}

TEST(Compute, NonFiniteConstants) {
  Builder b;
  b.results({b.constant(INFINITY, {DType::kF32, {}}), b.constant(NAN, {DType::kF64, {}}),
             b.constant(-INFINITY, {DType::kBF16, {}})});
  auto out = run_single(b, {});
  EXPECT_TRUE(std::isinf(download<float>(out[0])[0]));
  EXPECT_TRUE(std::isnan(download<double>(out[1])[0]));
  EXPECT_EQ(download<uint16_t>(out[2])[0], 0xFF80);  // bf16 -inf
}

TEST(Compute, GatherRows) {
  // x[idx] for a 2-D x and 1-D idx: embedding lookup.
  Builder b;
  Value x = b.parameter({DType::kF32, {3, 2}});
  Value idx = b.parameter({DType::kS32, {4, 1}});
  b.results({b.gather(x, idx, {{1}, {0}, {0}, 1}, {1, 2}, {4, 2})});
  auto bx = upload(std::vector<float>{1, 2, 3, 4, 5, 6}, DType::kF32, {3, 2});
  auto bi = upload(std::vector<int32_t>{2, 0, 2, 1}, DType::kS32, {4, 1});
  EXPECT_EQ(download<float>(run_single(b, {&bx, &bi})[0]),
            (std::vector<float>{5, 6, 1, 2, 5, 6, 3, 4}));
}

TEST(Compute, ScatterAddAccumulates) {
  Builder b;
  Value x = b.parameter({DType::kF32, {4}});
  Value idx = b.parameter({DType::kS32, {3, 1}});
  Value upd = b.parameter({DType::kF32, {3}});
  b.results({b.scatter(x, idx, upd, {{}, {0}, {0}, 1}, add_body())});
  auto bx = upload(std::vector<float>{0, 0, 0, 0}, DType::kF32, {4});
  auto bi = upload(std::vector<int32_t>{1, 3, 1}, DType::kS32, {3, 1});
  auto bu = upload(std::vector<float>{1, 2, 5}, DType::kF32, {3});
  EXPECT_EQ(download<float>(run_single(b, {&bx, &bi, &bu})[0]), (std::vector<float>{0, 6, 0, 2}));
}

TEST(Compute, SortKeysWithValues) {
  Builder b;
  Value k = b.parameter({DType::kF32, {5}});
  Value v = b.iota({DType::kS32, {5}}, 0);
  auto sorted = b.sort({k, v}, 0, true, [](Builder& rb, const std::vector<Value>& a) {
    return std::vector<Value>{rb.compare(hlo::Compare::kLT, a[0], a[1])};
  });
  b.results(sorted);
  auto bk = upload(std::vector<float>{3, 1, 2, 1, 0}, DType::kF32, {5});
  auto out = run_single(b, {&bk});
  EXPECT_EQ(download<float>(out[0]), (std::vector<float>{0, 1, 1, 2, 3}));
  EXPECT_EQ(download<int32_t>(out[1]), (std::vector<int32_t>{4, 1, 3, 2, 0}));  // stable
}

TEST(Compute, WhileLoopRunsUntilTheConditionFails) {
  // doubles x until it reaches the limit, counting the steps
  Builder b;
  TensorType scalar{DType::kF32, {}}, count{DType::kS32, {}};
  Value x = b.parameter(scalar), limit = b.parameter(scalar);
  auto out = b.while_loop(
      {x, b.constant(0, count), limit},
      [](Builder& rb, const std::vector<Value>& a) { return std::vector<Value>{rb.compare(hlo::Compare::kLT, a[0], a[2])}; },
      [](Builder& rb, const std::vector<Value>& a) {
        Value next = rb.binary(hlo::BinaryOp::kMultiply, a[0], rb.constant(2.0, a[0].type));
        return std::vector<Value>{next, rb.binary(hlo::BinaryOp::kAdd, a[1], rb.constant(1, a[1].type)), a[2]};
      });
  b.results({out[0], out[1]});
  auto bx = upload(std::vector<float>{3}, DType::kF32, {}), bl = upload(std::vector<float>{100}, DType::kF32, {});
  auto result = run_single(b, {&bx, &bl});
  EXPECT_EQ(download<float>(result[0]), (std::vector<float>{192}));
  EXPECT_EQ(download<int32_t>(result[1]), (std::vector<int32_t>{6}));
}

TEST(Compute, RngBitGeneratorIsDeterministicPerState) {
  Builder b;
  Value state = b.parameter({DType::kU64, {2}});
  auto [next, bits] = b.rng_bit_generator(state, {DType::kU32, {64}});
  b.results({next, bits});
  auto s = upload(std::vector<uint64_t>{42, 0}, DType::kU64, {2});
  auto first = run_single(b, {&s});
  auto again = run_single(b, {&s});
  auto advanced = run_single(b, {&first[0]});
  auto bits1 = download<uint32_t>(first[1]);
  EXPECT_EQ(bits1, download<uint32_t>(again[1]));
  EXPECT_NE(bits1, download<uint32_t>(advanced[1]));
  EXPECT_NE(download<uint64_t>(first[0]), (std::vector<uint64_t>{42, 0}));
  std::sort(bits1.begin(), bits1.end());
  EXPECT_EQ(std::unique(bits1.begin(), bits1.end()), bits1.end());  // 64 distinct words
}

TEST(Compute, ManyDTypesAdd) {
  for (DType dt : {DType::kF64, DType::kBF16, DType::kF16, DType::kS8, DType::kS64, DType::kU8}) {
    Builder b;
    TensorType t{dt, {3}};
    Value x = b.parameter(t);
    b.results({b.binary(hlo::BinaryOp::kAdd, x, b.constant(1, t))});
    std::vector<uint8_t> zeros(3 * element_size(dt), 0);  // zero is all-zero bytes in every type
    auto bx = testing::client().to_device(zeros.data(), dt, {3}, testing::client().device(0));
    auto out = run_single(b, {&bx});
    auto as_f32 = [&] {
      Builder c;
      Value y = c.parameter(t);
      c.results({c.convert(y, DType::kF32)});
      return download<float>(run_single(c, {&out[0]})[0]);
    }();
    EXPECT_EQ(as_f32, (std::vector<float>{1, 1, 1})) << dtype_name(dt);
  }
}

// A vector times a matrix held as a flat buffer, compiled with XLA's fusion pass off by a string
// option (exec/compile_cache.cpp does so for such programs): the plugin takes the option, and the
// product is right.
TEST(Compute, MatrixVectorProductWithoutTheFusionPass) {
  Builder b;
  const int64_t k = 3, n = 4;
  Value x = b.parameter({DType::kF32, {k}}), w = b.parameter({DType::kF32, {k * n}});
  Value product = b.dot_general(b.reshape(x, {1, k}), b.reshape(w, {k, n}), {{}, {}, {1}, {0}}, DType::kF32);
  b.results({b.reshape(product, {n})});
  runtime::CompileOptions options;
  options.xla_string_flags["xla_disable_hlo_passes"] = "fusion";
  runtime::Executable exe = testing::client().compile(b.module_text(), options);
  std::vector<float> xs{1, 2, 3}, ws(k * n);
  for (int64_t i = 0; i < k * n; ++i) ws[i] = static_cast<float>(i);
  auto bx = upload(xs, DType::kF32, {k}), bw = upload(ws, DType::kF32, {k * n});
  runtime::ExecuteResult r = exe.execute({{&bx, &bw}});
  r.done[0].await();
  auto out = download<float>(r.outputs[0][0]);
  for (int64_t j = 0; j < n; ++j) EXPECT_FLOAT_EQ(out[j], xs[0] * ws[j] + xs[1] * ws[n + j] + xs[2] * ws[2 * n + j]);
}

}  // namespace
}  // namespace torchtpu
