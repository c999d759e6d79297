// Custom kernels as tpu ops: a StableHLO module made elsewhere (a JAX function or Pallas kernel
// lowered by JAX, or hand-written text) runs as one op whose program *calls* the module's entry
// function. It is an op like any other: single-op program in strict mode, part of the window in
// fused/lazy mode and of the program in a torch.compile graph, keyed in the compile cache.
// python/torchtpu/kernels builds the module text; this file only runs it.
#include <torch/csrc/utils/pybind.h>

#include <memory>

#include "aten/kernel_call.h"
#include "aten/origin.h"
#include "aten/tensor_operand.h"

namespace torchtpu::aten {
namespace {

namespace py = pybind11;

// Runs `entry` of `functions` (generic-form func.func ops, symbols already unique to `key`) with
// `inputs`, writing its results into `outputs` (allocated by the caller with the result shapes).
void call_stablehlo(const std::string& op, const std::string& key, const std::string& functions,
                    const std::string& entry, const std::vector<at::Tensor>& inputs,
                    const std::vector<at::Tensor>& outputs) {
  exec::OpCall call;
  call.key = "stablehlo_call|" + key;
  for (const at::Tensor& t : inputs) {
    check_tpu(t, "every kernel input");
    call.inputs.push_back(operand(t));
  }
  std::vector<hlo::TensorType> result_types;
  for (const at::Tensor& t : outputs) {
    check_tpu(t, "every kernel output");
    call.outputs.push_back(operand(t));
    result_types.push_back({to_dtype(t.scalar_type()), t.sizes().vec()});
  }
  auto text = std::make_shared<const std::string>(functions);
  call.lower = [key, text, entry, result_types](hlo::Builder& b, const std::vector<hlo::Value>& args) {
    b.add_functions(key, *text);
    return b.call(entry, args, result_types);
  };
  call.origin = origin_of(op);
  py::gil_scoped_release no_gil;
  run_on_device(std::move(call));
}

}  // namespace

void define_kernel_call(py::module_& m) {
  m.def("_call_stablehlo", &call_stablehlo, "Runs a StableHLO function as one tpu op");
}

}  // namespace torchtpu::aten
