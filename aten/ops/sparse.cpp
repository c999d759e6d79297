// Sparse COO tensors on tpu. A sparse tensor is PyTorch's own SparseTensorImpl whose indices
// ([sparse_dim, nnz] int64) and values ([nnz, *dense_sizes]) are ordinary tpu tensors. Most sparse
// kernels of PyTorch are device-generic (one function serves SparseCPU and SparseCUDA, composed of
// other ops, so it never touches host memory): tpu runs those same kernels. The few that PyTorch
// writes per device (coalesce, add, mul, matmuls, index_select, softmax) are composed here of
// device ops (unique, index_add, index_put, searchsorted), as CUDA's are of CUDA kernels; so is
// to_sparse of a dense tensor. Enough for ordinary training: nn.Embedding/EmbeddingBag(sparse=True)
// gradients, their accumulation, and the optimizers that take them (SGD, Adagrad, SparseAdam).
#include <ATen/SparseTensorImpl.h>
#include <ATen/native/SparseTensorUtils.h>
#include <ATen/ops/_sparse_coo_tensor_with_dims_and_tensors.h>
#include <ATen/ops/_unique2.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/nonzero.h>
#include <ATen/ops/repeat_interleave.h>
#include <ATen/ops/result_type.h>
#include <ATen/ops/searchsorted.h>
#include <ATen/ops/sort.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <torch/library.h>

namespace torchtpu::aten {
namespace {

using at::Tensor;

// A sparse tensor of `like`'s shape and split from new indices and values.
Tensor sparse_like(const Tensor& like, const Tensor& indices, const Tensor& values, bool coalesced) {
  return at::_sparse_coo_tensor_with_dims_and_tensors(like.sparse_dim(), like.dense_dim(), like.sizes(), indices,
                                                      values, values.options().layout(at::kSparse), coalesced);
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

// The sizes of a sparse tensor's sparse dimensions.
at::IntArrayRef sparse_sizes_of(const Tensor& sparse) { return sparse.sizes().slice(0, sparse.sparse_dim()); }

// Each of a sparse tensor's entries as its linear position.
Tensor positions_of(const Tensor& sparse) { return linear_index(sparse._indices(), sparse_sizes_of(sparse)); }

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

// Where each of `wanted`'s positions sits among the sorted, distinct `positions` (clamped into
// range), and whether it is there.
std::pair<Tensor, Tensor> look_up(const Tensor& positions, const Tensor& wanted) {
  Tensor slot = at::searchsorted(positions, wanted).clamp_max_(positions.numel() - 1);
  return {slot, positions.index_select(0, slot).eq(wanted)};
}

// Every (query, key) pair with equal values, `keys` sorted: for each query in turn, its run of
// keys in order (searchsorted finds each run; repeat_interleave's one host read sizes the result).
// Returns each pair's query and its key's place in `keys`.
std::pair<Tensor, Tensor> equal_pairs(const Tensor& keys, const Tensor& queries) {
  Tensor first = at::searchsorted(keys, queries), runs = at::searchsorted(keys, queries, false, true).sub_(first);
  Tensor query = at::repeat_interleave(at::arange(queries.numel(), queries.options()), runs);
  Tensor starts = runs.cumsum(0).sub_(runs);
  Tensor within = at::arange(query.numel(), queries.options()).sub_(starts.index_select(0, query));
  return {query, first.index_select(0, query).add_(within)};
}

// Duplicates summed, entries sorted by position (CPU's order): unique finds the distinct
// positions and each entry's slot on the device, reading back only how many there are.
Tensor coalesce(const Tensor& self) {
  Tensor indices = self._indices(), values = self._values();
  if (self._nnz() < 2) return sparse_like(self, indices.clone(), values.clone(), true);
  auto [positions, slot, counts] = at::_unique2(positions_of(self), true, true, false);
  std::vector<int64_t> summed_sizes = values.sizes().vec();
  summed_sizes[0] = positions.size(0);
  Tensor summed = at::zeros(summed_sizes, values.options()).index_add_(0, slot, values);
  return sparse_like(self, coordinates(positions, sparse_sizes_of(self)), summed, true);
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

// The entries of `a` and `b` (coalesced, same shape) at positions both hold: a's positions are
// looked up among b's (both sorted), reading back only how many match.
Tensor& mul_sparse_sparse(const Tensor& a, const Tensor& b, at::ScalarType type, Tensor& out) {
  if (a._nnz() == 0 || b._nnz() == 0) {
    Tensor none = a._values().narrow(0, 0, 0).to(out.scalar_type());
    return set_sparse(out, a, a._indices().narrow(1, 0, 0).clone(), none, true);
  }
  auto [slot, found] = look_up(positions_of(b), positions_of(a));
  Tensor both = at::nonzero(found).squeeze(1);
  Tensor values = a._values().index_select(0, both).to(type).mul(b._values().index_select(0, slot.index_select(0, both)));
  return set_sparse(out, a, a._indices().index_select(1, both), values.to(out.scalar_type()), true);
}

// mul with a sparse operand: by a number or 0-d tensor (the values scaled), by a dense tensor of
// the same shape (its elements at the sparse positions) or by a sparse one (where both hold).
Tensor& mul_out(const Tensor& self, const Tensor& other, Tensor& out) {
  at::ScalarType type = at::result_type(self, other);
  const Tensor& sparse = self.is_sparse() ? self : other;
  const Tensor& factor = self.is_sparse() ? other : self;
  TORCH_CHECK(out.is_sparse(), "mul: a product with a sparse operand is sparse, not a dense out");
  if (factor.is_sparse()) {
    TORCH_CHECK(self.sizes().equals(other.sizes()), "mul: sparse tensors of different sizes ", self.sizes(), " and ",
                other.sizes(), " (broadcasting is not supported on tpu)");
    return mul_sparse_sparse(self.coalesce(), other.coalesce(), type, out);
  }
  Tensor values = sparse._values().to(type);
  if (factor.dim() == 0) {
    values = values.mul(factor);
  } else {
    TORCH_CHECK(factor.sizes().equals(sparse.sizes()), "mul: a dense tensor of size ", factor.sizes(),
                " and a sparse one of size ", sparse.sizes(), " (broadcasting is not supported on tpu)");
    values = sparse._nnz() == 0 ? values : values.mul(factor.index(index_list(sparse._indices())));
  }
  return set_sparse(out, sparse, sparse._indices().clone(), values.to(out.scalar_type()), sparse.is_coalesced());
}

// `values` ([n, *dense]) scaled row by row by `factor` ([n]).
Tensor scale_rows(const Tensor& values, const Tensor& factor) {
  std::vector<int64_t> shape(values.dim(), 1);
  shape[0] = values.size(0);
  return values.mul(factor.to(values.scalar_type()).view(shape));
}

// The values of `self` (dense, or sparse: its duplicates summed) at `mask`'s positions, 0 where
// self has none, with mask's indices (CPU's sparse_mask; autograd's gradients of sparse
// constructions and of to_dense go through it).
Tensor sparse_mask(const Tensor& self, const Tensor& mask) {
  TORCH_CHECK(self.sizes().equals(mask.sizes()), "sparse_mask(): operands have incompatible sizes; self has size ",
              self.sizes(), " but mask has size ", mask.sizes());
  Tensor indices = mask._indices().clone();
  if (mask._nnz() == 0) return sparse_like(mask, indices, mask._values().to(self.scalar_type()), mask.is_coalesced());
  if (!self.is_sparse()) return sparse_like(mask, indices, self.index(index_list(indices)), mask.is_coalesced());
  Tensor held = self.coalesce();
  Tensor values = at::zeros_like(mask._values(), held._values().options());
  if (held._nnz() > 0) {
    auto [slot, found] = look_up(positions_of(held), positions_of(mask));
    values = scale_rows(held._values().index_select(0, slot), found);
  }
  return sparse_like(mask, indices, values, mask.is_coalesced());
}

// self's entries (indices kept) times how many of `mask`'s entries share their position
// (accumulate_matches), or times whether any does: autograd's projection of a gradient onto a
// sparse input.
Tensor sparse_mask_projection(const Tensor& self, const Tensor& mask, bool accumulate_matches) {
  TORCH_CHECK(mask.sizes().equals(self.sizes()), "_sparse_mask_projection(): operands have incompatible sizes; self has size ",
              self.sizes(), " but mask has size ", mask.sizes());
  if (self._nnz() == 0 || mask._nnz() == 0)
    return sparse_like(self, self._indices().narrow(1, 0, 0).clone(), self._values().narrow(0, 0, 0).clone(), true);
  Tensor masked = std::get<0>(at::sort(positions_of(mask)));
  Tensor positions = positions_of(self);
  Tensor matches = at::searchsorted(masked, positions, false, true).sub_(at::searchsorted(masked, positions));
  Tensor factor = accumulate_matches ? matches : matches.gt(0);
  return sparse_like(self, self._indices().clone(), scale_rows(self._values(), factor), self.is_coalesced());
}

// CPU's order: for each position of `index` in turn, the entries at that coordinate in their
// original order (the entries sorted by coordinate once, stably).
Tensor index_select(const Tensor& self, int64_t dim, const Tensor& index_) {
  dim = c10::maybe_wrap_dim(dim, self.dim());
  TORCH_CHECK(index_.dim() <= 1 && !c10::isFloatingType(index_.scalar_type()) && index_.scalar_type() != at::kBool,
              "index_select(): Index is supposed to be a vector of integers");
  Tensor index = index_.reshape({-1}).to(self._indices().device(), at::kLong);
  int64_t size = self.size(dim), count = index.numel();
  if (count > 0 && index.lt(0).logical_or(index.ge(size)).any().item<bool>()) {
    int64_t bad = index.masked_select(index.lt(0).logical_or(index.ge(size)))[0].item<int64_t>();
    TORCH_CHECK_INDEX(false, "index_select(): index contains ", bad, " that is out of range for tensor of size ",
                      self.sizes(), " at dimension ", dim);
  }
  std::vector<int64_t> sizes = self.sizes().vec();
  sizes[dim] = count;
  auto make = [&](const Tensor& indices, const Tensor& values, bool coalesced) {  // as CPU: only when < 2 entries
    return at::_sparse_coo_tensor_with_dims_and_tensors(self.sparse_dim(), self.dense_dim(), sizes, indices, values,
                                                        values.options().layout(at::kSparse), coalesced);
  };
  if (dim >= self.sparse_dim())
    return make(self._indices().clone(), self._values().index_select(dim - self.sparse_dim() + 1, index),
                self._nnz() < 2);
  auto [sorted, order] = at::sort(self._indices()[dim], /*stable=*/true, 0, false);
  auto [position, place] = equal_pairs(sorted, index);
  Tensor entry = order.index_select(0, place);
  Tensor indices = self._indices().index_select(1, entry);
  indices[dim].copy_(position);
  return make(indices, self._values().index_select(0, entry), position.numel() < 2);
}

// Softmax over the specified entries along `dim` (unspecified ones count as -inf): entries that
// differ only in `dim` form a group (unique of the other coordinates, one host read), reduced
// with scatter_reduce/index_add; along a dense dimension it is the values' own softmax.
struct Groups {
  Tensor of_entry;  // [nnz] the group of each entry
  int64_t count;
};
Groups groups_along(const Tensor& coalesced, int64_t dim) {
  Tensor others = coalesced._indices().clone();
  others[dim].zero_();
  auto [unique, of_entry, counts] = at::_unique2(linear_index(others, sparse_sizes_of(coalesced)), false, true, false);
  return {of_entry, unique.size(0)};
}

Tensor per_group(const Tensor& values, const Groups& g, const char* reduce) {
  std::vector<int64_t> shape = values.sizes().vec();
  shape[0] = g.count;
  std::vector<int64_t> spread(values.dim(), 1);
  spread[0] = values.size(0);
  Tensor where = g.of_entry.view(spread).expand(values.sizes());
  Tensor start = at::zeros(shape, values.options());
  return start.scatter_reduce_(0, where, values, reduce, /*include_self=*/false).index_select(0, g.of_entry);
}

Tensor sparse_softmax_values(const Tensor& values, const Groups& g, bool log) {
  Tensor shifted = values.sub(per_group(values, g, "amax"));
  Tensor total = per_group(shifted.exp(), g, "sum");
  return log ? shifted.sub_(total.log()) : shifted.exp().div_(total);
}

Tensor sparse_softmax_impl(const Tensor& self, int64_t dim, bool half_to_float, bool log) {
  dim = c10::maybe_wrap_dim(dim, self.dim());
  Tensor x = self.coalesce();
  Tensor values = half_to_float ? x._values().to(at::kFloat) : x._values();
  if (x._nnz() == 0) return sparse_like(x, x._indices().clone(), values.clone(), true);
  if (dim >= x.sparse_dim()) {
    int64_t along = dim - x.sparse_dim() + 1;
    return sparse_like(x, x._indices().clone(), log ? values.log_softmax(along) : values.softmax(along), true);
  }
  return sparse_like(x, x._indices().clone(), sparse_softmax_values(values, groups_along(x, dim), log), true);
}
Tensor sparse_softmax(const Tensor& self, int64_t dim, bool half_to_float) {
  return sparse_softmax_impl(self, dim, half_to_float, false);
}
Tensor sparse_log_softmax(const Tensor& self, int64_t dim, bool half_to_float) {
  return sparse_softmax_impl(self, dim, half_to_float, true);
}

// Gradients, on output's entries: softmax's out * (grad - sum(grad * out)), log_softmax's
// grad - exp(out) * sum(grad), the sums over each group.
Tensor sparse_softmax_backward_impl(const Tensor& grad, const Tensor& output, int64_t dim, bool log) {
  dim = c10::maybe_wrap_dim(dim, output.dim());
  Tensor out = output._values(), g = sparse_mask(grad, output)._values();
  if (output._nnz() == 0) return sparse_like(output, output._indices().clone(), g.clone(), output.is_coalesced());
  Tensor result;
  if (dim >= output.sparse_dim()) {
    int64_t along = dim - output.sparse_dim() + 1;
    result = log ? g.sub(out.exp().mul(g.sum(along, true))) : out.mul(g.sub(g.mul(out).sum(along, true)));
  } else {
    Groups groups = groups_along(output, dim);
    result = log ? g.sub(out.exp().mul(per_group(g, groups, "sum")))
                 : out.mul(g.sub(per_group(g.mul(out), groups, "sum")));
  }
  return sparse_like(output, output._indices().clone(), result, output.is_coalesced());
}
Tensor sparse_softmax_backward(const Tensor& grad, const Tensor& output, int64_t dim, const Tensor&) {
  return sparse_softmax_backward_impl(grad, output, dim, false);
}
Tensor sparse_log_softmax_backward(const Tensor& grad, const Tensor& output, int64_t dim, const Tensor&) {
  return sparse_softmax_backward_impl(grad, output, dim, true);
}

// The gradient of torch.sparse.sum(input, dims) on its positions: each takes grad at its
// kept sparse coordinates (grad is sparse, or dense once every sparse dimension was summed),
// spread over the dense dimensions that were summed.
Tensor sparse_sum_backward(const Tensor& grad, const Tensor& input, at::IntArrayRef dims) {
  Tensor self = input.coalesce();  // one gradient entry per position, as CPU's
  int64_t sparse_dim = self.sparse_dim(), nnz = self._nnz();
  std::vector<bool> summed(self.dim(), false);
  for (int64_t d : dims) summed[c10::maybe_wrap_dim(d, self.dim())] = true;
  std::vector<int64_t> kept_sparse, kept_sizes, summed_dense;
  for (int64_t d = 0; d < self.dim(); ++d) {
    if (d < sparse_dim && !summed[d]) kept_sparse.push_back(d), kept_sizes.push_back(self.size(d));
    if (d >= sparse_dim && summed[d]) summed_dense.push_back(d - sparse_dim + 1);
  }
  Tensor g;
  if (kept_sparse.empty()) {
    std::vector<int64_t> shape = grad.sizes().vec();
    shape.insert(shape.begin(), nnz);
    g = grad.to_dense().unsqueeze(0).expand(shape);
  } else {
    Tensor held = grad.coalesce();
    Tensor wanted = linear_index(self._indices().index_select(0, at::tensor(kept_sparse, self._indices().options())),
                                 kept_sizes);
    std::vector<int64_t> shape = held._values().sizes().vec();
    shape[0] = nnz;
    g = at::zeros(shape, held._values().options());
    if (held._nnz() > 0) {
      auto [slot, found] = look_up(linear_index(held._indices(), kept_sizes), wanted);
      g = scale_rows(held._values().index_select(0, slot), found);
    }
  }
  for (int64_t position : summed_dense) g = g.unsqueeze(position);
  return sparse_like(self, self._indices().clone(), g.expand(self._values().sizes()).contiguous(), self.is_coalesced());
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

// 3-d sparse [b, n, k] @ dense [b, k, m]: the 2-d product with every entry's batch folded into its
// row and column.
Tensor sparse_dense_bmm(const Tensor& sparse, const Tensor& dense) {
  TORCH_CHECK(sparse.is_sparse() && !dense.is_sparse(), "bmm on tpu: only sparse @ dense is supported");
  TORCH_CHECK(sparse.sparse_dim() == 3 && sparse.dense_dim() == 0 && dense.dim() == 3,
              "bmm_sparse: Tensor 'mat1' must have 3 dims and 'mat2' 3 dims, got ", sparse.sizes(), " and ", dense.sizes());
  TORCH_CHECK(sparse.size(0) == dense.size(0), "bmm_sparse: 'mat1' and 'mat2' must have the same number of matrices");
  TORCH_CHECK(sparse.size(2) == dense.size(1), "bmm_sparse: number of columns in 'mat1' must equal the number of rows "
              "in 'mat2'");
  int64_t batches = sparse.size(0), rows = sparse.size(1), inner = sparse.size(2);
  Tensor i = sparse._indices();
  Tensor folded = i[0].mul(rows).add(i[1]), columns = i[0].mul(inner).add(i[2]);
  Tensor flat = at::_sparse_coo_tensor_with_dims_and_tensors(
      2, 0, {batches * rows, batches * inner}, at::stack({folded, columns}), sparse._values(),
      sparse._values().options().layout(at::kSparse), false);
  return sparse_dense_mm(flat, dense.reshape({batches * inner, dense.size(2)})).view({batches, rows, dense.size(2)});
}

// 2-d sparse [n, k] @ sparse [k, m]: every a entry (i, j) meets the b entries of row j (b coalesced,
// so its rows are sorted); the products are coalesced into the result, as CPU's is.
Tensor sparse_sparse_matmul(const Tensor& left, const Tensor& right) {
  TORCH_CHECK(left.sparse_dim() == 2 && right.sparse_dim() == 2 && left.dense_dim() == 0 && right.dense_dim() == 0,
              "sparse_sparse_matmul: expected 2-D sparse matrices without dense dimensions, got ", left.sizes(), " and ",
              right.sizes());
  TORCH_CHECK(left.size(1) == right.size(0), "mat1 and mat2 shapes cannot be multiplied (", left.size(0), "x",
              left.size(1), " and ", right.size(0), "x", right.size(1), ")");
  Tensor a = left.coalesce(), b = right.coalesce();
  at::ScalarType type = at::result_type(a, b);
  Tensor ai = a._indices(), bi = b._indices();
  auto [a_entry, b_entry] = equal_pairs(bi[0], ai[1]);
  Tensor indices = at::stack({ai[0].index_select(0, a_entry), bi[1].index_select(0, b_entry)});
  Tensor values = a._values().index_select(0, a_entry).to(type).mul(b._values().index_select(0, b_entry).to(type));
  return at::_sparse_coo_tensor_with_dims_and_tensors(2, 0, {left.size(0), right.size(1)}, indices, values,
                                                      values.options().layout(at::kSparse), false)
      .coalesce();
}

Tensor addmm(const Tensor& self, const Tensor& sparse, const Tensor& dense, const at::Scalar& beta,
             const at::Scalar& alpha) {
  Tensor product = sparse_dense_mm(sparse, dense).mul_(alpha);
  if (beta.toComplexDouble() == 0.0) return product.expand(self.sizes()).contiguous();  // beta 0 ignores self
  return product.add_(self.mul(beta));
}

// No op runs on the compressed layouts on tpu: converting to one says so (PyTorch's kernels went
// to the CPU fallback and left a tensor that failed later with a confusing layout error).
void no_compressed_layouts(const c10::OperatorHandle& op, torch::jit::Stack*) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, op.schema().name(), ": tpu has no compressed sparse layouts (CSR, CSC, BSR, BSC); "
                              "sparse tpu tensors use the COO layout (to_sparse())");
}
constexpr const char* kCompressedConversions[] = {"_to_sparse_csr", "_to_sparse_csc", "_to_sparse_bsr", "_to_sparse_bsc"};

// The sparse ops whose SparseCPU and SparseCUDA kernel is one device-generic function
// (native_functions.yaml; test_sparse.py keeps this list complete).
constexpr const char* kGenericKernels[] = {
    "abs", "abs_", "abs.out", "view_as_real", "view_as_complex", "sgn", "sgn_", "sgn.out", "conj_physical.out",
    "add.Tensor", "add_.Tensor", "asinh", "asinh_", "asinh.out", "atanh", "atanh_", "atanh.out", "asin",
    "asin_", "asin.out", "atan", "atan_", "atan.out", "_sparse_broadcast_to", "cat", "ceil", "ceil_",
    "ceil.out", "copy_", "div.Tensor", "div_.Tensor", "div.out", "div.Tensor_mode", "div_.Tensor_mode",
    "div.out_mode", "empty.memory_format", "empty_like", "erf", "erf_", "erf.out", "expm1", "expm1_",
    "expm1.out", "floor", "floor_", "floor.out", "floor_divide", "floor_divide_.Tensor", "floor_divide.out",
    "frac", "frac_", "frac.out", "isnan", "nan_to_num", "nan_to_num_", "nan_to_num.out", "log1p", "log1p_",
    "log1p.out", "mm", "mm.out", "mul.Tensor", "mul_.Tensor", "mv", "narrow_copy", "permute", "rad2deg",
    "rad2deg_", "rad2deg.out", "deg2rad", "deg2rad_", "deg2rad.out", "neg", "neg_", "neg.out", "round",
    "round_", "round.out", "relu", "relu_", "sin", "sin_", "sin.out", "sinh", "sinh_", "sinh.out", "sum",
    "sum.dim_IntList", "sqrt", "sqrt_", "sqrt.out", "tan", "tan_", "tan.out", "tanh", "tanh_", "tanh.out",
    "threshold_backward.grad_input", "threshold_backward", "trunc", "trunc_", "trunc.out", "unsqueeze",
    "zeros.out", "native_norm", "native_norm.ScalarOpt_dim_dtype", "norm.ScalarOpt_dim_dtype",
    "norm.ScalarOpt_dim", "clone", "resize_as_sparse_", "zero_", "sub.out", "sub.Tensor", "sub_.Tensor",
    "_sparse_coo_tensor_with_dims", "_sparse_coo_tensor_with_dims_and_tensors", "sparse_resize_",
    "sparse_resize_and_clear_", "_to_dense", "sparse_dim", "_dimI",
    "dense_dim", "_dimV", "_nnz", "is_coalesced", "_indices", "_values", "_coalesced_", "indices", "values",
    "copy_sparse_to_sparse_", "_to_sparse.sparse_dim", "_to_sparse", "erfinv", "erfinv_", "erfinv.out", "sign", "sign_", "sign.out",
    "signbit", "signbit.out", "any", "pow.Tensor_Scalar_out", "pow.Tensor_Scalar", "isinf", "isposinf",
    "isposinf.out", "isneginf", "isneginf.out",
};

// Device-generic sparse kernels that later PyTorch releases added (linalg_vector_norm_sparse,
// PyTorch #185309, after 2.11): registered where the linked PyTorch has them, so that an older one
// still says the op has no sparse kernel instead of failing for want of a SparseCPU one.
constexpr const char* kLaterGenericKernels[] = {"linalg_vector_norm"};

bool pytorch_has_sparse_kernel(const char* name) {
  std::optional<c10::OperatorHandle> op = c10::Dispatcher::singleton().findOp({std::string("aten::") + name, ""});
  return op && op->hasKernelForDispatchKey(c10::DispatchKey::SparseCPU);
}

// Runs the generic kernel through its SparseCPU registration, which is that same function.
void run_generic_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  op.callBoxedForDispatchKey(c10::DispatchKey::SparseCPU, *stack);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, SparsePrivateUse1, m) {
  for (const char* name : kGenericKernels)
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&run_generic_kernel>());
  for (const char* name : kLaterGenericKernels)
    if (pytorch_has_sparse_kernel(name)) m.impl(name, torch::CppFunction::makeFromBoxedFunction<&run_generic_kernel>());
  m.impl("_coalesce", coalesce);
  m.impl("add.out", add_out);
  m.impl("mul.out", mul_out);
  m.impl("addmm", addmm);
  m.impl("index_select", index_select);
  m.impl("bmm", sparse_dense_bmm);
  m.impl("_sparse_sparse_matmul", sparse_sparse_matmul);
  m.impl("_sparse_sum_backward", sparse_sum_backward);
  m.impl("_sparse_softmax", sparse_softmax);
  m.impl("_sparse_log_softmax", sparse_log_softmax);
  m.impl("_sparse_softmax_backward_data", sparse_softmax_backward);
  m.impl("_sparse_log_softmax_backward_data", sparse_log_softmax_backward);
  for (const char* name : kCompressedConversions)
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&no_compressed_layouts>());
  // Device-generic in PyTorch, but built on DispatchStubs that have kernels for CPU and CUDA only.
  m.impl("sparse_mask", sparse_mask);
  m.impl("_sparse_mask_projection", sparse_mask_projection);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_to_sparse.sparse_dim", dense_to_sparse_dim);
  m.impl("_to_sparse", dense_to_sparse);
  for (const char* name : kCompressedConversions)
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&no_compressed_layouts>());
}

}  // namespace torchtpu::aten
