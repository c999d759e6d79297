// Householder reflectors as LAPACK computes them (larfg; geqr2, org2r, orm2r for QR), shared by
// the QR family (householder.cpp), the SVD, which completes its left singular vectors with QR,
// and the general eigendecomposition (Hessenberg reduction and QR sweeps).
#pragma once

#include <vector>

#include "aten/ops/math.h"
#include "aten/ops/matrix_util.h"

namespace torchtpu::aten {

// The reflector H = I - tau v v^H with H^H (alpha, x) = (beta, 0), v = (1, x * scale), as LAPACK's
// dlarfg (zlarfg): beta = -sign(Re alpha) |(alpha, x)| (real), tau = (beta - alpha) / beta,
// scale = 1 / (alpha - beta); H = I (tau = 0, beta = alpha) when x is zero and alpha real. From
// alpha and |x|^2, element-wise.
struct Reflector {
  Value beta, tau, scale;
};
Reflector larfg(Math& m, const Value& alpha, const Value& x_norm_squared);

// H c = c - tau v (v^H c) (from the left) or c H = c - tau (c v) v^H (from the right), per matrix
// of the batch c ([..., m, n]); v ([..., m] or [..., n]) and tau ([...]) per matrix.
Value reflect(Math& m, const Value& c, const Value& v, const Value& tau, bool left);

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
