// Ops whose output size depends on the data: unique (of elements or of slices), unique_consecutive,
// masked_select, repeat_interleave, bincount, lstsq's residuals; and equal and the Transformer's left-aligned-mask test, whose answers are read
// back. As on CUDA, they are composed of device ops (sort, compare, cumsum, scatter) with one host
// read, the output size or the answer; nonzero (indexing.cpp) works the same way.
#include <algorithm>
#include <limits>

#include <ATen/ExpandUtils.h>
#include <ATen/ops/cumsum.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/eq.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/index.h>
#include <ATen/ops/ne.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/linalg_svdvals.h>
#include <ATen/ops/linalg_pinv.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/ones_like.h>
#include <ATen/ops/searchsorted.h>
#include <ATen/ops/sort.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/unique_consecutive.h>
#include <ATen/ops/unique_dim.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>


namespace torchtpu::aten {
namespace {

using Unique = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

// Runs of equal rows in `rows` ([n, k], n > 0): their ids (0, 0, 1, 2, 2, ...) and how many.
std::pair<at::Tensor, int64_t> runs_of(const at::Tensor& rows) {
  int64_t n = rows.size(0);
  at::Tensor starts = at::ones({n}, rows.options().dtype(at::kBool));
  if (n > 1) starts.slice(0, 1).copy_(at::ne(rows.slice(0, 1), rows.slice(0, 0, n - 1)).any(1));
  at::Tensor run = at::cumsum(starts, 0).sub_(1);
  return {run, run[n - 1].item<int64_t>() + 1};  // the one host read
}

// The distinct rows of `rows` ([n, k], equal rows adjacent) as [count, k], the run of each row
// in `order`'s positions (the inverse, [n]) and the length of each run.
Unique collect_runs(const at::Tensor& rows, const at::Tensor& order, bool return_inverse, bool return_counts) {
  auto long_options = rows.options().dtype(at::kLong);
  at::Tensor inverse = at::empty({0}, long_options), counts = at::empty({0}, long_options);
  if (rows.size(0) == 0) return {rows, return_inverse ? at::empty({0}, long_options) : inverse, counts};
  auto [run, count] = runs_of(rows);
  at::Tensor unique = at::empty({count, rows.size(1)}, rows.options()).index_copy_(0, run, rows);
  if (return_inverse) inverse = order.defined() ? at::empty_like(run).scatter_(0, order, run) : run;
  if (return_counts) counts = at::zeros({count}, long_options).scatter_add_(0, run, at::ones_like(run));
  return {unique, inverse, counts};
}

// Flattened: the unique values as 1-D, the inverse in self's shape.
Unique collect_flat(const at::Tensor& self, const at::Tensor& values, const at::Tensor& order,
                    bool return_inverse, bool return_counts) {
  auto [unique, inverse, counts] = collect_runs(values.reshape({-1, 1}), order, return_inverse, return_counts);
  return {unique.reshape({-1}), return_inverse ? inverse.view(self.sizes()) : inverse, counts};
}

// The slices of `self` along `dim` as rows [n, k] (k: the product of the other sizes).
at::Tensor slices_as_rows(const at::Tensor& self, int64_t dim) {
  return self.movedim(dim, 0).reshape({self.size(dim), -1});
}

// Unique rows back in self's layout: [count, k] -> count slices along dim.
at::Tensor rows_as_slices(const at::Tensor& self, const at::Tensor& rows, int64_t dim) {
  std::vector<int64_t> sizes = self.movedim(dim, 0).sizes().vec();
  sizes[0] = rows.size(0);
  return rows.reshape(sizes).movedim(0, dim);
}

// The order that sorts rows ([n, k]) lexicographically: stable sorts by each column, last first.
at::Tensor lexicographic_order(const at::Tensor& rows) {
  at::Tensor order = at::arange(rows.size(0), rows.options().dtype(at::kLong));
  for (int64_t col = rows.size(1) - 1; col >= 0; --col) {
    at::Tensor keys = rows.select(1, col).index_select(0, order);
    order = order.index_select(0, std::get<1>(at::sort(keys, /*stable=*/true, 0, false)));
  }
  return order;
}

// torch.unique: always sorted, as on CUDA (CPU's sorted=False order is unspecified anyway).
Unique unique2(const at::Tensor& self, bool sorted, bool return_inverse, bool return_counts) {
  at::Tensor flat = self.reshape({-1});
  if (flat.numel() == 0) return collect_flat(self, flat, at::Tensor(), return_inverse, return_counts);
  auto [values, order] = at::sort(flat, /*stable=*/true, 0, false);
  return collect_flat(self, values, order, return_inverse, return_counts);
}

// The older torch.unique entry (autograd formulas call it, e.g. index_fill's backward): _unique2
// without counts.
std::tuple<at::Tensor, at::Tensor> unique(const at::Tensor& self, bool sorted, bool return_inverse) {
  auto [values, inverse, counts] = unique2(self, sorted, return_inverse, false);
  return {values, inverse};
}

// unique by slices of an empty tensor, as CPU: itself, if only one of its sizes is 0.
Unique unique_of_empty(const at::Tensor& self) {
  auto sizes = self.sizes();
  TORCH_CHECK(std::count(sizes.begin(), sizes.end(), 0) == 1,
              "Number of zero sized dimensions is more than one, so unique cannot be applied ");
  auto long_options = self.options().dtype(at::kLong);
  return {at::empty(sizes, self.options()), at::empty({0}, long_options), at::empty({0}, long_options)};
}

// torch.unique(dim=d): the distinct slices along d, sorted lexicographically.
Unique unique_dim(const at::Tensor& self, int64_t dim, bool sorted, bool return_inverse, bool return_counts) {
  dim = c10::maybe_wrap_dim(dim, self.dim());
  if (self.numel() == 0) return unique_of_empty(self);
  at::Tensor rows = slices_as_rows(self, dim);
  at::Tensor order = lexicographic_order(rows);
  auto [unique, inverse, counts] = collect_runs(rows.index_select(0, order), order, return_inverse, return_counts);
  return {rows_as_slices(self, unique, dim), inverse, counts};
}

Unique unique_consecutive(const at::Tensor& self, bool return_inverse, bool return_counts,
                          std::optional<int64_t> dim) {
  if (!dim.has_value()) return collect_flat(self, self.reshape({-1}), at::Tensor(), return_inverse, return_counts);
  int64_t d = c10::maybe_wrap_dim(*dim, self.dim());
  if (self.numel() == 0) return unique_of_empty(self);
  auto [unique, inverse, counts] = collect_runs(slices_as_rows(self, d), at::Tensor(), return_inverse, return_counts);
  return {rows_as_slices(self, unique, d), inverse, counts};
}

// The elements where the (broadcast) mask is true: boolean indexing, which finds the true
// positions on the device.
at::Tensor masked_select(const at::Tensor& self, const at::Tensor& mask) {
  TORCH_CHECK(mask.scalar_type() == at::kBool, "masked_select: expected BoolTensor for mask");
  std::vector<int64_t> shape = at::infer_size(self.sizes(), mask.sizes());
  if (shape.empty()) shape = {1};  // 0-d: a mask needs a dimension to select along
  c10::List<std::optional<at::Tensor>> indices;
  indices.push_back(mask.expand(shape));
  return at::index(self.expand(shape), indices);
}

// torch.equal: same sizes and every element equal (after promotion; NaN is never equal), compared
// on the device with one host read of the answer.
bool equal_on_device(const at::Tensor& self, const at::Tensor& other) {
  TORCH_CHECK(self.device() == other.device(), "Cannot compare two tensors on different devices. Got: ",
              self.device(), " and ", other.device());
  if (!self.sizes().equals(other.sizes())) return false;
  if (self.numel() == 0) return true;
  return at::eq(self, other).all().item<bool>();
}

// nn.TransformerEncoder's fast path (eval mode, padding mask) asks whether every row of the
// [batch, length] mask of kept positions is a run of trues followed by falses.
bool mask_left_aligned(const at::Tensor& t, const at::Tensor& mask) {
  TORCH_CHECK(mask.scalar_type() == at::kBool, "Expected mask to be of type bool");
  TORCH_CHECK(mask.dim() == 2, "Padding mask should be 2D");
  at::Tensor lengths = mask.sum(1, /*keepdim=*/true);
  return equal_on_device(mask, at::arange(mask.size(1), lengths.options()).lt(lengths));
}

// repeat_interleave(repeats, output_size): i repeated repeats[i] times, position j taking the
// first i whose cumulative count exceeds j. Without output_size, its sum (and the smallest
// repeat, which must not be negative) are the one host read.
at::Tensor repeat_interleave(const at::Tensor& repeats, std::optional<c10::SymInt> output_size) {
  TORCH_CHECK(repeats.dim() == 1, "repeat_interleave only accept 1D vector as repeat");
  TORCH_CHECK(repeats.scalar_type() == at::kLong || repeats.scalar_type() == at::kInt,
              "repeats has to be Long or Int tensor");
  int64_t total = 0;
  if (output_size) {
    total = output_size->expect_int();
  } else if (repeats.numel() > 0) {
    at::Tensor read = at::stack({repeats.sum(), repeats.min().to(at::kLong)}).cpu();  // sum of int32 is int64
    TORCH_CHECK(read[1].item<int64_t>() >= 0, "repeats can not be negative");
    total = read[0].item<int64_t>();
  }
  at::Tensor ends = at::cumsum(repeats, 0, at::kLong);
  at::Tensor positions = at::arange(total, repeats.options().dtype(at::kLong));
  return at::searchsorted(ends, positions, repeats.scalar_type() == at::kInt, /*right=*/true);
}

// linalg_lstsq.out(A, B, rcond, driver): the minimum-norm least-squares solution through the SVD
// (pinv(A) B with singular values below rcond * the largest dropped), as every CPU driver gives it
// for the matrices it accepts. Which other outputs exist follows CPU: `rank` for all drivers but
// gels, `singular_values` for gelsd/gelss, `residuals` (squared column norms of A X - B) for a tall
// A with gels, or with gelsd/gelss when every matrix has full rank: for those, that rank test is
// the one host read.
std::tuple<at::Tensor&, at::Tensor&, at::Tensor&, at::Tensor&> linalg_lstsq_out(
    const at::Tensor& a, const at::Tensor& b, std::optional<double> rcond, std::optional<c10::string_view> driver_name,
    at::Tensor& solution, at::Tensor& residuals, at::Tensor& rank, at::Tensor& singular_values) {
  std::string driver = driver_name ? std::string(*driver_name) : "gelsy";
  TORCH_CHECK(driver == "gels" || driver == "gelsy" || driver == "gelsd" || driver == "gelss",
              "torch.linalg.lstsq: parameter `driver` should be one of (gels, gelsy, gelsd, gelss)");
  TORCH_CHECK(a.dim() >= 2, "torch.linalg.lstsq: input must have at least 2 dimensions.");
  bool vector = b.dim() == a.dim() - 1;
  at::Tensor rhs = vector ? b.unsqueeze(-1) : b;
  TORCH_CHECK(a.size(-2) == rhs.size(-2), "torch.linalg.lstsq: input.size(-2) should match other.size(-2)");
  int64_t m = a.size(-2), n = a.size(-1);
  bool in_double = c10::toRealValueType(a.scalar_type()) == at::kDouble;
  double eps = in_double ? std::numeric_limits<double>::epsilon() : std::numeric_limits<float>::epsilon();
  double tolerance = rcond && *rcond > 0 ? *rcond : eps * static_cast<double>(std::max(m, n));
  at::Tensor sigma = at::linalg_svdvals(a);
  at::Tensor x = at::matmul(at::linalg_pinv(a, std::nullopt, tolerance), rhs);
  at::Tensor solved = vector ? x.squeeze(-1) : x;
  solution.resize_(solved.sizes()).copy_(solved);
  at::Tensor ranks;
  if (driver != "gels") {
    at::Tensor largest = sigma.numel() ? std::get<0>(sigma.max(-1, true)) : sigma;
    ranks = sigma.numel() ? sigma.gt(largest.mul(tolerance)).sum(-1) : at::zeros(a.sizes().slice(0, a.dim() - 2), sigma.options().dtype(at::kLong));
    rank.resize_(ranks.sizes()).copy_(ranks);
  } else {
    rank.resize_({0});
  }
  if (driver == "gelsd" || driver == "gelss") {
    singular_values.resize_(sigma.sizes()).copy_(sigma);
  } else {
    singular_values.resize_({0});
  }
  bool with_residuals = m > n && (driver == "gels" || ((driver == "gelsd" || driver == "gelss") &&
                                                       (ranks.numel() == 0 || ranks.eq(n).all().item<bool>())));
  if (with_residuals) {
    at::Tensor r = at::matmul(a, x).sub(rhs).abs().pow(2).sum(-2);
    residuals.resize_(r.sizes()).copy_(r);
  } else {
    residuals.resize_({0});
  }
  return {solution, residuals, rank, singular_values};
}

}  // namespace

// bincount(self, weights?, minlength): how often each value occurs (or its summed weights),
// accumulated on the device; the smallest and largest values are the host read (the size, and
// CPU's check for negative values).
at::Tensor bincount(const at::Tensor& self, const std::optional<at::Tensor>& weights, int64_t minlength) {
  TORCH_CHECK(minlength >= 0, "minlength should be >= 0");
  TORCH_CHECK(self.dim() == 1 && at::isIntegralType(self.scalar_type(), /*includeBool=*/false),
              "bincount only supports 1-d non-negative integral inputs.");
  bool weighted = weights && weights->defined();
  TORCH_CHECK(!weighted || (weights->dim() == 1 && weights->size(0) == self.size(0)),
              "weights should be 1-d and have the same length as input");
  int64_t size = minlength;
  if (self.numel() > 0) {
    at::Tensor ends = at::stack({self.min(), self.max()}).cpu();
    TORCH_CHECK(ends[0].item<int64_t>() >= 0, "bincount only supports 1-d non-negative integral inputs.");
    size = std::max(size, ends[1].item<int64_t>() + 1);
  }
  // Float weights count in float, other weights in double, none in int64 (CPU's dtypes).
  at::ScalarType dtype = !weighted ? at::kLong : weights->scalar_type() == at::kFloat ? at::kFloat : at::kDouble;
  at::Tensor counts = at::zeros({size}, self.options().dtype(dtype));
  if (self.numel() == 0) return counts;
  return counts.index_add_(0, self, weighted ? weights->to(dtype) : at::ones_like(self, counts.options()));
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("bincount", bincount);
  m.impl("_unique", unique);
  m.impl("_unique2", unique2);
  m.impl("unique_dim", unique_dim);
  m.impl("unique_consecutive", unique_consecutive);
  m.impl("masked_select", masked_select);
  m.impl("repeat_interleave.Tensor", repeat_interleave);
  m.impl("linalg_lstsq.out", linalg_lstsq_out);
  m.impl("equal", equal_on_device);
  m.impl("_nested_tensor_from_mask_left_aligned", mask_left_aligned);
}

}  // namespace torchtpu::aten
