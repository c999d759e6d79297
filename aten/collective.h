// The Python face of in-process collectives (aten/collective.cpp).
#pragma once

#include <pybind11/pybind11.h>

namespace torchtpu::aten {

// Adds _collective to torchtpu._C.
void define_collective(pybind11::module_& m);

}  // namespace torchtpu::aten
