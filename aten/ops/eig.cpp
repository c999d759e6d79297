// The eigendecomposition of general square matrices (linalg.eig, linalg.eigvals) as LAPACK's geev
// computes it, so that the eigenvalues come in CPU's order (PyTorch compares them in order):
// balancing by powers of 2 (gebal, without its permutations), Householder reduction to Hessenberg
// form (gehrd), the QR algorithm with LAPACK's shifts and deflation tests (lahqr: Francis double
// shifts for real matrices, each conjugate pair standardized in a 2x2 block as lanv2 does; single
// Wilkinson shifts for complex ones), then eigenvectors by back substitution in the complex Schur
// form (trevc), scaled back (gebak) and normalized to unit length with the largest component real.
// The matrices of a batch go one at a time (a while over the batch): the QR algorithm's indices
// are per matrix. A matrix the iteration does not converge on gets NaN results (LAPACK's info > 0).
#include <cmath>
#include <limits>
#include <optional>

#include "aten/ops/householder.h"

namespace torchtpu::aten {
namespace {

const hlo::TensorType kIndex{DType::kS64, {}};

// One n x n matrix's QR algorithm. H is kept as [n + 1, n + 1] and Z as [n, n + 1], the extra row
// and column zero, so that the rows and columns k..k+2 a sweep step touches always exist.
struct Schur {
  Builder& b;
  Math m{b};
  int64_t n;
  DType dtype;  // the computation's (the input's) dtype
  double ulp, smlnum;

  Schur(Builder& builder, int64_t size, DType t) : b(builder), n(size), dtype(t) {
    bool f64 = component_dtype(t) == DType::kF64;
    ulp = f64 ? 0x1p-52 : 0x1p-23;  // LAPACK's dlamch('P')
    double tiny = f64 ? std::numeric_limits<double>::min() : std::numeric_limits<float>::min();
    smlnum = tiny * (static_cast<double>(n) / ulp);
  }

  bool complex() const { return is_complex(dtype); }
  DType real() const { return component_dtype(dtype); }

  // Indices (0-d s64) and scalars.
  Value at(int64_t i) { return b.constant_int(i, kIndex); }
  Value plus(const Value& i, int64_t d) { return i + at(d); }
  Value is(Compare dir, const Value& x, const Value& y) { return b.compare(dir, x, y); }
  Value both(const Value& p, const Value& q) { return b.binary(BinaryOp::kAnd, p, q); }
  Value either(const Value& p, const Value& q) { return b.binary(BinaryOp::kOr, p, q); }
  Value real_k(double v) { return b.constant(v, {real(), {}}); }
  Value k(double v) { return b.constant(v, {dtype, {}}); }
  Value abs(const Value& x) { return b.unary(UnaryOp::kAbs, x); }
  Value re(const Value& x) { return real_part(b, x); }
  Value as_dtype(const Value& x) { return real_as(b, x, b.constant(0, {dtype, {}})); }
  // |Re x| + |Im x|: LAPACK's cabs1, |x| for reals.
  Value abs1(const Value& x) {
    if (!is_complex(x.type.dtype)) return abs(x);
    return abs(b.unary(UnaryOp::kReal, x)) + abs(b.unary(UnaryOp::kImag, x));
  }
  Value max(const Value& x, const Value& y) { return b.binary(BinaryOp::kMaximum, x, y); }
  Value min(const Value& x, const Value& y) { return b.binary(BinaryOp::kMinimum, x, y); }

  // Elements, rows and columns at runtime indices.
  Value get(const Value& h, const Value& r, const Value& c) { return b.reshape(b.dynamic_slice(h, {r, c}, {1, 1}), {}); }
  Value put(const Value& h, const Value& r, const Value& c, const Value& v) {
    return b.dynamic_update_slice(h, b.reshape(v, {1, 1}), {r, c});
  }
  Value entry(const Value& v, const Value& i) { return b.reshape(b.dynamic_slice(v, {i}, {1}), {}); }
  Value put_entry(const Value& v, const Value& i, const Value& x) { return b.dynamic_update_slice(v, b.reshape(x, {1}), {i}); }
  Value row(const Value& h, const Value& r) { return slice_at(b, h, 0, r); }
  Value column(const Value& h, const Value& c) { return slice_at(b, h, 1, c); }
  Value put_row(const Value& h, const Value& r, const Value& v) {
    return b.dynamic_update_slice(h, b.reshape(v, {1, v.type.dims[0]}), {r, at(0)});
  }
  Value put_column(const Value& h, const Value& c, const Value& v) {
    return b.dynamic_update_slice(h, b.reshape(v, {v.type.dims[0], 1}), {at(0), c});
  }
  // Positions 0..size-1 compared `dir` to the index i.
  Value where(int64_t size, Compare dir, const Value& i) {
    return b.compare(dir, b.iota({DType::kS64, {size}}, 0), b.broadcast_in_dim(i, {size}, {}));
  }
  // The scalar s times the entries of v where `mask` holds.
  Value scaled_where(const Value& v, const Value& mask, const Value& s) {
    return b.select(mask, v * b.broadcast_in_dim(s, v.type.dims, {}), v);
  }
  // [n]: h[k + dr, k + dc] for k = 0..n-1, zero outside h.
  Value shifted_diagonal(const Value& h, int64_t dr, int64_t dc) {
    Value padded = b.pad(h, b.constant(0, {h.type.dtype, {}}), {2, 2}, {3, 3}, {0, 0});
    return diagonal(b, b.slice(padded, {2 + dr, 2 + dc}, {2 + dr + n, 2 + dc + n}, {1, 1}));
  }
  // The largest k in [lo, hi] where ok[k] holds, else `otherwise`.
  Value last_where(const Value& ok, const Value& lo, const Value& hi, const Value& otherwise) {
    Value in = both(ok, both(where(n, Compare::kGE, lo), where(n, Compare::kLE, hi)));
    Value k = m.reduce(b.select(in, b.iota({DType::kS64, {n}}, 0), b.constant(-1, {DType::kS64, {n}})), {0},
                       BinaryOp::kMaximum, -1);
    return b.select(is(Compare::kLT, k, at(0)), otherwise, k);
  }
  Value select(const Value& p, const Value& x, const Value& y) { return b.select(p, x, y); }

  // Rows r, r+1, r+2 (the last when `three`) of h from column `from` on, with the reflector
  // I - t1 (1, u2, u3) (1, u2, u3)^H applied from the left; columns c, c+1, c+2 of h (all rows)
  // with it applied from the right. `conj_left`: the complex sweep's left factor is conj(t1).
  Value reflect_rows(Value h, const Value& r, const Value& from, const Value& t1, const Value& u2, const Value& u3, bool three) {
    std::vector<Value> rows = {row(h, r), row(h, plus(r, 1))};
    if (three) rows.push_back(row(h, plus(r, 2)));
    Value mask = where(h.type.dims[1], Compare::kGE, from);
    auto spread = [&](const Value& s) { return b.broadcast_in_dim(s, rows[0].type.dims, {}); };
    Value sum = rows[0] + spread(conj(b, u2)) * rows[1];
    if (three) sum = sum + spread(conj(b, u3)) * rows[2];
    sum = spread(conj(b, t1)) * sum;
    std::vector<Value> factors = {k(1), u2, u3};
    for (size_t j = 0; j < rows.size(); ++j)
      h = put_row(h, plus(r, static_cast<int64_t>(j)), b.select(mask, rows[j] - sum * spread(factors[j]), rows[j]));
    return h;
  }
  Value reflect_columns(Value h, const Value& c, const Value& t1, const Value& u2, const Value& u3, bool three) {
    std::vector<Value> columns = {column(h, c), column(h, plus(c, 1))};
    if (three) columns.push_back(column(h, plus(c, 2)));
    auto spread = [&](const Value& s) { return b.broadcast_in_dim(s, columns[0].type.dims, {}); };
    Value sum = columns[0] + spread(u2) * columns[1];
    if (three) sum = sum + spread(u3) * columns[2];
    sum = spread(t1) * sum;
    std::vector<Value> factors = {k(1), conj(b, u2), conj(b, u3)};
    for (size_t j = 0; j < columns.size(); ++j)
      h = put_column(h, plus(c, static_cast<int64_t>(j)), columns[j] - sum * spread(factors[j]));
    return h;
  }
  // A plane rotation (cs, sn real) of rows (or columns) p and p+1 where `mask` holds:
  // x' = cs x + sn y, y' = cs y - sn x.
  Value rotate(Value h, const Value& p, const Value& cs, const Value& sn, const Value& mask, bool rows) {
    Value x = rows ? row(h, p) : column(h, p), y = rows ? row(h, plus(p, 1)) : column(h, plus(p, 1));
    auto spread = [&](const Value& s) { return b.broadcast_in_dim(as_dtype(s), x.type.dims, {}); };
    Value x2 = b.select(mask, spread(cs) * x + spread(sn) * y, x);
    Value y2 = b.select(mask, spread(cs) * y - spread(sn) * x, y);
    h = rows ? put_row(h, p, x2) : put_column(h, p, x2);
    return rows ? put_row(h, plus(p, 1), y2) : put_column(h, plus(p, 1), y2);
  }

  // The deflation point: the largest k in (l, i] whose subdiagonal entry h[k, k-1] is negligible
  // (Ahues and Kressner's test, as lahqr), else l.
  Value deflation_point(const Value& h, const Value& i, const Value& l) {
    Value sub = shifted_diagonal(h, 0, -1), diag = shifted_diagonal(h, 0, 0), prev = shifted_diagonal(h, -1, -1);
    Value sup = shifted_diagonal(h, -1, 0);
    auto vk = [&](double v) { return m.k(v, abs1(sub)); };
    Value tst = abs1(prev) + abs1(diag);
    Value around = abs(re(shifted_diagonal(h, -1, -2))) + abs(re(shifted_diagonal(h, 1, 0)));
    tst = b.select(b.compare(Compare::kEQ, tst, vk(0)), tst + around, tst);
    Value ab = max(abs1(sub), abs1(sup)), ba = min(abs1(sub), abs1(sup));
    Value diff = abs1(prev - diag);
    Value aa = max(abs1(diag), diff), bb = min(abs1(diag), diff), s = aa + ab;
    Value fine = b.compare(Compare::kLE, ba * (ab / s),
                           max(vk(smlnum), vk(ulp) * (bb * (aa / s))));
    Value small = either(b.compare(Compare::kLE, abs1(sub), vk(smlnum)),
                         both(b.compare(Compare::kLE, abs(re(sub)), vk(ulp) * tst), fine));
    return last_where(small, plus(l, 1), i, l);
  }

  // The exceptional shifts' counters: every 10th sweep without a deflation uses the window's top,
  // every 20th its bottom.
  Value every(const Value& count, int64_t period) {
    return is(Compare::kEQ, b.binary(BinaryOp::kRemainder, count, at(period)), at(0));
  }

  // ---- Real matrices: Francis double-shift sweeps (dlahqr) ----

  struct Shifts {
    Value rt1r, rt1i, rt2r, rt2i;
  };

  Shifts double_shifts(const Value& h, const Value& i, const Value& l, const Value& kdefl) {
    Value im1 = plus(i, -1), im2 = plus(i, -2), l1 = plus(l, 1), l2 = plus(l, 2);
    Value hii = get(h, i, i), exc20 = every(kdefl, 20), exc10 = both(every(kdefl, 10), b.unary(UnaryOp::kNot, exc20));
    Value s20 = abs(get(h, i, im1)) + abs(get(h, im1, im2)), s10 = abs(get(h, l1, l)) + abs(get(h, l2, l1));
    Value exceptional = either(exc20, exc10), s_exc = select(exc20, s20, s10);
    Value h11 = select(exc20, k(0.75) * s20 + hii,
                       select(exc10, k(0.75) * s10 + get(h, l, l), get(h, im1, im1)));
    Value h12 = select(exceptional, k(-0.4375) * s_exc, get(h, im1, i));
    Value h21 = select(exceptional, s_exc, get(h, i, im1));
    Value h22 = select(exceptional, h11, hii);
    Value s = abs(h11) + abs(h12) + (abs(h21) + abs(h22));
    Value zero_s = is(Compare::kEQ, s, k(0)), safe = select(zero_s, k(1), s);
    h11 = h11 / safe, h12 = h12 / safe, h21 = h21 / safe, h22 = h22 / safe;
    Value tr = (h11 + h22) / k(2);
    Value det = (h11 - tr) * (h22 - tr) - h12 * h21;
    Value rtdisc = b.unary(UnaryOp::kSqrt, abs(det)), conjugate = is(Compare::kGE, det, k(0));
    Value r1 = tr + rtdisc, r2 = tr - rtdisc;  // real shifts: the one nearer h22, twice
    Value nearer = select(is(Compare::kLE, abs(r1 - h22), abs(r2 - h22)), r1, r2);
    Value rt1r = select(zero_s, k(0), select(conjugate, tr, nearer) * s);
    Value rt1i = select(both(conjugate, b.unary(UnaryOp::kNot, zero_s)), rtdisc * s, k(0));
    return {rt1r, rt1i, rt1r, -rt1i};
  }

  // Where the sweep starts (the largest m in [l, i-2] where two consecutive subdiagonal entries are
  // small enough, else l) and its first reflector's vector.
  std::pair<Value, Values> double_shift_start(const Value& h, const Value& i, const Value& l, const Shifts& sh) {
    auto vec = [&](const Value& s) { return b.broadcast_in_dim(s, {n}, {}); };
    Value hmm = shifted_diagonal(h, 0, 0), h10 = shifted_diagonal(h, 1, 0), h01 = shifted_diagonal(h, 0, 1);
    Value hpp = shifted_diagonal(h, 1, 1), h21 = shifted_diagonal(h, 2, 1);
    Value s = abs(hmm - vec(sh.rt2r)) + vec(abs(sh.rt2i)) + abs(h10);
    Value h21s = h10 / s;
    Value v1 = h21s * h01 + (hmm - vec(sh.rt1r)) * ((hmm - vec(sh.rt2r)) / s) - vec(sh.rt1i) * (vec(sh.rt2i) / s);
    Value v2 = h21s * (hmm + hpp - vec(sh.rt1r) - vec(sh.rt2r));
    Value v3 = h21s * h21;
    Value norm = abs(v1) + abs(v2) + abs(v3);
    v1 = v1 / norm, v2 = v2 / norm, v3 = v3 / norm;
    Value h00 = abs(shifted_diagonal(h, 0, -1)) * (abs(v2) + abs(v3));
    Value h01x = m.k(ulp, v1) * abs(v1) * (abs(shifted_diagonal(h, -1, -1)) + abs(hmm) + abs(hpp));
    Value ok = either(where(n, Compare::kEQ, l), is(Compare::kLE, h00, h01x));
    Value start = last_where(ok, l, plus(i, -2), l);
    return {start, {entry(v1, start), entry(v2, start), entry(v3, start)}};
  }

  // One step of a double-shift sweep: the 3-element reflector (2 at the window's bottom) that
  // moves the bulge from column k-1 (or, at the start, makes it from v), applied on both sides.
  Values double_shift_step(Value h, Value z, const Value& kk, const Value& i, const Value& l, const Value& start, const Values& v) {
    Value first = is(Compare::kEQ, kk, start), three = is(Compare::kLT, kk, plus(i, -1));
    Value km1 = max(plus(kk, -1), at(0)), k1 = plus(kk, 1), k2 = plus(kk, 2);
    Value c0 = get(h, kk, km1), c1 = get(h, k1, km1), c2 = get(h, k2, km1);
    Value x0 = select(first, v[0], c0), x1 = select(first, v[1], c1);
    Value x2 = select(three, select(first, v[2], c2), k(0));
    Reflector r = larfg(m, x0, x1 * x1 + x2 * x2);
    Value u2 = x1 * r.scale, u3 = x2 * r.scale, t1 = r.tau;
    Value scaled = both(first, is(Compare::kGT, start, l));  // h[k, k-1] *= 1 - t1 (LAPACK's -h without underflow)
    h = put(h, kk, km1, select(first, select(scaled, c0 * (k(1) - t1), c0), r.beta));
    h = put(h, k1, km1, select(first, c1, k(0)));
    h = put(h, k2, km1, select(both(b.unary(UnaryOp::kNot, first), three), k(0), c2));
    h = reflect_rows(h, kk, kk, t1, u2, u3, true);
    h = reflect_columns(h, kk, t1, u2, u3, true);
    z = reflect_columns(z, kk, t1, u2, u3, true);
    return {h, z, plus(kk, 1)};
  }

  // The standardized Schur factorization of the 2x2 block [[a, b], [c, d]] (dlanv2): the rotation
  // (cs, sn) and the block it gives, either upper triangular (real eigenvalues) or with equal
  // diagonal entries and b c < 0 (a conjugate pair (a +- sqrt(-b c) i)).
  struct Block {
    Value a, b, c, d, cs, sn;
  };

  Block standardized(Value a, Value bb, Value c, Value d) {
    auto sign1 = [&](const Value& x) { return select(is(Compare::kGE, x, k(0)), k(1), k(-1)); };
    auto copysign = [&](const Value& x, const Value& s) { return abs(x) * sign1(s); };
    Value zero = k(0), one = k(1), half = k(0.5);
    Value c_zero = is(Compare::kEQ, c, zero), b_zero = is(Compare::kEQ, bb, zero);
    Value equal_opposite = both(is(Compare::kEQ, a - d, zero), is(Compare::kNE, sign1(bb), sign1(c)));
    // General case.
    Value temp = a - d, p = half * temp;
    Value bcmax = max(abs(bb), abs(c)), bcmis = min(abs(bb), abs(c)) * sign1(bb) * sign1(c);
    Value scale = max(abs(p), bcmax);
    Value z = p / scale * p + bcmax / scale * bcmis;
    Value real_pair = is(Compare::kGE, z, k(4 * ulp));
    // Real eigenvalues: upper triangular.
    Value zr = p + copysign(b.unary(UnaryOp::kSqrt, scale) * b.unary(UnaryOp::kSqrt, z), p);
    Value ra = d + zr, rd = d - bcmax / zr * bcmis;
    Value tau = b.unary(UnaryOp::kSqrt, c * c + zr * zr);
    Value rcs = zr / tau, rsn = c / tau, rb = bb - c;
    // Complex or nearly equal eigenvalues: make the diagonal equal.
    Value sigma = bb + c, tau2 = b.unary(UnaryOp::kSqrt, sigma * sigma + temp * temp);
    Value ccs = b.unary(UnaryOp::kSqrt, half * (one + abs(sigma) / tau2));
    Value csn = (-p / (tau2 * ccs)) * sign1(sigma);
    Value aa = a * ccs + bb * csn, ab = (-a) * csn + bb * ccs;
    Value ac = c * ccs + d * csn, ad = (-c) * csn + d * ccs;
    Value b2 = ab * ccs + ad * csn, c2 = ac * ccs - aa * csn;
    Value mid = half * (aa * ccs + ac * csn + (ad * ccs - ab * csn));
    // ... then, if b2 c2 > 0, real eigenvalues after all: one more rotation to triangular
    Value c2_nonzero = is(Compare::kNE, c2, zero), b2_nonzero = is(Compare::kNE, b2, zero);
    Value same_sign = both(both(c2_nonzero, b2_nonzero), is(Compare::kEQ, sign1(b2), sign1(c2)));
    Value sab = b.unary(UnaryOp::kSqrt, abs(b2)), sac = b.unary(UnaryOp::kSqrt, abs(c2));
    Value pp = copysign(sab * sac, c2), tau3 = one / b.unary(UnaryOp::kSqrt, abs(b2 + c2));
    Value cs1 = sab * tau3, sn1 = sac * tau3;
    Value tcs = ccs * cs1 - csn * sn1, tsn = ccs * sn1 + csn * cs1;
    // ... or, if b2 = 0, swap rows and columns
    Value swap = both(c2_nonzero, b.unary(UnaryOp::kNot, b2_nonzero));
    Block complex_case{select(same_sign, mid + pp, mid), select(same_sign, b2 - c2, select(swap, -c2, b2)),
                       select(either(same_sign, swap), zero, c2), select(same_sign, mid - pp, mid),
                       select(same_sign, tcs, select(swap, -csn, ccs)),
                       select(same_sign, tsn, select(swap, ccs, csn))};
    Block general{select(real_pair, ra, complex_case.a), select(real_pair, rb, complex_case.b),
                  select(real_pair, zero, complex_case.c), select(real_pair, rd, complex_case.d),
                  select(real_pair, rcs, complex_case.cs), select(real_pair, rsn, complex_case.sn)};
    Value keep = either(c_zero, both(b.unary(UnaryOp::kNot, b_zero), equal_opposite));  // already standard
    auto pick = [&](const Value& kept, const Value& swapped, const Value& g) {
      return select(keep, kept, select(b_zero, swapped, g));
    };
    return {pick(a, d, general.a), pick(bb, -c, general.b), pick(c, zero, general.c),
            pick(d, a, general.d), pick(one, zero, general.cs), pick(zero, one, general.sn)};
  }

  // Deflation of a real window's bottom: one eigenvalue (l == i) or a standardized 2x2 block.
  Values real_deflation(Value h, Value z, Value wr, Value wi, const Value& i, const Value& l) {
    Value im1 = max(plus(i, -1), at(0));
    Value pair = is(Compare::kEQ, l, plus(i, -1));
    Block s = standardized(get(h, im1, im1), get(h, im1, i), get(h, i, im1), get(h, i, i));
    Value h2 = put(put(put(put(h, im1, im1, s.a), im1, i, s.b), i, im1, s.c), i, i, s.d);
    h2 = rotate(h2, im1, s.cs, s.sn, where(n + 1, Compare::kGT, i), true);
    h2 = rotate(h2, im1, s.cs, s.sn, where(n + 1, Compare::kLT, im1), false);
    Value z2 = rotate(z, im1, s.cs, s.sn, b.constant(1, {DType::kBool, {n}}), false);
    Value im = select(is(Compare::kEQ, s.c, k(0)), k(0), b.unary(UnaryOp::kSqrt, abs(s.b)) * b.unary(UnaryOp::kSqrt, abs(s.c)));
    Value wr2 = put_entry(put_entry(wr, im1, s.a), i, s.d), wi2 = put_entry(put_entry(wi, im1, im), i, -im);
    Value single_wr = put_entry(wr, i, get(h, i, i)), single_wi = put_entry(wi, i, k(0));
    return {select(pair, h2, h), select(pair, z2, z), select(pair, wr2, single_wr), select(pair, wi2, single_wi)};
  }

  // ---- Complex matrices: single-shift sweeps (zlahqr) ----

  Value wilkinson_shift(const Value& h, const Value& i, const Value& l, const Value& kdefl) {
    Value im1 = plus(i, -1), l1 = plus(l, 1);
    Value exc20 = every(kdefl, 20), exc10 = both(every(kdefl, 10), b.unary(UnaryOp::kNot, exc20));
    Value t = get(h, i, i);
    Value u = b.unary(UnaryOp::kSqrt, get(h, im1, i)) * b.unary(UnaryOp::kSqrt, get(h, i, im1));
    Value s = abs1(u);
    Value x = k(0.5) * (get(h, im1, im1) - t), sx = abs1(x);
    Value s2 = max(s, sx), s2c = as_dtype(select(is(Compare::kEQ, s2, real_k(0)), real_k(1), s2));
    Value y = s2c * b.unary(UnaryOp::kSqrt, m.square(x / s2c) + m.square(u / s2c));
    Value xs = x / as_dtype(select(is(Compare::kEQ, sx, real_k(0)), real_k(1), sx));
    Value dotp = re(xs) * re(y) + b.unary(UnaryOp::kImag, xs) * b.unary(UnaryOp::kImag, y);
    y = select(both(is(Compare::kGT, sx, real_k(0)), is(Compare::kLT, dotp, real_k(0))), -y, y);
    Value wilkinson = select(is(Compare::kEQ, s, real_k(0)), t, t - u * (u / (x + y)));
    Value t20 = as_dtype(real_k(0.75) * abs(re(get(h, i, im1)))) + t;
    Value t10 = as_dtype(real_k(0.75) * abs(re(get(h, l1, l)))) + get(h, l, l);
    return select(exc20, t20, select(exc10, t10, wilkinson));
  }

  std::pair<Value, Values> single_shift_start(const Value& h, const Value& i, const Value& l, const Value& t) {
    Value h11 = shifted_diagonal(h, 0, 0), h22 = shifted_diagonal(h, 1, 1);
    Value h11s = h11 - b.broadcast_in_dim(t, {n}, {}), h21 = re(shifted_diagonal(h, 1, 0));
    Value s = abs1(h11s) + abs(h21);
    h11s = h11s / as_dtype(s), h21 = h21 / s;
    Value h10 = re(shifted_diagonal(h, 0, -1));
    Value ok = is(Compare::kLE, abs(h10) * abs(h21),
                  m.k(ulp, h21) * (abs1(h11s) * (abs1(h11) + abs1(h22))));
    Value start = last_where(ok, plus(l, 1), plus(i, -1), l);
    return {start, {entry(h11s, start), as_dtype(entry(h21, start))}};
  }

  Values single_shift_step(Value h, Value z, const Value& kk, const Value& i, const Value& l, const Value& start, const Values& v) {
    Value first = is(Compare::kEQ, kk, start);
    Value km1 = max(plus(kk, -1), at(0)), k1 = plus(kk, 1);
    Value c0 = get(h, kk, km1), c1 = get(h, k1, km1);
    Value x0 = select(first, v[0], c0), x1 = select(first, v[1], c1);
    Reflector r = larfg(m, x0, abs_squared(b, x1));
    Value u2 = x1 * r.scale, t1 = r.tau;
    h = put(h, kk, km1, select(first, c0, r.beta));
    h = put(h, k1, km1, select(first, c1, k(0)));
    h = reflect_rows(h, kk, kk, t1, u2, k(0), false);
    h = reflect_columns(h, kk, t1, u2, k(0), false);
    z = reflect_columns(z, kk, t1, u2, k(0), false);
    // A sweep started below l rescales so that h[m, m-1] stays real.
    Value temp = k(1) - t1;
    temp = temp / as_dtype(abs(temp));
    Value rescale = both(first, is(Compare::kGT, start, l));
    Value hm1 = put(h, k1, kk, get(h, k1, kk) * conj(b, temp));
    Value m2 = plus(kk, 2);
    hm1 = select(is(Compare::kLE, m2, i), put(hm1, m2, k1, get(hm1, m2, k1) * temp), hm1);
    Value in = both(both(where(n + 1, Compare::kGE, kk), where(n + 1, Compare::kLE, i)), where(n + 1, Compare::kNE, k1));
    Value d = select(in, b.broadcast_in_dim(temp, {n + 1}, {}), b.broadcast_in_dim(k(1), {n + 1}, {}));
    Value factor = b.broadcast_in_dim(d, {n + 1, n + 1}, {0}) * b.broadcast_in_dim(conj(b, d), {n + 1, n + 1}, {1});
    hlo::TensorType grid{DType::kS64, {n + 1, n + 1}};
    Value upper = b.compare(Compare::kLT, b.iota(grid, 0), b.iota(grid, 1));
    hm1 = b.select(upper, hm1 * factor, hm1);
    Value zm1 = z * b.broadcast_in_dim(conj(b, d), z.type.dims, {1});
    return {select(rescale, hm1, h), select(rescale, zm1, z), plus(kk, 1)};
  }
  // ---- The whole QR algorithm ----

  // Complex Hessenberg matrices start with real subdiagonal entries (a unit diagonal similarity).
  std::pair<Value, Value> real_subdiagonal(Value h, Value z) {
    Values out = counted_loop(b, n - 1, {h, z}, [&](Builder& lb, const Value& step, const Values& s) {
      Schur w{lb, n, dtype};
      return w.make_subdiagonal_real(s[0], s[1], w.plus(step, 1), w.where(n + 1, Compare::kGE, w.plus(step, 1)),
                                     w.where(n + 1, Compare::kLE, w.plus(step, 2)));
    });
    return {out[0], out[1]};
  }

  // h[i, i-1] made real, |h[i, i-1]|, by scaling row i (where `row_mask`) by the conjugate of its
  // phase and column i (where `column_mask`) and z's column i by the phase.
  Values make_subdiagonal_real(Value h, Value z, const Value& i, const Value& row_mask, const Value& column_mask) {
    Value im1 = plus(i, -1), x = get(h, i, im1);
    Value magnitude = abs(x), nonreal = is(Compare::kNE, b.unary(UnaryOp::kImag, x), real_k(0));
    Value phase = x / as_dtype(select(nonreal, magnitude, real_k(1)));  // x / |x|
    Value h2 = put_row(h, i, scaled_where(row(h, i), row_mask, conj(b, phase)));
    h2 = put_column(h2, i, scaled_where(column(h2, i), column_mask, phase));
    h2 = put(h2, i, im1, as_dtype(magnitude));
    Value z2 = put_column(z, i, column(z, i) * b.broadcast_in_dim(phase, {n}, {}));
    return {select(nonreal, h2, h), select(nonreal, z2, z)};
  }

  // One pass of lahqr's loop: the window [l, i] either deflates at its bottom (an eigenvalue, or a
  // conjugate pair for real matrices, moves i up) or gets one QR sweep.
  // State: h, z, wr (w for complex matrices), wi, i, l, sweeps in this window, sweeps since a deflation.
  Values iteration(const Values& s) {
    Value h = s[0], z = s[1], wr = s[2], wi = s[3], i = s[4], its = s[6], kdefl = s[7];
    Value l = deflation_point(h, i, s[5]);
    h = select(is(Compare::kGT, l, at(0)), put(h, l, max(plus(l, -1), at(0)), k(0)), h);
    Value done = is(Compare::kGE, l, complex() ? i : plus(i, -1));
    Value kdefl1 = plus(kdefl, 1);
    Value swept_h, swept_z;
    if (complex()) {
      auto [start, v] = single_shift_start(h, i, l, wilkinson_shift(h, i, l, kdefl1));
      std::tie(swept_h, swept_z) = sweep(h, z, i, l, start, v, select(done, start, i));
      Values real_again = make_subdiagonal_real(swept_h, swept_z, i, where(n + 1, Compare::kGT, i), where(n + 1, Compare::kLT, i));
      swept_h = select(done, swept_h, real_again[0]);
      swept_z = select(done, swept_z, real_again[1]);
    } else {
      auto [start, v] = double_shift_start(h, i, l, double_shifts(h, i, l, kdefl1));
      std::tie(swept_h, swept_z) = sweep(h, z, i, l, start, v, select(done, start, i));
    }
    Values deflated = complex() ? Values{h, z, put_entry(wr, i, get(h, i, i)), wi} : real_deflation(h, z, wr, wi, i, l);
    Values swept = {swept_h, swept_z, wr, wi, i, l, plus(its, 1), kdefl1};
    Values after_deflation = {deflated[0], deflated[1], deflated[2], deflated[3], plus(l, -1), at(0), at(0), at(0)};
    Values next;
    for (size_t j = 0; j < swept.size(); ++j) next.push_back(select(done, after_deflation[j], swept[j]));
    return next;
  }

  // The sweep's steps k = start..end-1 (a while: its regions see only what it carries).
  std::pair<Value, Value> sweep(const Value& h, const Value& z, const Value& i, const Value& l, const Value& start, const Values& v,
                                const Value& end) {
    Values carried = {h, z, start, end, i, l, start};
    carried.insert(carried.end(), v.begin(), v.end());
    Values out = b.while_loop(
        carried, [&](Builder& rb, const Values& s) { return Values{rb.compare(Compare::kLT, s[2], s[3])}; },
        [&](Builder& rb, const Values& s) {
          Schur w{rb, n, dtype};
          Values first_v(s.begin() + 7, s.end());
          Values next = complex() ? w.single_shift_step(s[0], s[1], s[2], s[4], s[5], s[6], first_v)
                             : w.double_shift_step(s[0], s[1], s[2], s[4], s[5], s[6], first_v);
          next.insert(next.end(), s.begin() + 3, s.end());
          return next;
        });
    return {out[0], out[1]};
  }

  struct Decomposition {
    Value t, z, wr, wi, converged;  // Schur form [n, n], vectors [n, n], eigenvalues (wr only when complex)
  };

  Decomposition schur(Value h, Value z) {
    if (complex()) std::tie(h, z) = real_subdiagonal(h, z);
    int64_t itmax = 30 * std::max<int64_t>(10, n);
    Values state = {h, z, b.constant(0, {dtype, {n}}), b.constant(0, {dtype, {n}}), at(n - 1), at(0), at(0), at(0)};
    Values out = b.while_loop(
        state,
        [&](Builder& rb, const Values& s) {
          return Values{rb.binary(BinaryOp::kAnd, rb.compare(Compare::kGE, s[4], rb.constant_int(0, kIndex)),
                                  rb.compare(Compare::kLE, s[6], rb.constant_int(itmax, kIndex)))};
        },
        [&](Builder& rb, const Values& s) { return Schur{rb, n, dtype}.iteration(s); });
    return {square(out[0]), b.slice(out[1], {0, 0}, {n, n}, {1, 1}), out[2], out[3], is(Compare::kLT, out[4], at(0))};
  }
  Value square(const Value& h) { return b.slice(h, {0, 0}, {n, n}, {1, 1}); }
  Value padded(const Value& x, int64_t rows) {  // `rows` zero rows and one zero column more
    return b.pad(x, b.constant(0, {x.type.dtype, {}}), {0, 0}, {rows, 1}, {0, 0});
  }

  // ---- Balancing and the Hessenberg form ----

  // gebal's scaling: D^-1 A D with D a diagonal of powers of 2 that brings each row's and column's
  // norms within a factor 2 of each other (exact: no rounding). Returns (D^-1 A D, D's diagonal).
  std::pair<Value, Value> balance(const Value& a) {
    double sfmin1 = (real() == DType::kF64 ? std::numeric_limits<double>::min() : std::numeric_limits<float>::min()) / ulp;
    double sfmax1 = 1 / sfmin1, sfmin2 = 2 * sfmin1, sfmax2 = 1 / sfmin2;
    Value scale = b.constant(1, {real(), {n}});
    Values out = b.while_loop(
        {a, scale, b.constant(1, {DType::kBool, {}}), at(0)},
        [&](Builder& rb, const Values& s) {
          return Values{rb.binary(BinaryOp::kAnd, s[2], rb.compare(Compare::kLT, s[3], rb.constant_int(100, kIndex)))};
        },
        [&](Builder& rb, const Values& s) {
          Values pass = counted_loop(rb, n, {s[0], s[1], rb.constant(0, {DType::kBool, {}})}, [&](Builder& lb, const Value& i, const Values& p) {
            return Schur{lb, n, dtype}.balance_column(p, i, sfmin1, sfmax1, sfmin2, sfmax2);
          });
          return Values{pass[0], pass[1], pass[2], s[3] + rb.constant_int(1, kIndex)};
        });
    return {out[0], out[1]};
  }

  Values balance_column(const Values& p, const Value& i, double sfmin1, double sfmax1, double sfmin2, double sfmax2) {
    Value a = p[0], scale = p[1];
    Value col = column(a, i), rw = row(a, i);
    Value c = b.unary(UnaryOp::kSqrt, m.sum(abs_squared(b, col), {0})), r = b.unary(UnaryOp::kSqrt, m.sum(abs_squared(b, rw), {0}));
    Value ca = m.reduce(abs(col), {0}, BinaryOp::kMaximum, 0), ra = m.reduce(abs(rw), {0}, BinaryOp::kMaximum, 0);
    Value s = c + r, two = real_k(2);
    auto lt = [&](const Value& x, double v) { return is(Compare::kLT, x, real_k(v)); };
    auto gt = [&](const Value& x, double v) { return is(Compare::kGT, x, real_k(v)); };
    // (f, c, ca, r, g, ra): f doubles while the column norm is below half the row norm, then halves
    // while it is at least twice it
    Values up = b.while_loop(
        {real_k(1), c, ca, r, r / two, ra},
        [&](Builder& rb, const Values& x) {
          Schur w{rb, n, dtype};
          auto mx = [&](const Value& p, const Value& q) { return w.max(p, q); };
          auto mn = [&](const Value& p, const Value& q) { return w.min(p, q); };
          Value ok = w.both(w.is(Compare::kLT, x[1], x[4]), w.is(Compare::kLT, mx(x[0], mx(x[1], x[2])), w.real_k(sfmax2)));
          return Values{w.both(ok, w.is(Compare::kGT, mn(x[3], mn(x[4], x[5])), w.real_k(sfmin2)))};
        },
        [&](Builder& rb, const Values& x) {
          Value t = rb.constant(2, {real(), {}});
          return Values{x[0] * t, x[1] * t, x[2] * t, x[3] / t, x[4] / t, x[5] / t};
        });
    Values down = b.while_loop(
        {up[0], up[1], up[2], up[3], up[1] / two, up[5]},
        [&](Builder& rb, const Values& x) {
          Schur w{rb, n, dtype};
          auto mx = [&](const Value& p, const Value& q) { return w.max(p, q); };
          auto mn = [&](const Value& p, const Value& q) { return w.min(p, q); };
          Value ok = w.both(w.is(Compare::kGE, x[4], x[3]), w.is(Compare::kLT, mx(x[3], x[5]), w.real_k(sfmax2)));
          return Values{w.both(ok, w.is(Compare::kGT, mn(mn(x[0], x[1]), mn(x[4], x[2])), w.real_k(sfmin2)))};
        },
        [&](Builder& rb, const Values& x) {
          Value t = rb.constant(2, {real(), {}});
          return Values{x[0] / t, x[1] / t, x[2] / t, x[3] * t, x[4] / t, x[5] * t};
        });
    Value f = down[0], sc = entry(scale, i);
    Value skip = either(either(is(Compare::kEQ, c, real_k(0)), is(Compare::kEQ, r, real_k(0))),
                        is(Compare::kGE, down[1] + down[3], real_k(0.95) * s));
    skip = either(skip, both(both(lt(f, 1), lt(sc, 1)), is(Compare::kLE, f * sc, real_k(sfmin1))));
    skip = either(skip, both(both(gt(f, 1), gt(sc, 1)), is(Compare::kGE, sc, real_k(sfmax1) / f)));
    Value scaled = put_row(a, i, rw / b.broadcast_in_dim(as_dtype(f), {n}, {}));
    scaled = put_column(scaled, i, column(scaled, i) * b.broadcast_in_dim(as_dtype(f), {n}, {}));
    return {select(skip, a, scaled), select(skip, scale, put_entry(scale, i, sc * f)),
            either(p[2], b.unary(UnaryOp::kNot, skip))};
  }

  // gehrd: reflectors H_j zeroing column j below row j+1, A <- H_j^H A H_j; Q = H_0 H_1 ...
  std::pair<Value, Value> hessenberg(const Value& a) {
    Value q = identity(b, a.type);
    Values out = counted_loop(b, n - 2, {a, q}, [&](Builder& lb, const Value& j, const Values& s) {
      Schur w{lb, n, dtype};
      Math& lm = w.m;
      Value h = s[0], col = w.column(h, j), j1 = w.plus(j, 1);
      Value below = w.where(n, Compare::kGT, j1), at_j1 = w.where(n, Compare::kEQ, j1);
      Value x = lb.select(below, col, lm.k(0, col));
      Reflector r = larfg(lm, w.entry(col, j1), lm.sum(abs_squared(lb, x), {0}));
      Value v = lb.select(at_j1, lm.k(1, col), lm.mul(x, lb.broadcast_in_dim(r.scale, {n}, {})));
      h = reflect(lm, h, v, r.tau, false);
      h = lb.select(lb.broadcast_in_dim(w.where(n, Compare::kGT, j), {n, n}, {1}), reflect(lm, h, v, conj(lb, r.tau), true), h);
      Value reduced = lb.select(below, lm.k(0, col), lb.select(at_j1, lb.broadcast_in_dim(r.beta, {n}, {}), w.column(h, j)));
      return Values{w.put_column(h, j, reduced), reflect(lm, s[1], v, r.tau, false)};
    });
    return {out[0], out[1]};
  }

  // ---- Eigenvectors ----

  // The complex Schur form of a real one: U^H T U, U unitary and block diagonal, triangularizing
  // each 2x2 block of a conjugate pair (its first column the block's eigenvector for the
  // eigenvalue with positive imaginary part). Returns U.
  Value complex_schur_basis(const Value& t, const Value& wi, DType complex_t) {
    Value first = is(Compare::kGT, wi, b.constant(0, wi.type));  // [n]: a pair starts here
    Value beta = shifted_diagonal(t, 0, 1);
    Value r = b.unary(UnaryOp::kSqrt, beta * beta + wi * wi);
    Value safe = b.select(first, r, m.k(1, r));
    Value g1 = beta / safe, g2 = wi / safe;
    auto shifted_down = [&](const Value& x) {  // x[p-1] at p
      return b.slice(b.pad(x, b.constant(0, {x.type.dtype, {}}), {1}, {0}, {0}), {0}, {n}, {1});
    };
    Value second = shifted_down(first);
    Value one = m.k(1, g1);
    Value diag = b.select(first, g1, b.select(second, shifted_down(g1), one));
    Value off = b.binary(BinaryOp::kComplex, m.k(0, g2), b.select(first, g2, m.k(0, g2)));  // i g2
    hlo::TensorType grid{DType::kS64, {n, n}};
    Value rowi = b.iota(grid, 0), coli = b.iota(grid, 1);
    auto by_column = [&](const Value& x) { return b.broadcast_in_dim(x, {n, n}, {1}); };
    auto by_row = [&](const Value& x) { return b.broadcast_in_dim(x, {n, n}, {0}); };
    Value zero = b.constant(0, {complex_t, {n, n}});
    Value diag_c = real_as(b, diag, zero);
    Value u = b.select(b.compare(Compare::kEQ, rowi, coli), by_column(diag_c), zero);
    u = b.select(b.compare(Compare::kEQ, rowi, coli + b.constant_int(1, grid)), by_column(off), u);
    return b.select(b.compare(Compare::kEQ, coli, rowi + b.constant_int(1, grid)), by_row(off), u);
  }

  // The eigenvectors of the upper triangular t ([n, n], complex) with eigenvalues w, as columns:
  // x_j[j] = 1, x_j below j zero, above it by back substitution (trevc), a pivot smaller than
  // LAPACK's smin moved to smin.
  Value triangular_eigenvectors(const Value& t, const Value& w) {
    Value x = identity(b, t.type);
    Value smin = max(m.k(ulp, re(w)) * abs1(w), m.k(smlnum, re(w)));
    return counted_loop(b, n - 1, {x, t, w, smin}, [&](Builder& lb, const Value& step, const Values& s) {
      Schur e{lb, n, s[1].type.dtype};
      const Value &t = s[1], &w = s[2], &smin = s[3];
      Math& lm = e.m;
      Value row_index = e.at(n - 2) - step;
      Value right = e.where(n, Compare::kGT, row_index);
      Value t_row = lb.select(right, e.row(t, row_index), lm.k(0, e.row(t, row_index)));
      Value sum = lm.sum(lm.mul(lb.broadcast_in_dim(t_row, {n, n}, {0}), s[0]), {0});
      Value pivot = lm.sub(lb.broadcast_in_dim(e.get(t, row_index, row_index), {n}, {}), w);
      pivot = lb.select(lb.compare(Compare::kLT, e.abs1(pivot), smin), real_as(lb, smin, pivot), pivot);
      Value solved = lm.div(-sum, pivot);
      return Values{e.put_row(s[0], row_index, lb.select(right, solved, e.row(s[0], row_index))), t, w, smin};
    })[0];
  }

  // Unit columns with the largest component (the first of equal ones) real and positive.
  Value normalized(const Value& v) {
    Value size2 = abs_squared(b, v);
    Value norm = b.unary(UnaryOp::kSqrt, m.sum(size2, {0}));
    hlo::TensorType grid{DType::kS64, {n, n}};
    Value largest = m.reduce(size2, {0}, BinaryOp::kMaximum, 0);
    Value at_largest = b.compare(Compare::kEQ, size2, b.broadcast_in_dim(largest, {n, n}, {1}));
    Value first = m.reduce(b.select(at_largest, b.iota(grid, 0), b.constant(n, grid)), {0}, BinaryOp::kMinimum, n);
    Value pick = m.sum(b.select(b.compare(Compare::kEQ, b.iota(grid, 0), b.broadcast_in_dim(first, {n, n}, {1})), v,
                                m.k(0, v)), {0});
    Value magnitude = abs(pick);
    Value phase = pick / real_as(b, b.select(b.compare(Compare::kEQ, magnitude, m.k(0, magnitude)), m.k(1, magnitude), magnitude), pick);
    Value zero_norm = b.compare(Compare::kEQ, norm, m.k(0, norm));
    Value divisor = real_as(b, b.select(zero_norm, m.k(1, norm), norm), phase) * phase;
    return v / b.broadcast_in_dim(divisor, {n, n}, {1});
  }

  // (eigenvalues [n], eigenvectors [n, n] or none), complex; NaN where the iteration did not converge.
  std::pair<Value, std::optional<Value>> eig(const Value& a, DType complex_t, bool vectors) {
    auto [balanced, scale] = balance(a);
    auto [h, q] = hessenberg(balanced);
    Decomposition d = schur(padded(h, 1), padded(q, 0));
    Value nan = b.constant(NAN, {component_dtype(complex_t), {}}), nan_c = b.binary(BinaryOp::kComplex, nan, nan);
    auto or_nan = [&](const Value& x) {
      return b.select(b.broadcast_in_dim(d.converged, x.type.dims, {}), x, b.broadcast_in_dim(nan_c, x.type.dims, {}));
    };
    Value w = complex() ? d.wr : b.binary(BinaryOp::kComplex, d.wr, d.wi);
    if (!vectors) return {or_nan(w), std::nullopt};
    Value t, z;
    if (complex()) {
      t = triangle(b, d.t, false), z = d.z;
    } else {
      Value u = complex_schur_basis(d.t, d.wi, complex_t);
      Value tc = matmul(matmul(adjoint(b, u), b.convert(d.t, complex_t)), u);
      t = triangle(b, tc, false);
      z = matmul(b.convert(d.z, complex_t), u);
    }
    hlo::TensorType grid{DType::kS64, {n, n}};
    t = b.select(b.compare(Compare::kEQ, b.iota(grid, 0), b.iota(grid, 1)), b.broadcast_in_dim(w, {n, n}, {1}), t);
    Schur c{b, n, complex_t};
    Value v = matmul(z, c.triangular_eigenvectors(t, w));
    if (!complex()) {  // a real eigenvalue's eigenvector is real
      Value real_value = b.broadcast_in_dim(b.compare(Compare::kEQ, d.wi, m.k(0, d.wi)), {n, n}, {1});
      v = b.select(real_value, real_as(b, b.unary(UnaryOp::kReal, v), v), v);
    }
    v = c.normalized(v * b.broadcast_in_dim(real_as(b, scale, v), {n, n}, {0}));
    return {or_nan(w), or_nan(v)};
  }
};

// linalg_eig(A) -> (eigenvalues, eigenvectors) and _linalg_eigvals(A) -> eigenvalues, complex.
Values linalg_eig(LoweringContext& c) {
  Builder& b = c.b;
  Value a = c.input_uncast(0);
  bool vectors = c.num_outputs() == 2;
  int64_t rank = a.type.rank(), n = a.type.dims.back(), count = 1;
  for (int64_t d = 0; d + 2 < rank; ++d) count *= a.type.dims[d];
  if (n == 0 || count == 0) return vectors ? Values{b.constant(0, c.out(0)), b.constant(0, c.out(1))} : Values{b.constant(0, c.out(0))};
  Value finite = b.unary(UnaryOp::kIsFinite, real_part(b, a));
  if (is_complex(a.type.dtype))
    finite = b.binary(BinaryOp::kAnd, finite, b.unary(UnaryOp::kIsFinite, b.unary(UnaryOp::kImag, a)));
  c.check_on_device(all_true(b, finite));
  DType complex_t = c.out(0).dtype;
  Values results = {b.constant(0, {complex_t, {count, n}})};
  if (vectors) results.push_back(b.constant(0, {complex_t, {count, n, n}}));
  Values start = {b.reshape(a, {count, n, n})};
  start.insert(start.end(), results.begin(), results.end());
  Values out = counted_loop(b, count, start, [&](Builder& lb, const Value& j, const Values& s) {
    auto [w, v] = Schur{lb, n, a.type.dtype}.eig(slice_at(lb, s[0], 0, j), complex_t, vectors);
    Value zero = lb.constant_int(0, kIndex);
    Values next = {s[0], lb.dynamic_update_slice(s[1], lb.reshape(w, {1, n}), {j, zero})};
    if (v) next.push_back(lb.dynamic_update_slice(s[2], lb.reshape(*v, {1, n, n}), {j, zero, zero}));
    return next;
  });
  Values r = {b.reshape(out[1], c.out(0).dims)};
  if (vectors) r.push_back(b.reshape(out[2], c.out(1).dims));
  return r;
}

LoweringOptions eig_options() {
  LoweringOptions o = checked("torch.linalg.eig: input tensor should not contain infs or NaNs.");
  o.device_check_runtime_error = true;
  o.meta = column_major_result(1);  // the eigenvectors (_linalg_eigvals has none)
  return o;
}

}  // namespace

TORCHTPU_LOWERINGS(eig) {
  register_lowering({"linalg_eig", "linalg_eig.out", "_linalg_eigvals"}, linalg_eig, eig_options());
}

}  // namespace torchtpu::aten
