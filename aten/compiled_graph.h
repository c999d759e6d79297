// The Python face of torch.compile capture (aten/compiled_graph.cpp).
#pragma once

#include <pybind11/pybind11.h>

namespace torchtpu::aten {

// Adds _capture_begin/_capture_end/_capture_abort and the _CompiledGraph type to torchtpu._C.
void define_compiled_graph(pybind11::module_& m);

}  // namespace torchtpu::aten
