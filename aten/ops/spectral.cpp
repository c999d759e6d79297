// FFTs: _fft_r2c, _fft_c2r, _fft_c2c over up to three dims, with PyTorch's normalization modes
// (0: none, 1: 1/sqrt(n), 2: 1/n). XLA's inverse transforms divide by n themselves; that is undone
// first so every mode means what PyTorch means.
#include <cmath>

#include "aten/lowering.h"
#include "aten/ops/lowering_util.h"

namespace torchtpu::aten {
namespace {

using hlo::Builder;

// Moves `dims` to the end (in order); returns the permutation and its inverse.
std::pair<std::vector<int64_t>, std::vector<int64_t>> dims_last(int64_t rank, std::vector<int64_t> dims) {
  for (int64_t& d : dims) d = d < 0 ? d + rank : d;
  std::vector<int64_t> perm;
  for (int64_t d = 0; d < rank; ++d)
    if (std::find(dims.begin(), dims.end(), d) == dims.end()) perm.push_back(d);
  perm.insert(perm.end(), dims.begin(), dims.end());
  std::vector<int64_t> inverse(rank);
  for (int64_t i = 0; i < rank; ++i) inverse[perm[i]] = i;
  return {perm, inverse};
}

Value scaled(Builder& b, const Value& v, double factor) {
  if (factor == 1) return v;
  Value k = b.constant(factor, v.type);
  return v * k;
}

double norm_factor(int64_t mode, double n) { return mode == 1 ? 1 / std::sqrt(n) : mode == 2 ? 1 / n : 1; }

std::vector<int64_t> lengths(const Value& x, size_t count) {
  return std::vector<int64_t>(x.type.dims.end() - count, x.type.dims.end());
}

double product(const std::vector<int64_t>& v) {
  double p = 1;
  for (int64_t x : v) p *= static_cast<double>(x);
  return p;
}

bool too_many_dims(const std::vector<c10::IValue>& args) { return args[1].toIntVector().size() > 3; }

Values r2c(LoweringContext& c) {  // (self, dim, normalization, onesided)
  auto [perm, inverse] = dims_last(c.input_uncast(0).type.rank(), c.int_list(1));
  Value x = c.b.transpose(c.input_uncast(0), perm);
  auto len = lengths(x, c.int_list(1).size());
  Value y;
  if (c.arg(3).toBool()) {
    y = c.b.fft(x, Builder::FftType::kRFFT, len);
  } else {
    Value zero = c.b.constant(0, x.type);
    y = c.b.fft(c.b.binary(hlo::BinaryOp::kComplex, x, zero), Builder::FftType::kFFT, len);
  }
  return {c.b.transpose(scaled(c.b, y, norm_factor(c.arg(2).toInt(), product(len))), inverse)};
}

Values c2c(LoweringContext& c) {  // (self, dim, normalization, forward)
  auto [perm, inverse] = dims_last(c.input_uncast(0).type.rank(), c.int_list(1));
  Value x = c.b.transpose(c.input_uncast(0), perm);
  auto len = lengths(x, c.int_list(1).size());
  bool forward = c.arg(3).toBool();
  Value y = c.b.fft(x, forward ? Builder::FftType::kFFT : Builder::FftType::kIFFT, len);
  double n = product(len);
  double factor = norm_factor(c.arg(2).toInt(), n) * (forward ? 1 : n);
  return {c.b.transpose(scaled(c.b, y, factor), inverse)};
}

Values c2r(LoweringContext& c) {  // (self, dim, normalization, last_dim_size)
  auto [perm, inverse] = dims_last(c.input_uncast(0).type.rank(), c.int_list(1));
  Value x = c.b.transpose(c.input_uncast(0), perm);
  auto len = lengths(x, c.int_list(1).size());
  len.back() = c.arg(3).toInt();
  // IRFFT reads len.back()/2 + 1 bins of the last dim.
  int64_t bins = len.back() / 2 + 1;
  if (x.type.dims.back() != bins) {
    std::vector<int64_t> start(x.type.rank(), 0), limit = x.type.dims, step(x.type.rank(), 1);
    limit.back() = std::min(bins, x.type.dims.back());
    x = c.b.slice(x, start, limit, step);
    if (limit.back() < bins) {
      std::vector<int64_t> low(x.type.rank(), 0), high(x.type.rank(), 0);
      high.back() = bins - limit.back();
      x = c.b.pad(x, c.b.constant(0, {x.type.dtype, {}}), low, high, std::vector<int64_t>(x.type.rank(), 0));
    }
  }
  Value y = c.b.fft(x, Builder::FftType::kIRFFT, len);
  double n = product(len);
  return {c.b.transpose(scaled(c.b, y, norm_factor(c.arg(2).toInt(), n) * n), inverse)};
}

}  // namespace

TORCHTPU_LOWERINGS(spectral) {
  register_lowering({"_fft_r2c", "_fft_r2c.out"}, r2c, {{}, nullptr, too_many_dims});
  register_lowering({"_fft_c2c", "_fft_c2c.out"}, c2c, {{}, nullptr, too_many_dims});
  register_lowering({"_fft_c2r", "_fft_c2r.out"}, c2r, {{}, nullptr, too_many_dims});
}

}  // namespace torchtpu::aten
