// Declares a zeroed PJRT argument struct with its struct_size set, the preamble of every C API call.
#pragma once

#include "pjrt_c_api.h"

#define PJRT_ARGS(type, var) \
  type var{};                \
  var.struct_size = type##_STRUCT_SIZE
