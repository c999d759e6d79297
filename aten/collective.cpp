// Collectives over tpu tensors that live on different devices of this process (ranks running as
// threads): one compiled XLA collective, see exec/collective.h. python/torchtpu/distributed
// gathers the ranks' tensors and calls this once per collective.
#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/utils/pybind.h>

#include <map>

#include "aten/collective.h"
#include "aten/device.h"
#include "aten/origin.h"
#include "aten/tensor_operand.h"
#include "exec/collective.h"

namespace torchtpu::aten {
namespace {

namespace py = pybind11;

exec::CollectiveKind kind_of(const std::string& name) {
  static const std::map<std::string, exec::CollectiveKind> kinds{
      {"all_reduce", exec::CollectiveKind::kAllReduce},   {"all_gather", exec::CollectiveKind::kAllGather},
      {"reduce_scatter", exec::CollectiveKind::kReduceScatter}, {"all_to_all", exec::CollectiveKind::kAllToAll},
      {"permute", exec::CollectiveKind::kPermute}};
  auto it = kinds.find(name);
  TORCH_CHECK_VALUE(it != kinds.end(), "unknown collective '", name, "'");
  return it->second;
}

exec::ReduceKind reduce_of(const std::string& name) {
  static const std::map<std::string, exec::ReduceKind> ops{
      {"sum", exec::ReduceKind::kSum},        {"product", exec::ReduceKind::kProduct},
      {"min", exec::ReduceKind::kMin},        {"max", exec::ReduceKind::kMax},
      {"band", exec::ReduceKind::kBitAnd},    {"bor", exec::ReduceKind::kBitOr},
      {"bxor", exec::ReduceKind::kBitXor}};
  auto it = ops.find(name);
  TORCH_CHECK_VALUE(it != ops.end(), "unknown reduction '", name, "'");
  return it->second;
}

// A tensor whose storage is exactly its elements, in its dtype (what the program's parameter is).
at::Tensor whole_storage(const at::Tensor& t) {
  check_tpu(t, "every collective input");
  const auto& v = buffer_ref(t).value();
  bool exact = t.is_contiguous() && t.storage_offset() == 0 &&
               t.storage().nbytes() == static_cast<size_t>(t.numel()) * t.element_size() &&
               (!v || v->dtype() == to_dtype(t.scalar_type()));
  return exact ? t : t.clone(at::MemoryFormat::Contiguous);
}

at::Tensor tensor_of(graph::ValuePtr value, c10::ScalarType dtype) {
  c10::DeviceGuard guard(c10::Device(c10::DeviceType::PrivateUse1, value->device()));
  at::Tensor t = at::empty({value->length()}, at::TensorOptions().dtype(dtype).device(c10::DeviceType::PrivateUse1, value->device()));
  buffer_ref(t).swap(std::move(value));
  return t;
}

// Runs `kind` over inputs[i] (replica i, on its own device); returns each replica's flat result.
std::vector<at::Tensor> collective(const std::string& kind, const std::string& reduce,
                                   const std::vector<at::Tensor>& inputs,
                                   const std::vector<std::pair<int64_t, int64_t>>& permutation,
                                   const std::string& what) {
  TORCH_CHECK_VALUE(!inputs.empty(), what, ": no participants");
  exec::Collective c{kind_of(kind), reduce_of(reduce), permutation};
  std::vector<at::Tensor> held;
  std::vector<exec::BufferRef*> storages;
  for (const at::Tensor& t : inputs) {
    TORCH_CHECK_VALUE(t.scalar_type() == inputs[0].scalar_type(), what, ": ranks passed ", inputs[0].scalar_type(),
                      " and ", t.scalar_type(), " tensors");
    held.push_back(whole_storage(t));
    storages.push_back(&buffer_ref(held.back()));
  }
  std::vector<graph::ValuePtr> results;
  DType dtype = to_dtype(inputs[0].scalar_type());
  {
    TracedLine line(what);  // a profiler's event names the user's line
    py::gil_scoped_release no_gil;
    translating_errors([&] { results = exec::run_collective(c, storages, dtype, what); }, what);
  }
  std::vector<at::Tensor> out;
  for (graph::ValuePtr& v : results) out.push_back(tensor_of(std::move(v), inputs[0].scalar_type()));
  return out;
}

// PREMUL_SUM's factor (a float, or a 0-d tensor), which c10d keeps out of Python's reach.
py::object premul_sum_factor(const c10d::ReduceOp& op) {
  TORCH_CHECK_VALUE(op.op_ == c10d::ReduceOp::PREMUL_SUM && op.supplement_, "not a PREMUL_SUM ReduceOp");
  const auto* factor = static_cast<const c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
  if (factor->tensor_factor.defined()) return py::cast(factor->tensor_factor);
  return py::cast(factor->double_factor);
}

}  // namespace

void define_collective(py::module_& m) {
  m.def("_collective", &collective, "Runs one compiled XLA collective over tensors on this process's devices");
  m.def("_premul_sum_factor", &premul_sum_factor, "The factor of a PREMUL_SUM ReduceOp");
}

}  // namespace torchtpu::aten
