// Strict-mode execution of op calls over storages and views, with the single-op cache.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <numeric>
#include <thread>

#include "exec/compile_cache.h"
#include "exec/executor.h"
#include "exec/metrics.h"
#include "exec/op_record.h"
#include "exec/view_program.h"
#include "tests/exec/storage_util.h"

namespace torchtpu::exec {
namespace {

using hlo::Builder;
using hlo::Value;

using testing::contents;
using testing::contiguous;
using testing::storage_of;

Lowering identity() {
  return [](Builder&, const std::vector<Value>& in) { return std::vector<Value>{in[0]}; };
}

Lowering add_one() {
  return [](Builder& b, const std::vector<Value>& in) {
    return std::vector<Value>{b.binary(hlo::BinaryOp::kAdd, in[0], b.constant(1.0, in[0].type))};
  };
}

// Copies the view `v` of `src` into a fresh contiguous storage and returns its contents.
std::vector<float> read(BufferRef& src, const View& v) {
  BufferRef dst(0, v.numel() * sizeof(float));
  run({"copy", identity(), {{&src, v}}, {{&dst, contiguous(v.sizes)}}});
  return contents(dst);
}

TEST(Executor, ReadsViews) {
  std::vector<float> data(12);
  std::iota(data.begin(), data.end(), 0.0f);
  auto s_owner = storage_of(data);
  BufferRef& s = *s_owner;  // a 3x4 matrix
  EXPECT_EQ(read(s, contiguous({3, 4})), data);
  EXPECT_EQ(read(s, contiguous({4}, 4)), (std::vector<float>{4, 5, 6, 7}));                     // row 1
  EXPECT_EQ(read(s, {DType::kF32, {4, 3}, {1, 4}, 0}), (std::vector<float>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));  // .t()
  EXPECT_EQ(read(s, {DType::kF32, {3}, {5}, 0}), (std::vector<float>{0, 5, 10}));              // diagonal
  EXPECT_EQ(read(s, {DType::kF32, {2, 2}, {0, 2}, 1}), (std::vector<float>{1, 3, 1, 3}));       // expand
}

TEST(Executor, WritesThroughViewsSwapTheWholeStorage) {
  std::vector<float> data(6, 0.0f);
  auto s_owner = storage_of(data);
  BufferRef& s = *s_owner;  // 2x3
  // x[:, 1] += 1  (a strided view written in place)
  View column{DType::kF32, {2}, {3}, 1};
  run({"add_one", add_one(), {{&s, column}}, {{&s, column}}});
  EXPECT_EQ(contents(s), (std::vector<float>{0, 1, 0, 0, 1, 0}));
  // x[1] += 1  (a contiguous sub-range)
  run({"add_one", add_one(), {{&s, contiguous({3}, 3)}}, {{&s, contiguous({3}, 3)}}});
  EXPECT_EQ(contents(s), (std::vector<float>{0, 1, 0, 1, 2, 1}));
}

TEST(Executor, NeverWrittenStorageReadsAsZeros) {
  BufferRef fresh(0, 4 * sizeof(float));
  EXPECT_EQ(read(fresh, contiguous({4})), (std::vector<float>{0, 0, 0, 0}));
}

TEST(Executor, SameGeometryHitsTheCache) {
  auto a_owner = storage_of({1, 2, 3, 4});
  BufferRef& a = *a_owner;
  BufferRef out(0, 4 * sizeof(float));
  run({"add_one", add_one(), {{&a, contiguous({4})}}, {{&out, contiguous({4})}}});
  flush("a read");  // a strict op whose program is not loaded waits for one
  int64_t compiles = counters().compiles, hits = cache_stats().hits["memory"];
  auto b_owner = storage_of({5, 6, 7, 8});
  BufferRef& b = *b_owner;
  run({"add_one", add_one(), {{&b, contiguous({4})}}, {{&out, contiguous({4})}}});
  EXPECT_EQ(counters().compiles, compiles);
  EXPECT_EQ(cache_stats().hits["memory"], hits + 1);
  EXPECT_EQ(contents(out), (std::vector<float>{6, 7, 8, 9}));
  // A new shape compiles a new program.
  auto c_owner = storage_of({1, 2});
  BufferRef& c = *c_owner;
  BufferRef out2(0, 2 * sizeof(float));
  run({"add_one", add_one(), {{&c, contiguous({2})}}, {{&out2, contiguous({2})}}});
  flush("a read");
  EXPECT_EQ(counters().compiles, compiles + 1);
}

// Strict mode's shortcut (exec::bind_loaded) must build the key the one-op window gives, or it
// never finds the program: nothing is bound before the first run compiled it, then it is (an input
// read twice is one parameter), and runs bound to it compute the same.
TEST(Executor, AStrictOpIsBoundToTheProgramItsFirstRunLoaded) {
  auto x = storage_of({1, 2, 3});
  BufferRef y(0, 3 * sizeof(float));
  Lowering add = [](Builder& b, const std::vector<Value>& in) {
    return std::vector<Value>{b.binary(hlo::BinaryOp::kAdd, in[0], in[1])};
  };
  auto call = [&]() -> OpCall {
    return {"add_self", add, {{x.get(), contiguous({3})}, {x.get(), contiguous({3})}}, {{&y, contiguous({3})}}};
  };
  EXPECT_FALSE(bind_loaded(call()).has_value());
  run(call());
  flush("a read");  // the first run waited for its program
  std::optional<BoundOp> bound = bind_loaded(call());
  ASSERT_TRUE(bound.has_value());
  EXPECT_EQ(bound->parameters.size(), 1u);
  EXPECT_EQ(bound->results.size(), 1u);
  bound.reset();  // its unexecuted result in y is replaced by the next run's
  int64_t compiles = counters().compiles;
  run(call());
  EXPECT_EQ(counters().compiles, compiles);
  EXPECT_EQ(contents(y), (std::vector<float>{2, 4, 6}));
}

// Strict mode: an op whose program is not loaded waits, with the ops after it (one reading its
// result), while its program compiles ahead; a read runs them. Once loaded, the op runs at once.
TEST(Executor, AStrictOpWhoseProgramIsNotLoadedWaitsUntilARead) {
  auto x = storage_of({1, 2, 3, 4, 5, 6, 7});  // a shape no other test here uses
  BufferRef once(0, 7 * sizeof(float)), twice(0, 7 * sizeof(float));
  run({"add_one", add_one(), {{x.get(), contiguous({7})}}, {{&once, contiguous({7})}}});
  EXPECT_EQ(pending_ops(), 1u);
  run({"add_one", add_one(), {{&once, contiguous({7})}}, {{&twice, contiguous({7})}}});
  EXPECT_EQ(pending_ops(), 2u);
  EXPECT_EQ(contents(twice), (std::vector<float>{3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(pending_ops(), 0u);
  EXPECT_EQ(contents(once), (std::vector<float>{2, 3, 4, 5, 6, 7, 8}));
  int64_t compiles = counters().compiles;
  run({"add_one", add_one(), {{&twice, contiguous({7})}}, {{&once, contiguous({7})}}});
  EXPECT_EQ(pending_ops(), 0u);
  EXPECT_EQ(counters().compiles, compiles);
  EXPECT_EQ(contents(once), (std::vector<float>{4, 5, 6, 7, 8, 9, 10}));
}

// An op at one line reading and writing a row that moves (x[i] += 1 in a loop) compiles a
// program for the first row and one with the offset as a run-time value for every other row;
// both compute what PyTorch does.
TEST(Executor, AViewThatMovesBetweenCallsAtOneLineReadsItsOffsetAtRunTime) {
  std::vector<float> data(12, 0.0f);
  auto s = storage_of(data);  // 4x3
  auto line = std::make_shared<graph::Origin>(graph::Origin{"add_one", "loop.py:3"});
  int64_t compiles = counters().compiles;
  for (int64_t row = 0; row < 4; ++row) {
    OpCall call{"add_one", add_one(), {{s.get(), contiguous({3}, 3 * row)}}, {{s.get(), contiguous({3}, 3 * row)}}};
    call.origin = line;
    run(std::move(call));
  }
  flush("a read");
  EXPECT_EQ(counters().compiles, compiles + 2);
  EXPECT_EQ(contents(*s), std::vector<float>(12, 1.0f));
  // a column (strided) that moves, read into a fresh storage
  auto column = std::make_shared<graph::Origin>(graph::Origin{"copy", "loop.py:5"});
  for (int64_t c = 0; c < 3; ++c) {
    BufferRef out(0, 4 * sizeof(float));
    OpCall call{"copy", identity(), {{s.get(), {DType::kF32, {4}, {3}, c}}}, {{&out, contiguous({4})}}};
    call.origin = column;
    run(std::move(call));
    EXPECT_EQ(contents(out), std::vector<float>(4, 1.0f));
  }
}

TEST(Executor, TracksBytesHeldByStorages) {
  int64_t before = device_memory(0).allocated;
  {
    auto s = storage_of({1, 2, 3, 4});
    EXPECT_EQ(device_memory(0).allocated, before + 16);
    EXPECT_GE(device_memory(0).peak, before + 16);
  }
  EXPECT_EQ(device_memory(0).allocated, before);
}

TEST(Executor, LoweringArityMismatchIsAnError) {
  auto a_owner = storage_of({1});
  BufferRef& a = *a_owner;
  BufferRef out(0, sizeof(float));
  Lowering none = [](Builder&, const std::vector<Value>&) { return std::vector<Value>{}; };
  EXPECT_THROW(run({"broken", none, {{&a, contiguous({1})}}, {{&out, contiguous({1})}}}),
               std::logic_error);
}

// complex32 storages hold 32-bit words of two float16 parts, real first in memory (PyTorch's
// layout); convert() reads them as complex64 and writes complex64 back rounded to them.
TEST(Executor, Complex32WordsConvertToAndFromComplex64) {
  const std::vector<uint16_t> halves = {0x3E00, 0xC000, 0x3400, 0x4200};  // 1.5 - 2i, 0.25 + 3i
  BufferRef words(0, halves.size() * sizeof(uint16_t));
  upload(words, halves.data(), DType::kC32);
  View two{DType::kC32, {2}, {1}, 0};
  BufferRef parts(0, 4 * sizeof(float));
  run({"c32->f32", [](Builder& b, const std::vector<Value>& in) {
         Value z = b.convert(in[0], DType::kC64);
         Value re = b.reshape(b.unary(hlo::UnaryOp::kReal, z), {2, 1});
         Value im = b.reshape(b.unary(hlo::UnaryOp::kImag, z), {2, 1});
         return std::vector<Value>{b.reshape(b.concatenate({re, im}, 1), {4})};
       },
       {{&words, two}}, {{&parts, contiguous({4})}}});
  EXPECT_EQ(contents(parts), (std::vector<float>{1.5f, -2.0f, 0.25f, 3.0f}));
  BufferRef back(0, halves.size() * sizeof(uint16_t));
  run({"f32->c32", [](Builder& b, const std::vector<Value>& in) {
         Value pairs = b.reshape(in[0], {2, 2});
         Value re = b.reshape(b.slice(pairs, {0, 0}, {2, 1}, {1, 1}), {2});
         Value im = b.reshape(b.slice(pairs, {0, 1}, {2, 2}, {1, 1}), {2});
         return std::vector<Value>{b.convert(b.binary(hlo::BinaryOp::kComplex, re, im), DType::kC32)};
       },
       {{&parts, contiguous({4})}}, {{&back, two}}});
  std::vector<uint16_t> written(halves.size());
  download(back, written.data());
  EXPECT_EQ(written, halves);
}

// upload_async returns before the device has read the host data: `when_read` runs once it has
// (exactly once, from PJRT's thread), synchronize() waits for the read, and ops on the storage see the data.
TEST(Executor, AsynchronousUploadReportsTheReadAndIsAwaitedBySynchronize) {
  auto data = std::make_unique<std::vector<float>>(1 << 20);
  std::iota(data->begin(), data->end(), 0.0f);
  std::vector<float> want = *data;
  std::atomic<int> reads{0};
  BufferRef s(0, data->size() * sizeof(float));
  upload_async(s, data->data(), DType::kF32, [&reads] { reads++; });
  synchronize(0);  // the read is done; its callback may still be on its way from PJRT's thread
  for (int i = 0; i < 500 && reads.load() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(reads.load(), 1);
  data.reset();  // the host copy may go once read
  BufferRef plus_one(0, want.size() * sizeof(float));
  run({"add_one", add_one(), {{&s, contiguous({1 << 20})}}, {{&plus_one, contiguous({1 << 20})}}});
  std::vector<float> got = contents(plus_one);
  for (float& w : want) w += 1.0f;
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace torchtpu::exec

namespace torchtpu::exec {
namespace {

// Element i of a view, by its strides: the reference for reads through any geometry.
std::vector<float> expected_view(const std::vector<float>& data, const View& v) {
  std::vector<float> out;
  std::vector<int64_t> idx(v.sizes.size(), 0);
  for (int64_t n = 0; n < v.numel(); ++n) {
    int64_t at = v.offset;
    for (size_t d = 0; d < idx.size(); ++d) at += idx[d] * v.strides[d];
    out.push_back(data[at]);
    for (size_t d = idx.size(); d-- > 0;)
      if (++idx[d] < v.sizes[d]) break;
      else idx[d] = 0;
  }
  return out;
}

TEST(Executor, ReadsEveryStridedGeometry) {
  std::vector<float> data(60);
  std::iota(data.begin(), data.end(), 0.0f);
  auto s = storage_of(data);  // read as [3, 4, 5] and more
  std::vector<View> views = {
      {DType::kF32, {5, 4, 3}, {1, 5, 20}, 0},    // full permute
      {DType::kF32, {4, 3}, {5, 20}, 2},          // permute of a slice
      {DType::kF32, {3, 2, 5}, {20, 10, 1}, 0},   // step slice (::2 on dim 1)
      {DType::kF32, {2, 3, 4}, {0, 20, 5}, 1},    // expand (stride 0)
      {DType::kF32, {5}, {13}, 0},                // diagonal-like stride
      {DType::kF32, {2, 1, 2}, {20, 7, 2}, 37},   // size-1 dim; its box runs past the end
      {DType::kF32, {2, 2}, {1, 1}, 0},           // overlapping: falls back to a gather
  };
  for (const View& v : views) EXPECT_EQ(read(*s, v), expected_view(data, v));
}

// Writes 0..n-1 through a view into a storage of 60 elements holding -1: a transpose plus a
// contiguous write for permuted dense views, a scatter for the rest, the same contents either way.
TEST(Executor, WritesEveryStridedGeometry) {
  struct Case {
    View view;
    bool scatters;
  };
  std::vector<Case> cases = {
      {{DType::kF32, {5, 4, 3}, {1, 5, 20}, 0}, false},   // full permute (an op's output keeping its input's strides)
      {{DType::kF32, {4, 1, 3}, {1, 9, 4}, 0}, false},    // transpose with a size-1 dimension, part of the storage
      {{DType::kF32, {2, 3}, {1, 2}, 7}, false},          // transpose of a contiguous part at an offset
      {{DType::kF32, {3, 2, 5}, {20, 10, 1}, 0}, true},   // step slice: gaps
  };
  for (const auto& [v, scatters] : cases) {
    std::vector<float> values(v.numel());
    std::iota(values.begin(), values.end(), 0.0f);
    auto src = storage_of(values);
    auto dst = storage_of(std::vector<float>(60, -1.0f));
    run({"copy", identity(), {{src.get(), contiguous(v.sizes)}}, {{dst.get(), v}}});
    std::vector<float> expected(60, -1.0f);
    std::vector<int64_t> index(v.sizes.size(), 0);
    for (float x : values) {
      int64_t at = v.offset;
      for (size_t d = 0; d < index.size(); ++d) at += index[d] * v.strides[d];
      expected[at] = x;
      for (size_t d = index.size(); d-- > 0 && ++index[d] == v.sizes[d];) index[d] = 0;
    }
    EXPECT_EQ(contents(*dst), expected);
    Builder b;
    Value flat = b.parameter({DType::kF32, {60}});
    b.results({write_view(b, flat, v, b.parameter({DType::kF32, v.sizes}))});
    EXPECT_EQ(b.module_text().find("stablehlo.scatter") != std::string::npos, scatters);
  }
}

}  // namespace
}  // namespace torchtpu::exec
