// The Python face of custom-kernel ops (aten/kernel_call.cpp).
#pragma once

#include <pybind11/pybind11.h>

namespace torchtpu::aten {

// Adds _call_stablehlo to torchtpu._C.
void define_kernel_call(pybind11::module_& m);

}  // namespace torchtpu::aten
