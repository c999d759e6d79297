// torch.compile graphs as PyTorch sees them: the capture of one FX graph run over tpu tensors, and
// the compiled callable that binds new tensors to its program and rebuilds its outputs (with
// their views and aliasing) without dispatching an op. The Dynamo backend in
// python/torchtpu/compile drives it.
#include <ATen/EmptyTensor.h>
#include <c10/core/DeviceGuard.h>
#include <torch/csrc/utils/pybind.h>

#include <unordered_map>

#include "aten/compiled_graph.h"
#include "aten/device.h"
#include "aten/origin.h"
#include "aten/tensor_operand.h"
#include "exec/capture.h"

namespace torchtpu::aten {
namespace {

namespace py = pybind11;

std::vector<exec::GraphInput> graph_inputs(const std::vector<at::Tensor>& inputs) {
  std::vector<exec::GraphInput> out;
  for (const at::Tensor& t : inputs) {
    check_tpu(t, "every compiled-graph input");
    out.push_back({&buffer_ref(t), to_dtype(t.scalar_type())});
  }
  return out;
}

// How one output tensor is rebuilt on each run: a view of an input's storage (the graph returned
// an input or a view of one), or a view of a fresh storage.
struct OutputPlan {
  int alias_input = -1;
  size_t storage = 0;  // index into the fresh storages
  c10::ScalarType dtype;
  std::vector<int64_t> sizes, strides;
  int64_t offset;
};

class CompiledGraph {
 public:
  CompiledGraph(std::shared_ptr<exec::CompiledGraph> graph, std::vector<OutputPlan> outputs,
                std::vector<size_t> storage_bytes)
      : graph_(std::move(graph)), outputs_(std::move(outputs)), storage_bytes_(std::move(storage_bytes)) {}

  std::string mismatch(const std::vector<at::Tensor>& inputs) const {
    for (const at::Tensor& t : inputs)
      if (t.device().type() != c10::DeviceType::PrivateUse1) return "an input is on " + t.device().str();
    return graph_->mismatch(graph_inputs(inputs));
  }

  std::vector<at::Tensor> run(const std::vector<at::Tensor>& inputs) const {
    std::vector<graph::ValuePtr> contents;
    std::vector<exec::GraphInput> bound = graph_inputs(inputs);
    {
      TracedLine line(graph_->what());  // a profiler's event names the user's line
      py::gil_scoped_release no_gil;
      translating_errors([&] { contents = graph_->run(bound); }, graph_->what());
    }
    c10::DeviceGuard guard(c10::Device(c10::DeviceType::PrivateUse1, graph_->device()));
    std::vector<c10::Storage> storages;
    for (size_t s = 0; s < storage_bytes_.size(); ++s) {
      c10::Storage st(c10::Storage::use_byte_size_t(), storage_bytes_[s],
                      tpu_allocator()->allocate(storage_bytes_[s]), tpu_allocator(), true);
      if (contents[s])  // else never written by the graph, as when it was captured: it reads as zeros
        static_cast<exec::BufferRef*>(st.data_ptr().get_context())->swap(contents[s]);
      storages.push_back(std::move(st));
    }
    std::vector<at::Tensor> outs;
    for (const OutputPlan& o : outputs_) {
      const c10::Storage& st = o.alias_input >= 0 ? inputs[o.alias_input].storage() : storages[o.storage];
      at::Tensor t = at::detail::make_tensor<c10::TensorImpl>(
          c10::Storage(st), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), c10::scalarTypeToTypeMeta(o.dtype));
      t.unsafeGetTensorImpl()->set_sizes_and_strides(o.sizes, o.strides, o.offset);
      outs.push_back(std::move(t));
    }
    return outs;
  }

  size_t num_ops() const { return graph_->num_ops(); }

 private:
  std::shared_ptr<exec::CompiledGraph> graph_;
  std::vector<OutputPlan> outputs_;
  std::vector<size_t> storage_bytes_;
};

void begin(const std::vector<at::Tensor>& inputs) {
  std::vector<exec::GraphInput> in = graph_inputs(inputs);
  py::gil_scoped_release no_gil;
  translating_errors([&] { exec::begin_capture(in); }, "torch.compile capture");
}

std::shared_ptr<CompiledGraph> end(const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs,
                                   const std::string& what, const std::string& identity) {
  std::unordered_map<const void*, int> input_of;
  for (size_t i = 0; i < inputs.size(); ++i) input_of.emplace(inputs[i].storage().unsafeGetStorageImpl(), i);
  std::unordered_map<const void*, size_t> fresh_of;
  std::vector<exec::BufferRef*> fresh;
  std::vector<size_t> fresh_bytes;
  std::vector<OutputPlan> plans;
  for (const at::Tensor& t : outputs) {
    check_tpu(t, "every compiled-graph output");
    OutputPlan p{-1, 0, t.scalar_type(), t.sizes().vec(), t.strides().vec(), t.storage_offset()};
    const void* impl = t.storage().unsafeGetStorageImpl();
    if (auto in = input_of.find(impl); in != input_of.end()) {
      p.alias_input = in->second;
    } else {
      auto [it, is_new] = fresh_of.emplace(impl, fresh.size());
      if (is_new) {
        fresh.push_back(&buffer_ref(t));
        fresh_bytes.push_back(t.storage().nbytes());
      }
      p.storage = it->second;
    }
    plans.push_back(std::move(p));
  }
  py::gil_scoped_release no_gil;
  std::shared_ptr<exec::CompiledGraph> graph;
  translating_errors([&] { graph = exec::end_capture(fresh, what, identity); }, what);
  return std::make_shared<CompiledGraph>(std::move(graph), std::move(plans), std::move(fresh_bytes));
}

}  // namespace

void define_compiled_graph(py::module_& m) {
  py::class_<CompiledGraph, std::shared_ptr<CompiledGraph>>(m, "_CompiledGraph")
      .def("__call__", &CompiledGraph::run)
      .def("mismatch", &CompiledGraph::mismatch)
      .def_property_readonly("num_ops", &CompiledGraph::num_ops);
  m.def("_capture_begin", &begin, "Records this thread's tpu ops from now on instead of running them");
  m.def("_capture_end", &end, "Compiles the recorded ops as one program over `inputs`; returns it");
  m.def("_capture_abort", [] { exec::abort_capture(); });
}

}  // namespace torchtpu::aten
