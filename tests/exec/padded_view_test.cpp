// Padded operands: one program for every exact size a box holds (exec/padded_view.h).
#include <gtest/gtest.h>

#include <numeric>

#include "exec/executor.h"
#include "exec/metrics.h"
#include "hlo/operators.h"
#include "tests/exec/storage_util.h"

namespace torchtpu::exec {
namespace {

using hlo::Builder;
using hlo::Value;
using testing::contents;
using testing::contiguous;
using testing::storage_of;

std::vector<float> iota_data(int64_t n, float from = 0) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), from);
  return v;
}

Lowering plus_one() {
  return [](Builder& b, const std::vector<Value>& in) { return std::vector<Value>{in[0] + 1.0}; };
}

// Sums dimension 1 of a rank-3 box.
Lowering sum_dim1() {
  return [](Builder& b, const std::vector<Value>& in) {
    auto add = [](Builder& r, const std::vector<Value>& a) { return std::vector<Value>{a[0] + a[1]}; };
    return b.reduce({in[0]}, {b.constant(0, {DType::kF32, {}})}, {1}, add);
  };
}

// x + 1 for x of sizes [2, n, 3], padded to [2, 8, 3]: a new storage holding the result.
std::unique_ptr<BufferRef> plus_one_padded(BufferRef& x, int64_t n) {
  auto out = std::make_unique<BufferRef>(0, 2 * n * 3 * sizeof(float));
  Padding box{{2, 8, 3}};
  run({"plus_one", plus_one(), {{&x, contiguous({2, n, 3}), box}}, {{out.get(), contiguous({2, n, 3}), box}}});
  return out;
}

TEST(PaddedView, OneProgramServesEverySizeInTheBox) {
  auto x5 = storage_of(iota_data(30));
  auto y5 = plus_one_padded(*x5, 5);
  EXPECT_EQ(contents(*y5), iota_data(30, 1));
  EXPECT_EQ(y5->value()->length(), 48);  // the box's elements: the storage's capacity
  // An input of exact size is a parameter of that size: a new size is a new program. Its padded
  // result is not: reading it again at any size in the box runs one program.
  auto y7 = plus_one_padded(*storage_of(iota_data(42)), 7);
  EXPECT_EQ(y7->value()->length(), 48);
  EXPECT_EQ(contents(*plus_one_padded(*y5, 5)), iota_data(30, 2));
  int64_t compiles = counters().compiles;
  EXPECT_EQ(contents(*plus_one_padded(*y7, 7)), iota_data(42, 2));
  EXPECT_EQ(counters().compiles, compiles);
}

TEST(PaddedView, ATransposedResultIsWrittenWholeAtTheBoxesCapacity) {
  // The result's view is [2, 5, 3] over a [5, 2, 3] layout (attention's output, transposed).
  auto x = storage_of(iota_data(30));
  auto out = std::make_unique<BufferRef>(0, 30 * sizeof(float));
  View transposed{DType::kF32, {2, 5, 3}, {3, 6, 1}, 0};
  Padding box{{2, 8, 3}};
  run({"plus_one", plus_one(), {{x.get(), contiguous({2, 5, 3}), box}}, {{out.get(), transposed, box}}});
  EXPECT_EQ(out->value()->length(), 48);
  std::vector<float> expected(30);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 5; ++j)
      for (int k = 0; k < 3; ++k) expected[j * 6 + i * 3 + k] = static_cast<float>(i * 15 + j * 3 + k + 1);
  EXPECT_EQ(contents(*out), expected);
}

TEST(PaddedView, PaddedPositionsReadAsTheFill) {
  // Sums over the padded dimension: with zeros in the padding the sum is the exact one.
  auto x = storage_of(iota_data(2 * 3 * 2));  // [2, 3, 2]
  BufferRef out(0, 2 * 2 * sizeof(float));
  Padding in_box{{2, 4, 2}, Fill::kZero};
  run({"sum1", sum_dim1(), {{x.get(), contiguous({2, 3, 2}), in_box}}, {{&out, contiguous({2, 2})}}});
  EXPECT_EQ(contents(out), (std::vector<float>{0 + 2 + 4, 1 + 3 + 5, 6 + 8 + 10, 7 + 9 + 11}));
}

TEST(PaddedView, StridedViewsAndScatteredWrites) {
  // The transpose of a [3, 4] matrix, read padded to [8, 4] and written, +1, into column 1 of a
  // [4, 3] storage's transpose... as a strided destination: x.t()[:, 1] style writes.
  auto m = storage_of(iota_data(12));  // [3, 4]
  View t{DType::kF32, {4, 3}, {1, 4}, 0};
  auto out = storage_of(std::vector<float>(12, -1));
  View dst = contiguous({4, 3});
  Padding box{{8, 4}};
  run({"plus_one", plus_one(), {{m.get(), t, box}}, {{out.get(), dst, box}}});
  EXPECT_EQ(contents(*out), (std::vector<float>{1, 5, 9, 2, 6, 10, 3, 7, 11, 4, 8, 12}));
  // In place through a strided view (column 1 of the [4, 3] result): a scatter that leaves the rest.
  View column{DType::kF32, {4}, {3}, 1};
  Padding col_box{{8}};
  run({"plus_one", plus_one(), {{out.get(), column, col_box}}, {{out.get(), column, col_box}}});
  EXPECT_EQ(contents(*out), (std::vector<float>{1, 6, 9, 2, 7, 10, 3, 8, 11, 4, 9, 12}));
}

TEST(PaddedView, DropPaddingLeavesExactlyTheBytes) {
  auto x = storage_of(iota_data(30));
  auto y = plus_one_padded(*x, 5);
  ASSERT_EQ(y->value()->length(), 48);
  drop_padding(*y);
  EXPECT_EQ(y->value()->length(), 30);
  EXPECT_EQ(contents(*y), iota_data(30, 1));
}

TEST(PaddedView, LoweringGetsExactSizes) {
  auto x = storage_of(iota_data(30));
  BufferRef sizes(0, 3 * sizeof(int64_t));
  OpCall call{"sizes", [](Builder& b, const std::vector<Value>& in) { return std::vector<Value>{in[1]}; },
              {{x.get(), contiguous({2, 5, 3}), Padding{{2, 8, 3}}}},
              {{&sizes, View{DType::kS64, {3}, {1}, 0}}}};
  call.sizes_to_lowering = true;
  run(std::move(call));
  std::vector<int64_t> got(3);
  download(sizes, got.data());
  EXPECT_EQ(got, (std::vector<int64_t>{2, 5, 3}));
}

}  // namespace
}  // namespace torchtpu::exec
