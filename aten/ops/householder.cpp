// Householder QR as LAPACK computes it for real matrices (geqr2, org2r, orm2r): one reflector
// H_i = I - tau_i v_i v_i^T per column, unrolled over the (static) columns with whole-matrix
// masked updates, so a batch factors at once and Q and R have CPU's signs. geqrf, orgqr
// (linalg_householder_product), ormqr and linalg_qr build on it; complex inputs and matrices
// wider than kMaxUnrolledColumns run on the CPU.
#include <ATen/ops/empty.h>

#include <cmath>

#include "aten/ops/math.h"
#include "aten/ops/matrix_util.h"

namespace torchtpu::aten {
namespace {

constexpr int64_t kMaxUnrolledColumns = 128;

hlo::TensorType index_type(const std::vector<int64_t>& dims) { return {DType::kS64, dims}; }

// Per matrix of the batch, a value broadcast over `dims` (batch dimensions first).
Value per_matrix(Builder& b, const Value& v, const std::vector<int64_t>& dims) {
  std::vector<int64_t> lead;
  for (int64_t d = 0; d < v.type.rank(); ++d) lead.push_back(d);
  return b.broadcast_in_dim(v, dims, lead);
}

// v_i of the reflectors stored below the diagonal of `a` ([..., m, *]): [..., m] with zeros above
// row i, 1 at row i and a's column i below it.
Value reflector(Builder& b, const Value& a, int64_t i) {
  int64_t rank = a.type.rank();
  Value column = take_slice(b, a, rank - 1, i);
  Value rows = b.iota(index_type(column.type.dims), rank - 2), at_i = b.constant_int(i, rows.type);
  return b.select(b.compare(Compare::kEQ, rows, at_i), b.constant(1, column.type),
                  b.select(b.compare(Compare::kGT, rows, at_i), column, b.constant(0, column.type)));
}

// c - tau v (v^T c) (from the left) or c - tau (c v) v^T (from the right).
Value reflect(Math& m, const Value& c, const Value& v, const Value& tau, bool left) {
  int64_t rank = c.type.rank();
  std::vector<int64_t> batch = batch_of(c.type);
  auto spread = [&](const Value& x, int64_t dim) {  // [..., len] into c's shape along `dim`
    std::vector<int64_t> map;
    for (int64_t d = 0; d < rank - 2; ++d) map.push_back(d);
    map.push_back(dim);
    return m.b.broadcast_in_dim(x, c.type.dims, map);
  };
  Value v_full = spread(v, left ? rank - 2 : rank - 1);
  Value w = m.sum(m.mul(v_full, c), {left ? rank - 2 : rank - 1});  // v^T c or c v
  Value outer = m.mul(v_full, spread(w, left ? rank - 1 : rank - 2));
  return m.sub(c, m.mul(per_matrix(m.b, tau, c.type.dims), outer));
}

// c with Q = H_0 H_1 ... H_{k-1} applied: Q c, Q^T c (left) or c Q, c Q^T.
Value apply_q(Math& m, const Value& reflectors, const Value& tau, Value c, bool left, bool transpose) {
  int64_t k = tau.type.dims.back();
  bool descending = left != transpose;  // Q c = H_0 (H_1 (... H_{k-1} c)): the last reflector first
  for (int64_t s = 0; s < k; ++s) {
    int64_t i = descending ? k - 1 - s : s;
    c = reflect(m, c, reflector(m.b, reflectors, i), take_slice(m.b, tau, tau.type.rank() - 1, i), left);
  }
  return c;
}

struct Qr {
  Value a;    // R on and above the diagonal, v_i below it
  Value tau;  // [..., min(m, n)]
};

// LAPACK's dlarfg per column: beta = -sign(alpha) |(alpha, x)|, tau = (beta - alpha) / beta,
// v = x / (alpha - beta); tau = 0 (H = I) when x is zero.
Qr geqrf(Math& m, Value a) {
  Builder& b = m.b;
  int64_t rank = a.type.rank(), rows_n = a.type.dims[rank - 2], cols_n = a.type.dims[rank - 1];
  int64_t k = std::min(rows_n, cols_n);
  std::vector<int64_t> column_dims = batch_of(a.type);
  column_dims.push_back(rows_n);
  Value rows = b.iota(index_type(column_dims), rank - 2), cols = b.iota(index_type(a.type.dims), rank - 1);
  std::vector<Value> taus;
  for (int64_t j = 0; j < k; ++j) {
    Value column = take_slice(b, a, rank - 1, j), at_j = b.constant_int(j, rows.type);
    Value alpha = take_slice(b, column, rank - 2, j);
    Value below = b.compare(Compare::kGT, rows, at_j);
    Value x = b.select(below, column, m.k(0, column));
    Value xnorm2 = m.sum(m.mul(x, x), {rank - 2});
    Value norm = b.unary(UnaryOp::kSqrt, m.add(m.mul(alpha, alpha), xnorm2));
    Value beta = b.select(b.compare(Compare::kGE, alpha, m.k(0, alpha)), b.unary(UnaryOp::kNegate, norm), norm);
    Value trivial = b.compare(Compare::kEQ, xnorm2, m.k(0, xnorm2));
    Value tau = b.select(trivial, m.k(0, beta), m.div(m.sub(beta, alpha), beta));
    Value scale = b.select(trivial, m.k(0, beta), m.div(m.k(1, beta), m.sub(alpha, beta)));
    Value v_below = m.mul(x, per_matrix(b, scale, column_dims));
    Value v = b.select(b.compare(Compare::kEQ, rows, at_j), m.k(1, column), v_below);
    Value reflected = reflect(m, a, v, tau, true);
    Value new_column = b.select(b.compare(Compare::kEQ, rows, at_j), per_matrix(b, b.select(trivial, alpha, beta), column_dims),
                                b.select(below, v_below, column));
    std::vector<int64_t> map;
    for (int64_t d = 0; d < rank - 1; ++d) map.push_back(d);
    Value at_col = b.compare(Compare::kEQ, cols, b.constant_int(j, cols.type));
    a = b.select(at_col, b.broadcast_in_dim(new_column, a.type.dims, map),
                 b.select(b.compare(Compare::kGT, cols, b.constant_int(j, cols.type)), reflected, a));
    std::vector<int64_t> one = batch_of(a.type);
    one.push_back(1);
    taus.push_back(b.reshape(tau, one));
  }
  std::vector<int64_t> tau_dims = batch_of(a.type);
  tau_dims.push_back(k);
  return {a, k == 0 ? b.constant(0, {a.type.dtype, tau_dims}) : b.concatenate(taus, rank - 2)};
}

// The first `rows` rows and `columns` columns of the identity, per matrix of `batch`.
Value eye(Builder& b, std::vector<int64_t> batch, int64_t rows, int64_t columns, DType t) {
  batch.push_back(rows);
  batch.push_back(columns);
  return identity(b, {t, batch});
}

Value rows_upto(Builder& b, const Value& x, int64_t count) {  // x[..., :count, :]
  std::vector<int64_t> start(x.type.rank(), 0), limit = x.type.dims, step(x.type.rank(), 1);
  limit[x.type.rank() - 2] = count;
  return b.slice(x, start, limit, step);
}

V linalg_qr(LoweringContext& c) {  // (A, mode) -> (Q, R)
  Math m{c.b};
  Value a = c.raw(0);
  int64_t rank = a.type.rank(), rows = a.type.dims[rank - 2], cols = a.type.dims[rank - 1], k = std::min(rows, cols);
  std::string mode = c.arg(1).toStringRef();
  Qr qr = geqrf(m, a);
  Value r = triangle(c.b, mode == "complete" ? qr.a : rows_upto(c.b, qr.a, k), false);
  if (mode == "r") return {c.b.constant(0, c.out(0)), r};
  Value q = apply_q(m, qr.a, qr.tau, eye(c.b, batch_of(a.type), rows, mode == "complete" ? rows : k, a.type.dtype),
                    true, false);
  return {q, r};
}

std::vector<c10::IValue> geqrf_meta(const c10::FunctionSchema&, const std::vector<c10::IValue>& args) {
  const at::Tensor& self = args[0].toTensor();
  TORCH_CHECK(self.dim() >= 2, "geqrf: The input tensor A must have at least 2 dimensions.");
  std::vector<int64_t> tau_dims(self.sizes().begin(), self.sizes().end() - 2);
  tau_dims.push_back(std::min(self.size(-2), self.size(-1)));
  if (args.size() == 3) {  // geqrf.a
    at::Tensor a = args[1].toTensor(), tau = args[2].toTensor();
    a.resize_(self.sizes());
    tau.resize_(tau_dims);
    return {a, tau};
  }
  return {at::empty(self.sizes(), self.options()), at::empty(tau_dims, self.options())};
}

// Real matrices up to kMaxUnrolledColumns reflectors run here; the rest on the CPU.
LoweringOptions unrolled(size_t matrix_arg) {
  LoweringOptions o;
  o.cpu_when = [matrix_arg](const std::vector<c10::IValue>& args) {
    const at::Tensor& a = args[matrix_arg].toTensor();
    return a.is_complex() || (a.dim() >= 2 && std::min(a.size(-1), a.size(-2)) > kMaxUnrolledColumns);
  };
  return o;
}

}  // namespace

TORCHTPU_LOWERINGS(householder) {
  LoweringOptions geqrf_options = unrolled(0);
  geqrf_options.meta = geqrf_meta;
  register_lowering({"geqrf", "geqrf.a"}, [](LoweringContext& c) {
    Math m{c.b};
    Qr qr = geqrf(m, c.raw(0));
    return V{qr.a, qr.tau};
  }, geqrf_options);
  // (reflectors [..., m, n], tau [..., k]) -> the first n columns of Q
  register_lowering({"linalg_householder_product", "linalg_householder_product.out"}, [](LoweringContext& c) {
    Math m{c.b};
    Value a = c.raw(0);
    int64_t rank = a.type.rank();
    return V{apply_q(m, a, c.raw(1), eye(c.b, batch_of(a.type), a.type.dims[rank - 2], a.type.dims[rank - 1], a.type.dtype),
                     true, false)};
  }, unrolled(0));
  // (reflectors, tau, other, left, transpose) -> op(Q) other or other op(Q)
  register_lowering({"ormqr", "ormqr.out"}, [](LoweringContext& c) {
    Math m{c.b};
    return V{apply_q(m, c.raw(0), c.raw(1), c.raw(2), c.arg(3).toBool(), c.arg(4).toBool())};
  }, unrolled(0));
  register_lowering({"linalg_qr", "linalg_qr.out"}, linalg_qr, unrolled(0));
}

}  // namespace torchtpu::aten
