// Runtime-layer costs on the current PJRT plugin: compiling a small program, and running it.
//
//   build/benchmarks/runtime_bench --benchmark_repetitions=10 --benchmark_report_aggregates_only
//
// Results (medians) go to docs/runtime.md.
#include <benchmark/benchmark.h>

#include "hlo/builder.h"
#include "runtime/client.h"

namespace torchtpu {
namespace {

runtime::Client& client() {
  static std::unique_ptr<runtime::Client> c = runtime::Client::create(runtime::Plugin::discover());
  return *c;
}

std::string small_add(int64_t n) {
  hlo::Builder b;
  hlo::TensorType t{DType::kF32, {n}};
  hlo::Value x = b.parameter(t), y = b.parameter(t);
  b.results({b.binary(hlo::BinaryOp::kAdd, x, y)});
  return b.module_text();
}

void BM_CompileSmallAdd(benchmark::State& state) {
  std::string text = small_add(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(client().compile(text));
}
BENCHMARK(BM_CompileSmallAdd)->Arg(4)->Unit(benchmark::kMillisecond);

void BM_EmitSmallAddText(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(small_add(4));
}
BENCHMARK(BM_EmitSmallAddText)->Unit(benchmark::kMicrosecond);

// Dispatch + wait for completion: the latency of one small op when the host needs its result.
void BM_ExecuteSmallAddAndWait(benchmark::State& state) {
  int64_t n = state.range(0);
  runtime::Executable exe = client().compile(small_add(n));
  std::vector<float> host(n, 1.0f);
  runtime::Buffer x = client().to_device(host.data(), DType::kF32, {n}, client().device(0));
  for (auto _ : state) {
    runtime::ExecuteResult r = exe.execute({{&x, &x}});
    r.done[0].await();
  }
}
BENCHMARK(BM_ExecuteSmallAddAndWait)->Arg(4)->Arg(1 << 16)->Unit(benchmark::kMicrosecond);

// Dispatch only: what an asynchronous caller pays per op (completion is awaited every 64 ops).
void BM_ExecuteSmallAddDispatch(benchmark::State& state) {
  runtime::Executable exe = client().compile(small_add(4));
  std::vector<float> host(4, 1.0f);
  runtime::Buffer x = client().to_device(host.data(), DType::kF32, {4}, client().device(0));
  std::vector<runtime::ExecuteResult> inflight;
  for (auto _ : state) {
    inflight.push_back(exe.execute({{&x, &x}}));
    if (inflight.size() == 64) {
      for (auto& r : inflight) r.done[0].await();
      inflight.clear();
    }
  }
  for (auto& r : inflight) r.done[0].await();
}
BENCHMARK(BM_ExecuteSmallAddDispatch)->Unit(benchmark::kMicrosecond);

void BM_HostToDeviceToHost(benchmark::State& state) {
  int64_t n = state.range(0);
  std::vector<float> host(n, 1.0f), back(n);
  for (auto _ : state) {
    runtime::Buffer b = client().to_device(host.data(), DType::kF32, {n}, client().device(0));
    b.copy_to_host(back.data(), n * sizeof(float));
  }
  state.SetBytesProcessed(state.iterations() * n * sizeof(float) * 2);
}
BENCHMARK(BM_HostToDeviceToHost)->Arg(4)->Arg(1 << 20)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace torchtpu

BENCHMARK_MAIN();
