// Device copies of scalar values (Scalar arguments, wrapped numbers), reused by value.
//
// Scalars are passed to programs as 0-d inputs rather than baked in as constants, so that a
// changing learning rate or step count does not compile a new program every step. The values
// training code uses are few (1, 0, alpha, lr, eps), so keeping the most recently used values'
// buffers makes their upload a one-time cost.
#pragma once

#include <c10/core/Scalar.h>

#include <memory>

#include "exec/buffer_ref.h"

namespace torchtpu::aten {

// The dtype a Scalar travels as: f64 for floating, s64 for integral, i1 for bool, c128 for complex.
DType scalar_dtype(const c10::Scalar& s);

// A 0-d storage on `device` holding `s` as scalar_dtype(s), shared with the cache.
std::shared_ptr<exec::BufferRef> device_scalar(const c10::Scalar& s, int device);

}  // namespace torchtpu::aten
