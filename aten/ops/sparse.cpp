// Sparse COO tensors on tpu. A sparse tensor is PyTorch's own SparseTensorImpl whose indices
// ([sparse_dim, nnz] int64) and values ([nnz, *dense_sizes]) are ordinary tpu tensors, so every
// kernel here is composed of device ops (sort, unique, index_add, index_put), as CUDA's are; the
// bookkeeping kernels (nnz, resize, clone, copy, empty) are PyTorch's device-generic ones. What this
// covers is what ordinary training needs: nn.Embedding/EmbeddingBag(sparse=True) gradients, their
// accumulation, the optimizers that take them (SGD, Adagrad, SparseAdam), to_sparse/to_dense,
// coalesce, sparse_mask and sparse @ dense.
#include <ATen/SparseTensorImpl.h>
#include <ATen/native/SparseTensorUtils.h>
#include <ATen/ops/_coalesced_native.h>
#include <ATen/ops/_indices_native.h>
#include <ATen/ops/_nnz_native.h>
#include <ATen/ops/_sparse_coo_tensor_with_dims_and_tensors.h>
#include <ATen/ops/_sparse_coo_tensor_with_dims_and_tensors_native.h>
#include <ATen/ops/_sparse_coo_tensor_with_dims_native.h>
#include <ATen/ops/_unique2.h>
#include <ATen/ops/_values_native.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/clone_native.h>
#include <ATen/ops/copy_sparse_to_sparse_native.h>
#include <ATen/ops/copy_native.h>
#include <ATen/ops/dense_dim_native.h>
#include <ATen/ops/empty_native.h>
#include <ATen/ops/indices_native.h>
#include <ATen/ops/is_coalesced_native.h>
#include <ATen/ops/resize_as_sparse_native.h>
#include <ATen/ops/result_type.h>
#include <ATen/ops/sparse_dim_native.h>
#include <ATen/ops/sparse_resize_and_clear_native.h>
#include <ATen/ops/sparse_resize_native.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/values_native.h>
#include <ATen/ops/add_native.h>
#include <ATen/ops/zero_native.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

namespace torchtpu::aten {
namespace {

using at::Tensor;

// A sparse tensor of `like`'s shape and split from new indices and values.
Tensor sparse_like(const Tensor& like, const Tensor& indices, const Tensor& values, bool coalesced) {
  Tensor out = at::_sparse_coo_tensor_with_dims_and_tensors(
      like.sparse_dim(), like.dense_dim(), like.sizes(), indices, values,
      values.options().layout(at::kSparse), coalesced);
  return out;
}

// The rows of `indices` as the index list of an index/index_put over the sparse dimensions.
c10::List<std::optional<Tensor>> index_list(const Tensor& indices) {
  c10::List<std::optional<Tensor>> list;
  for (int64_t d = 0; d < indices.size(0); ++d) list.push_back(indices[d]);
  return list;
}

// Each entry's position in the row-major order of the sparse dimensions: one int64 per entry.
Tensor linear_index(const Tensor& indices, at::IntArrayRef sparse_sizes) {
  Tensor linear = at::zeros({indices.size(1)}, indices.options());
  for (int64_t d = 0; d < indices.size(0); ++d) linear.mul_(sparse_sizes[d]).add_(indices[d]);
  return linear;
}

// The inverse of linear_index: [sparse_dim, n] coordinates.
Tensor coordinates(const Tensor& linear, at::IntArrayRef sparse_sizes) {
  std::vector<Tensor> rows(sparse_sizes.size());
  Tensor rest = linear;
  for (int64_t d = static_cast<int64_t>(sparse_sizes.size()) - 1; d >= 0; --d) {
    rows[d] = rest.remainder(sparse_sizes[d]);
    rest = rest.div(sparse_sizes[d], "floor");
  }
  return at::stack(rows);
}

// Duplicates summed, entries sorted by position (CPU's order): unique finds the distinct
// positions and each entry's slot on the device, reading back only how many there are.
Tensor coalesce(const Tensor& self) {
  Tensor indices = self._indices(), values = self._values();
  if (self._nnz() < 2) return sparse_like(self, indices.clone(), values.clone(), true);
  at::IntArrayRef sparse_sizes = self.sizes().slice(0, self.sparse_dim());
  auto [positions, slot, counts] = at::_unique2(linear_index(indices, sparse_sizes), true, true, false);
  std::vector<int64_t> summed_sizes = values.sizes().vec();
  summed_sizes[0] = positions.size(0);
  Tensor summed = at::zeros(summed_sizes, values.options()).index_add_(0, slot, values);
  return sparse_like(self, coordinates(positions, sparse_sizes), summed, true);
}

Tensor to_dense(const Tensor& self, std::optional<at::ScalarType> dtype, std::optional<bool> /*masked_grad*/) {
  Tensor values = self._values();
  Tensor dense = at::zeros(self.sizes(), values.options().dtype(dtype.value_or(self.scalar_type())));
  if (self._nnz() == 0) return dense;
  return dense.index_put_(index_list(self._indices()), values.to(dense.scalar_type()), true);
}

// CPU's dense_to_sparse: the positions over the first `sparse_dim` dimensions where any element
// is non-zero, in row-major order (nonzero's), with the slices there as values; coalesced.
Tensor dense_to_sparse_dim(const Tensor& self, int64_t sparse_dim) {
  TORCH_CHECK(sparse_dim > 0 || self.dim() == 0, "sparse_dim must be >0 if dimensionality > 0");
  TORCH_CHECK(sparse_dim <= self.dim(), "sparse_dim must be less than or equal to self.dim()");
  at::TensorOptions options = self.options().layout(at::kSparse);
  if (self.dim() == 0) {
    int64_t nnz = self.ne(0).item<bool>() ? 1 : 0;
    return at::_sparse_coo_tensor_with_dims_and_tensors(
        0, 0, {}, at::empty({0, nnz}, self.options().dtype(at::kLong)), self.reshape({1}).narrow(0, 0, nnz).clone(),
        options, true);
  }
  Tensor nonzero = self.ne(0);
  if (sparse_dim < self.dim()) nonzero = nonzero.flatten(sparse_dim).any(-1);
  Tensor indices = nonzero.nonzero().t().contiguous();
  Tensor values = self.index(index_list(indices));
  return at::_sparse_coo_tensor_with_dims_and_tensors(sparse_dim, self.dim() - sparse_dim, self.sizes(), indices,
                                                      values, options, true);
}

Tensor dense_to_sparse(const Tensor& self, std::optional<at::Layout> layout, at::OptionalIntArrayRef blocksize,
                       std::optional<int64_t> dense_dim) {
  TORCH_CHECK(!layout || *layout == at::kSparse,
              "to_sparse: only the sparse COO layout is supported on tpu, not ", *layout);
  TORCH_CHECK(!blocksize, "to_sparse: blocksize is for block-compressed layouts, not supported on tpu");
  return dense_to_sparse_dim(self, self.dim() - dense_dim.value_or(0));
}

// The values of dense `self` at `mask`'s positions, as a sparse tensor with mask's indices.
Tensor sparse_mask(const Tensor& self, const Tensor& mask) {
  TORCH_CHECK(!self.is_sparse(), "sparse_mask: a sparse self is not supported on tpu; call to_dense() first");
  TORCH_CHECK(self.sizes().equals(mask.sizes()), "sparse_mask(): operands have incompatible sizes; self has size ",
              self.sizes(), " but mask has size ", mask.sizes());
  Tensor indices = mask._indices().clone();
  Tensor values = mask._nnz() == 0
      ? at::empty({0}, self.options()).expand(mask._values().sizes()).contiguous()
      : self.index(index_list(indices));
  return sparse_like(mask, indices, values.contiguous(), mask.is_coalesced());
}

Tensor& set_sparse(Tensor& out, const Tensor& like, const Tensor& indices, const Tensor& values, bool coalesced) {
  at::sparse::get_sparse_impl(out)->resize_(like.sparse_dim(), like.dense_dim(), like.sizes());
  at::sparse::alias_into_sparse(out, indices, values);
  out._coalesced_(coalesced);
  return out;
}

// dense + alpha * sparse (dense out) or sparse + alpha * sparse (sparse out), with CPU's checks.
Tensor& add_out(const Tensor& self, const Tensor& other, const at::Scalar& alpha, Tensor& out) {
  TORCH_CHECK(self.sizes().equals(other.sizes()), "add: expected 'self' and 'other' to have same size, but self has size ",
              self.sizes(), " while other has size ", other.sizes());
  TORCH_CHECK(other.is_sparse(), "add(sparse, dense) is not supported. Use add(dense, sparse) instead.");
  at::ScalarType type = at::result_type(self, other);
  TORCH_CHECK(at::canCast(type, out.scalar_type()), "result type ", type, " can't be cast to the desired output type ",
              out.scalar_type());
  Tensor scaled = other._values().to(type).mul(alpha);
  if (!self.is_sparse()) {
    TORCH_CHECK(!out.is_sparse(), "add: a dense self and a sparse other give a dense result, not a sparse out");
    if (!out.is_same(self)) out.resize_(self.sizes()).copy_(self);
    if (other._nnz() == 0) return out;
    return out.index_put_(index_list(other._indices()), scaled.to(out.scalar_type()), true);
  }
  TORCH_CHECK(out.is_sparse(), "add: two sparse tensors give a sparse result, not a dense out");
  TORCH_CHECK(self.sparse_dim() == other.sparse_dim() && self.dense_dim() == other.dense_dim(),
              "add: sparse tensors of different sparse/dense splits");
  Tensor indices = at::cat({self._indices(), other._indices()}, 1);
  Tensor values = at::cat({self._values().to(type), scaled}, 0).to(out.scalar_type());
  bool coalesce_result = self.is_coalesced() && other.is_coalesced();  // CPU merges coalesced inputs
  Tensor sum = sparse_like(self, indices, values, false);
  if (coalesce_result) sum = coalesce(sum);
  return set_sparse(out, self, sum._indices(), sum._values(), coalesce_result);
}

// A sparse tensor times (or divided by) a number or 0-d tensor: its values scaled.
Tensor scale(const Tensor& self, const Tensor& factor, bool divide) {
  TORCH_CHECK(self.is_sparse() && !factor.is_sparse() && factor.dim() == 0,
              divide ? "div" : "mul", ": on tpu a sparse tensor can only be scaled by a number or a 0-d tensor");
  Tensor values = divide ? self._values().div(factor) : self._values().mul(factor);
  return sparse_like(self, self._indices().clone(), values, self.is_coalesced());
}
Tensor mul(const Tensor& self, const Tensor& other) {
  return self.is_sparse() ? scale(self, other, false) : scale(other, self, false);
}
Tensor& mul_(Tensor& self, const Tensor& other) {
  Tensor product = scale(self, other, false);
  return set_sparse(self, self, product._indices(), product._values().to(self.scalar_type()), self.is_coalesced());
}
Tensor div(const Tensor& self, const Tensor& other) { return scale(self, other, true); }
Tensor& div_(Tensor& self, const Tensor& other) {
  Tensor quotient = scale(self, other, true);
  return set_sparse(self, self, quotient._indices(), quotient._values().to(self.scalar_type()), self.is_coalesced());
}

// 2-d sparse [n, k] @ dense [k, m]: each entry adds value * dense's row to its output row.
Tensor sparse_dense_mm(const Tensor& sparse, const Tensor& dense) {
  TORCH_CHECK(sparse.is_sparse() && !dense.is_sparse(), "mm on tpu: only sparse @ dense is supported");
  TORCH_CHECK(sparse.sparse_dim() == 2 && sparse.dense_dim() == 0 && dense.dim() == 2,
              "mm: expected a 2-D sparse matrix and a 2-D dense matrix, got ", sparse.sizes(), " and ", dense.sizes());
  TORCH_CHECK(sparse.size(1) == dense.size(0), "mat1 and mat2 shapes cannot be multiplied (", sparse.size(0), "x",
              sparse.size(1), " and ", dense.size(0), "x", dense.size(1), ")");
  Tensor out = at::zeros({sparse.size(0), dense.size(1)}, dense.options().dtype(at::result_type(sparse, dense)));
  if (sparse._nnz() == 0) return out;
  Tensor indices = sparse._indices();
  Tensor rows = dense.index_select(0, indices[1]).to(out.scalar_type());
  return out.index_add_(0, indices[0], rows.mul_(sparse._values().to(out.scalar_type()).unsqueeze(1)));
}

Tensor addmm(const Tensor& self, const Tensor& sparse, const Tensor& dense, const at::Scalar& beta,
             const at::Scalar& alpha) {
  Tensor product = sparse_dense_mm(sparse, dense).mul_(alpha);
  if (beta.toComplexDouble() == 0.0) return product.expand(self.sizes()).contiguous();  // beta 0 ignores self
  return product.add_(self.mul(beta));
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, SparsePrivateUse1, m) {
  // PyTorch's device-generic bookkeeping.
  m.impl("_sparse_coo_tensor_with_dims_and_tensors", at::native::new_with_dims_and_tensor_sparse_symint);
  m.impl("_sparse_coo_tensor_with_dims", at::native::new_with_dims_sparse);
  m.impl("empty.memory_format", at::native::empty_sparse_symint);
  m.impl("_indices", at::native::_indices_sparse);
  m.impl("_values", at::native::_values_sparse);
  m.impl("indices", at::native::indices_sparse);
  m.impl("values", at::native::values_sparse);
  m.impl("sparse_dim", at::native::sparse_dim_sparse);
  m.impl("dense_dim", at::native::dense_dim_sparse);
  m.impl("_dimI", at::native::sparse_dim_sparse);
  m.impl("_dimV", at::native::dense_dim_sparse);
  m.impl("_nnz", at::native::_nnz_sparse);
  m.impl("is_coalesced", at::native::is_coalesced_sparse);
  m.impl("_coalesced_", at::native::_coalesced_sparse_);
  m.impl("sparse_resize_", at::native::sparse_resize_);
  m.impl("sparse_resize_and_clear_", at::native::sparse_resize_and_clear_);
  m.impl("resize_as_sparse_", at::native::resize_as_sparse_);
  m.impl("zero_", at::native::zero_sparse_);
  m.impl("clone", at::native::clone_sparse);
  m.impl("copy_", at::native::copy_sparse_wrapper_);
  m.impl("copy_sparse_to_sparse_", at::native::copy_sparse_);
  // Arithmetic, composed of device ops.
  m.impl("_coalesce", coalesce);
  m.impl("_to_dense", to_dense);
  m.impl("sparse_mask", sparse_mask);
  m.impl("add.Tensor", at::native::add_sparse);
  m.impl("add_.Tensor", at::native::add_sparse_);
  m.impl("add.out", add_out);
  m.impl("mul.Tensor", mul);
  m.impl("mul_.Tensor", mul_);
  m.impl("div.Tensor", div);
  m.impl("div_.Tensor", div_);
  m.impl("mm", sparse_dense_mm);
  m.impl("addmm", addmm);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_to_sparse.sparse_dim", dense_to_sparse_dim);
  m.impl("_to_sparse", dense_to_sparse);
}

}  // namespace torchtpu::aten
