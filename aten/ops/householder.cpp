// Householder QR as LAPACK computes it (geqr2, org2r, orm2r; zgeqr2... for complex): one
// reflector H_i = I - tau_i v_i v_i^H per column, a stablehlo.while over the columns with
// whole-matrix masked updates, so a batch factors at once and Q and R have CPU's signs (R's
// diagonal real). geqrf, orgqr (linalg_householder_product), ormqr and linalg_qr build on it.
#include <ATen/ops/empty.h>

#include <cmath>

#include "aten/ops/householder.h"

namespace torchtpu::aten {
namespace {

// v_i of the reflectors stored below the diagonal of `a` ([..., m, *]): [..., m] with zeros above
// row i, 1 at row i and a's column i below it.
Value reflector(Builder& b, const Value& a, const Value& i) {
  int64_t rank = a.type.rank();
  Value column = slice_at(b, a, rank - 1, i);
  return b.select(positions(b, column.type.dims, rank - 2, Compare::kEQ, i), b.constant(1, column.type),
                  b.select(positions(b, column.type.dims, rank - 2, Compare::kGT, i), column,
                           b.constant(0, column.type)));
}

}  // namespace

// H c = c - tau v (v^H c) (from the left) or c H = c - tau (c v) v^H (from the right).
Value reflect(Math& m, const Value& c, const Value& v, const Value& tau, bool left) {
  int64_t rank = c.type.rank();
  auto spread = [&](const Value& x, int64_t dim) { return spread_at(m.b, x, c.type.dims, dim); };
  Value v_full = spread(v, left ? rank - 2 : rank - 1), v_conj = conj(m.b, v_full);
  Value w = m.sum(m.mul(left ? v_conj : v_full, c), {left ? rank - 2 : rank - 1});  // v^H c or c v
  Value outer = m.mul(left ? v_full : v_conj, spread(w, left ? rank - 1 : rank - 2));
  return m.sub(c, m.mul(per_matrix(m.b, tau, c.type.dims), outer));
}

Value apply_q(Math& m, const Value& reflectors, const Value& tau, Value c, bool left, bool transpose) {
  int64_t k = tau.type.dims.back();
  bool descending = left != transpose;  // Q c = H_0 (H_1 (... H_{k-1} c)): the last reflector first
  return counted_loop(m.b, k, {c, reflectors, tau}, [&](Builder& b, const Value& step, const Values& a) {
    Math lm{b};
    Value i = descending ? b.constant_int(k - 1, step.type) - step : step;
    Value tau_i = slice_at(b, a[2], a[2].type.rank() - 1, i);  // H_i^H has conj(tau_i)
    Value next = reflect(lm, a[0], reflector(b, a[1], i), transpose ? conj(b, tau_i) : tau_i, left);
    return Values{next, a[1], a[2]};
  })[0];
}

Reflector larfg(Math& m, const Value& alpha, const Value& x_norm_squared) {
  Builder& b = m.b;
  Value norm = b.unary(UnaryOp::kSqrt, m.add(abs_squared(b, alpha), x_norm_squared));
  Value alpha_re = real_part(b, alpha);
  Value beta = real_as(b, b.select(b.compare(Compare::kGE, alpha_re, m.k(0, alpha_re)), -norm, norm), alpha);
  Value trivial = b.compare(Compare::kEQ, x_norm_squared, m.k(0, x_norm_squared));
  if (is_complex(alpha.type.dtype)) {
    Value alpha_im = b.unary(UnaryOp::kImag, alpha);
    trivial = b.binary(BinaryOp::kAnd, trivial, b.compare(Compare::kEQ, alpha_im, m.k(0, alpha_im)));
  }
  return {b.select(trivial, alpha, beta), b.select(trivial, m.k(0, beta), m.div(m.sub(beta, alpha), beta)),
          b.select(trivial, m.k(0, beta), m.div(m.k(1, beta), m.sub(alpha, beta)))};
}

// One reflector per column (larfg); each H_j^H is applied to the columns right of j.
Qr geqrf(Math& m, Value a) {
  int64_t rank = a.type.rank(), k = std::min(a.type.dims[rank - 2], a.type.dims[rank - 1]);
  std::vector<int64_t> tau_dims = batch_of(a.type);
  tau_dims.push_back(k);
  Values out = counted_loop(m.b, k, {a, m.b.constant(0, {a.type.dtype, tau_dims})}, [&](Builder& b, const Value& j, const Values& state) {
    Math lm{b};
    Value a = state[0];
    Value column = slice_at(b, a, rank - 1, j), alpha = slice_at(b, column, rank - 2, j);
    Value below = positions(b, column.type.dims, rank - 2, Compare::kGT, j);
    Value at_j = positions(b, column.type.dims, rank - 2, Compare::kEQ, j);
    Value x = b.select(below, column, lm.k(0, column));
    auto [beta, tau, scale] = larfg(lm, alpha, lm.sum(abs_squared(b, x), {rank - 2}));
    Value v_below = x * per_matrix(b, scale, column.type.dims);
    Value reflected = reflect(lm, a, b.select(at_j, lm.k(1, column), v_below), conj(b, tau), true);
    Value new_column = b.select(at_j, per_matrix(b, beta, column.type.dims),
                                b.select(below, v_below, column));
    std::vector<int64_t> map;
    for (int64_t d = 0; d < rank - 1; ++d) map.push_back(d);
    a = b.select(positions(b, a.type.dims, rank - 1, Compare::kEQ, j), b.broadcast_in_dim(new_column, a.type.dims, map),
                 b.select(positions(b, a.type.dims, rank - 1, Compare::kGT, j), reflected, a));
    Value taus = b.select(positions(b, tau_dims, rank - 2, Compare::kEQ, j), per_matrix(b, tau, tau_dims), state[1]);
    return Values{a, taus};
  });
  return {out[0], out[1]};
}

// The first `rows` rows and `columns` columns of the identity, per matrix of `batch`.
Value eye(Builder& b, std::vector<int64_t> batch, int64_t rows, int64_t columns, DType t) {
  batch.push_back(rows);
  batch.push_back(columns);
  return identity(b, {t, batch});
}

namespace {

Value rows_upto(Builder& b, const Value& x, int64_t count) {  // x[..., :count, :]
  std::vector<int64_t> start(x.type.rank(), 0), limit = x.type.dims, step(x.type.rank(), 1);
  limit[x.type.rank() - 2] = count;
  return b.slice(x, start, limit, step);
}

Values linalg_qr(LoweringContext& c) {  // (A, mode) -> (Q, R)
  Math m{c.b};
  Value a = c.input_uncast(0);
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
  return {column_major(at::empty(self.sizes(), self.options())), at::empty(tau_dims, self.options())};
}


}  // namespace

TORCHTPU_LOWERINGS(householder) {
  LoweringOptions geqrf_options;
  geqrf_options.meta = geqrf_meta;
  register_lowering({"geqrf", "geqrf.a"}, [](LoweringContext& c) {
    Math m{c.b};
    Qr qr = geqrf(m, c.input_uncast(0));
    return Values{qr.a, qr.tau};
  }, geqrf_options);
  // (reflectors [..., m, n], tau [..., k]) -> the first n columns of Q
  register_lowering({"linalg_householder_product", "linalg_householder_product.out"}, [](LoweringContext& c) {
    Math m{c.b};
    Value a = c.input_uncast(0);
    int64_t rank = a.type.rank();
    return Values{apply_q(m, a, c.input_uncast(1), eye(c.b, batch_of(a.type), a.type.dims[rank - 2], a.type.dims[rank - 1], a.type.dtype),
                          true, false)};
  });
  // (reflectors, tau, other, left, transpose) -> op(Q) other or other op(Q)
  register_lowering({"ormqr", "ormqr.out"}, [](LoweringContext& c) {
    Math m{c.b};
    return Values{apply_q(m, c.input_uncast(0), c.input_uncast(1), c.input_uncast(2), c.arg(3).toBool(), c.arg(4).toBool())};
  });
  register_lowering({"linalg_qr", "linalg_qr.out"}, linalg_qr);
}

}  // namespace torchtpu::aten
