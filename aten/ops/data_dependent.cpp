// Ops whose output size depends on the data: unique, unique_consecutive, masked_select. As on
// CUDA, they are composed of device ops (sort, compare, cumsum, scatter) with one host read, the
// output size; nonzero (indexing.cpp) works the same way.
#include <ATen/ExpandUtils.h>
#include <ATen/Operators.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/ops/cumsum.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/index.h>
#include <ATen/ops/ne.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/ones_like.h>
#include <ATen/ops/sort.h>
#include <ATen/ops/unique_consecutive.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include "aten/lowering.h"

namespace torchtpu::aten {
namespace {

using Unique = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

// Runs of equal values in `values` (1-D): their ids (0, 0, 1, 2, 2, ...) and how many there are.
std::pair<at::Tensor, int64_t> runs_of(const at::Tensor& values) {
  int64_t n = values.numel();
  at::Tensor starts = at::ones({n}, values.options().dtype(at::kBool));
  if (n > 1) starts.slice(0, 1).copy_(at::ne(values.slice(0, 1), values.slice(0, 0, n - 1)));
  at::Tensor run = at::cumsum(starts, 0).sub_(1);
  return {run, run[n - 1].item<int64_t>() + 1};  // the one host read
}

// Values, inverse (the run of each element in `order`'s positions) and counts of the runs.
Unique collect_runs(const at::Tensor& self, const at::Tensor& values, const at::Tensor& order,
                    bool return_inverse, bool return_counts) {
  auto long_options = self.options().dtype(at::kLong);
  if (values.numel() == 0)
    return {at::empty({0}, self.options()), at::empty(return_inverse ? self.sizes() : at::IntArrayRef{0}, long_options),
            at::empty({0}, long_options)};
  auto [run, count] = runs_of(values);
  at::Tensor unique = at::empty({count}, self.options()).scatter_(0, run, values);
  at::Tensor inverse = at::empty({0}, long_options), counts = at::empty({0}, long_options);
  if (return_inverse)
    inverse = (order.defined() ? at::empty_like(run).scatter_(0, order, run) : run).view(self.sizes());
  if (return_counts) counts = at::zeros({count}, long_options).scatter_add_(0, run, at::ones_like(run));
  return {unique, inverse, counts};
}

// torch.unique: always sorted, as on CUDA (CPU's sorted=False order is unspecified anyway).
Unique unique2(const at::Tensor& self, bool sorted, bool return_inverse, bool return_counts) {
  at::Tensor flat = self.reshape({-1});
  if (flat.numel() == 0) return collect_runs(self, flat, at::Tensor(), return_inverse, return_counts);
  auto [values, order] = at::sort(flat, /*stable=*/true, 0, false);
  return collect_runs(self, values, order, return_inverse, return_counts);
}

// The older torch.unique entry (autograd formulas call it, e.g. index_fill's backward): _unique2
// without counts.
std::tuple<at::Tensor, at::Tensor> unique(const at::Tensor& self, bool sorted, bool return_inverse) {
  auto [values, inverse, counts] = unique2(self, sorted, return_inverse, false);
  return {values, inverse};
}

Unique unique_consecutive(const at::Tensor& self, bool return_inverse, bool return_counts,
                          std::optional<int64_t> dim) {
  if (dim.has_value())  // runs of slices along a dimension: not lowered yet
    return at::native::call_fallback_fn<&cpu_fallback, ATEN_OP(unique_consecutive)>::call(
        self, return_inverse, return_counts, dim);
  return collect_runs(self, self.reshape({-1}), at::Tensor(), return_inverse, return_counts);
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

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_unique", unique);
  m.impl("_unique2", unique2);
  m.impl("unique_consecutive", unique_consecutive);
  m.impl("masked_select", masked_select);
}

}  // namespace torchtpu::aten
