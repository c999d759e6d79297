// Householder QR of real and complex matrices as LAPACK computes it (geqr2, org2r, orm2r), shared by the QR
// family (householder.cpp) and the SVD, which completes its left singular vectors with it.
#pragma once

#include <vector>

#include "aten/ops/math.h"
#include "aten/ops/matrix_util.h"

namespace torchtpu::aten {

struct Qr {
  Value a;    // R on and above the diagonal, v_i below it
  Value tau;  // [..., min(m, n)]
};

// The factorization of each matrix of the batch `a` ([..., m, n]), LAPACK's signs.
Qr geqrf(Math& m, Value a);

// c with Q = H_0 H_1 ... H_{k-1} applied: Q c, Q^H c (left) or c Q, c Q^H.
Value apply_q(Math& m, const Value& reflectors, const Value& tau, Value c, bool left, bool transpose);

// The first `rows` rows and `columns` columns of the identity, per matrix of `batch`.
Value eye(Builder& b, std::vector<int64_t> batch, int64_t rows, int64_t columns, DType t);

}  // namespace torchtpu::aten
