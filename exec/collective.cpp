#include "exec/collective.h"

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "exec/executor.h"
#include "exec/metrics.h"
#include "exec/runtime_context.h"
#include "hlo/builder.h"

namespace torchtpu::exec {
namespace {

hlo::BinaryOp combiner(ReduceKind r, DType dtype) {
  bool pred = dtype == DType::kBool;  // bool: sum/max mean "any", product/min mean "all"
  switch (r) {
    case ReduceKind::kSum: return pred ? hlo::BinaryOp::kOr : hlo::BinaryOp::kAdd;
    case ReduceKind::kProduct: return pred ? hlo::BinaryOp::kAnd : hlo::BinaryOp::kMultiply;
    case ReduceKind::kMin: return pred ? hlo::BinaryOp::kAnd : hlo::BinaryOp::kMinimum;
    case ReduceKind::kMax: return pred ? hlo::BinaryOp::kOr : hlo::BinaryOp::kMaximum;
    case ReduceKind::kBitAnd: return hlo::BinaryOp::kAnd;
    case ReduceKind::kBitOr: return hlo::BinaryOp::kOr;
    case ReduceKind::kBitXor: return hlo::BinaryOp::kXor;
  }
  throw std::logic_error("unknown reduction");
}

std::string program_text(const Collective& c, DType dtype, int64_t length, int64_t replicas) {
  hlo::Builder b;
  hlo::Value x = b.parameter({dtype, {length}});
  hlo::Builder::ReplicaGroups all(1);
  for (int64_t r = 0; r < replicas; ++r) all[0].push_back(r);
  hlo::BinaryOp op = combiner(c.reduce, dtype);
  hlo::RegionBody combine = [op](hlo::Builder& body, const std::vector<hlo::Value>& a) {
    return std::vector<hlo::Value>{body.binary(op, a[0], a[1])};
  };
  switch (c.kind) {
    case CollectiveKind::kAllReduce: b.results({b.all_reduce(x, all, combine)}); break;
    case CollectiveKind::kAllGather: b.results({b.all_gather(x, 0, all)}); break;
    case CollectiveKind::kReduceScatter: b.results({b.reduce_scatter(x, 0, all, combine)}); break;
    case CollectiveKind::kAllToAll: b.results({b.all_to_all(x, 0, 0, all)}); break;
    case CollectiveKind::kPermute: b.results({b.collective_permute(x, c.permutation)}); break;
  }
  return b.module_text(static_cast<int>(replicas), 1);
}

std::string cache_key(const Collective& c, DType dtype, int64_t length, const std::vector<int>& devices) {
  std::string key = std::to_string(static_cast<int>(c.kind)) + '|' + std::to_string(static_cast<int>(c.reduce)) +
                    '|' + std::string(dtype_name(dtype)) + '|' + std::to_string(length) + "|d";
  for (int d : devices) key += ',' + std::to_string(d);
  key += "|p";
  for (auto [s, t] : c.permutation) key += ',' + std::to_string(s) + '>' + std::to_string(t);
  return key;
}

// Compiled collectives by shape and device set. They are small and quick to compile, so they stay
// out of the persistent tiers (whose portable, single-device options do not fit them).
std::shared_ptr<runtime::Executable> executable(const Collective& c, DType dtype, int64_t length,
                                                const std::vector<int>& devices) {
  static std::mutex mu;
  static auto* compiled = new std::map<std::string, std::shared_ptr<runtime::Executable>>;
  std::string key = cache_key(c, dtype, length, devices);
  std::lock_guard<std::mutex> lock(mu);
  auto& exe = (*compiled)[key];
  if (exe) return exe;
  runtime::CompileOptions options;
  options.num_replicas = static_cast<int>(devices.size());
  for (int d : devices) options.device_assignment.push_back({device(d).id()});
  auto start = std::chrono::steady_clock::now();
  exe = std::make_shared<runtime::Executable>(
      client().compile(program_text(c, dtype, length, static_cast<int64_t>(devices.size())), options));
  record_compile(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count());
  return exe;
}

// The storage's contents as an existing buffer of `dtype` (a never-written storage reads as zeros).
graph::ValuePtr materialized(BufferRef& storage, DType dtype, const std::string& what) {
  int64_t length = static_cast<int64_t>(storage.nbytes() / element_size(dtype));
  if (!storage.value()) {
    std::vector<char> zeros(storage.nbytes(), 0);
    upload(storage, zeros.data(), dtype);
  }
  drop_padding(storage);
  const graph::ValuePtr& v = storage.value();
  if (!v->is_materialized())
    throw ExecutionFailed(what + ": an input's contents were never computed (the op producing them failed)");
  if (v->dtype() != dtype || v->length() != length)
    throw std::invalid_argument(what + ": an input storage holds " + std::string(dtype_name(v->dtype())) + "[" +
                                std::to_string(v->length()) + "], not " + std::string(dtype_name(dtype)) + "[" +
                                std::to_string(length) + "]");
  return v;
}

}  // namespace

std::vector<graph::ValuePtr> run_collective(const Collective& c, const std::vector<BufferRef*>& inputs, DType dtype,
                                            const std::string& what) {
  if (inputs.empty()) throw std::invalid_argument(what + ": no participants");
  flush("collective");
  std::vector<int> devices;
  std::vector<std::vector<graph::ValuePtr>> args;
  for (BufferRef* in : inputs) {
    devices.push_back(in->device());
    args.push_back({materialized(*in, dtype, what)});
  }
  int64_t length = args[0][0]->length();
  for (const auto& a : args)
    if (a[0]->length() != length)
      throw std::invalid_argument(what + ": ranks passed " + std::to_string(length) + " and " +
                                  std::to_string(a[0]->length()) + " elements; a collective needs equal sizes");
  auto exe = executable(c, dtype, length, devices);
  auto buffers = execute_replicated(*exe, devices, args, what);
  counters().collectives++;
  std::vector<graph::ValuePtr> out;
  for (size_t d = 0; d < devices.size(); ++d) {
    const runtime::Buffer& b = *buffers[d][0];
    int64_t n = 1;
    for (int64_t dim : b.dims()) n *= dim;
    auto v = std::make_shared<graph::DeviceValue>(devices[d], dtype, n);
    v->materialize(buffers[d][0]);
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace torchtpu::exec
