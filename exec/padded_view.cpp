#include "exec/padded_view.h"

#include <algorithm>
#include <limits>
#include <list>
#include <map>
#include <mutex>
#include <stdexcept>

#include "exec/capture.h"
#include "exec/executor.h"
#include "exec/runtime_offset.h"
#include "graph/key_text.h"
#include "hlo/operators.h"

namespace torchtpu::exec {
namespace {

using hlo::Builder;
using hlo::TensorType;
using hlo::Value;

// Geometry vectors recently uploaded: a decoding step's ops share one per cache length, and a
// new length passes through without accumulating (as aten/scalar_cache.cpp keeps Scalars).
class RecentGeometry {
 public:
  std::shared_ptr<BufferRef> get(int device, const std::vector<int64_t>& geometry) {
    std::lock_guard<std::mutex> lock(mu_);
    Key key{device, geometry};
    if (auto it = index_.find(key); it != index_.end()) {
      order_.splice(order_.begin(), order_, it->second);
      return it->second->second;
    }
    auto ref = std::make_shared<BufferRef>(device, geometry.size() * sizeof(int64_t));
    upload(*ref, geometry.data(), DType::kS64);
    ref->value()->mark_scalar();  // like a Scalar: never merged with an equal one in a window
    order_.emplace_front(key, ref);
    index_[key] = order_.begin();
    if (order_.size() > kCapacity) {
      index_.erase(order_.back().first);
      order_.pop_back();
    }
    return ref;
  }

 private:
  using Key = std::pair<int, std::vector<int64_t>>;
  static constexpr size_t kCapacity = 256;
  std::mutex mu_;
  std::list<std::pair<Key, std::shared_ptr<BufferRef>>> order_;
  std::map<Key, decltype(order_)::iterator> index_;
};

RecentGeometry& recent_geometry() {
  static auto* r = new RecentGeometry;  // never destroyed: see executor.cpp
  return *r;
}

// geometry[k] as a 0-d s64 value.
Value entry(Builder& b, const Value& geometry, int64_t k) {
  return b.reshape(b.slice(geometry, {k}, {k + 1}, {1}), {});
}

Value splat(Builder& b, const Value& scalar, const std::vector<int64_t>& dims) {
  return b.broadcast_in_dim(scalar, dims, {});
}

Value fill_value(Builder& b, Fill fill, DType dtype, const std::vector<int64_t>& dims) {
  TensorType type{dtype, dims};
  if (fill == Fill::kZero) return b.constant(0, type);
  if (fill == Fill::kOne) return b.constant(1, type);
  bool lowest = fill == Fill::kLowest;
  if (dtype == DType::kBool) return b.constant(lowest ? 0 : 1, type);
  if (is_floating(dtype)) {  // float8_e4m3fn has no infinity: its largest finite value
    double inf = dtype == DType::kF8E4M3FN ? 448 : std::numeric_limits<double>::infinity();
    return b.constant(lowest ? -inf : inf, type);
  }
  if (is_complex(dtype)) throw std::invalid_argument("complex values have no order to pad with");
  // Integers: the type's own bounds.
  int bits = static_cast<int>(element_size(dtype) * 8);
  bool is_unsigned = dtype == DType::kU8 || dtype == DType::kU16 || dtype == DType::kU32 || dtype == DType::kU64;
  if (is_unsigned) {
    if (lowest) return b.constant(0, type);
    return b.constant_int(bits == 64 ? -1 : static_cast<int64_t>((uint64_t{1} << bits) - 1), type);
  }
  int64_t max = bits == 64 ? std::numeric_limits<int64_t>::max() : (int64_t{1} << (bits - 1)) - 1;
  return b.constant_int(lowest ? -max - 1 : max, type);
}

// Over the box: the flat index of each position (offset + sum of index * stride) and whether
// the position lies inside the view's exact sizes.
std::pair<Value, Value> box_positions(Builder& b, const Value& geometry, const Padding& p) {
  const std::vector<int64_t>& box = p.box;
  int64_t rank = static_cast<int64_t>(box.size());
  TensorType index_type{DType::kS64, box};
  Value index = splat(b, entry(b, geometry, p.at + 2 * rank), box);
  Value inside = b.constant(1, {DType::kBool, box});
  for (int64_t d = 0; d < rank; ++d) {
    Value along = b.iota(index_type, d);
    index = index + along * splat(b, entry(b, geometry, p.at + rank + d), box);
    Value in_size = b.compare(hlo::Compare::kLT, along, splat(b, entry(b, geometry, p.at + d), box));
    inside = b.binary(hlo::BinaryOp::kAnd, inside, in_size);
  }
  return {index, inside};
}

int64_t numel(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

void check_box(const View& view, const Padding& p) {
  if (p.box.size() != view.sizes.size() || p.at < 0)
    throw std::logic_error("a padded operand's box does not match its view");
  for (size_t d = 0; d < p.box.size(); ++d)
    if (p.box[d] < view.sizes[d]) throw std::logic_error("a padded operand is larger than its box");
}

// A view holding whole rows of its storage, padded in at most one dimension: in storage order its
// dimensions are [outer..., varying, inner...], the inner ones dense (`width` elements of a row,
// from `start`), the varying one stepping by `row` elements, the outer ones dense over its rows.
// A contiguous activation has row = width and start 0; a transposed one (attention's output) too,
// in another order; one head slice of a fused qkv projection seen as [B, H, L, D] has width H·D,
// row 3·H·D and start 0, H·D or 2·H·D. It is read by one window of rows per block of the outer
// dimensions and, written whole, by one update per block, instead of an element gather (and a
// division per element to write it). Part of the key: it shapes the program.
struct Packing {
  std::vector<int64_t> order;  // the view's dimensions, outermost in memory first
  int64_t dim = -1;            // the varying one; -1: none varies now (a contiguous view from 0)
  int64_t row = 1, width = 1, start = 0;
  int64_t at() const { return std::find(order.begin(), order.end(), dim) - order.begin(); }
  bool dense() const { return row == width && start == 0; }
};

std::vector<int64_t> in_order(const std::vector<int64_t>& dims, const std::vector<int64_t>& order) {
  std::vector<int64_t> out;
  for (int64_t d : order) out.push_back(dims[d]);
  return out;
}

// Whether the view's dimensions order[from..to) are dense over `stride` elements each step of
// the innermost (size-1 dimensions have any stride); sets `extent` to the elements they span.
bool dense_run(const View& view, const std::vector<int64_t>& order, size_t from, size_t to, int64_t stride,
               int64_t& extent) {
  extent = stride;
  for (size_t i = to; i-- > from;) {
    int64_t d = order[i];
    if (view.sizes[d] != 1 && view.strides[d] != extent) return false;
    extent *= view.sizes[d];
  }
  return true;
}

std::optional<Packing> packing(const View& view, const Padding& p) {
  int64_t rank = static_cast<int64_t>(p.box.size());
  Packing k;
  for (int64_t d = 0; d < rank; ++d)
    if (view.sizes[d] < p.box[d]) {
      if (k.dim >= 0) return std::nullopt;
      k.dim = d;
    }
  if (k.dim < 0 && p.rows < rank) k.dim = p.rows;
  if (view.is_contiguous() || k.dim < 0) {  // in PyTorch's order, from offset 0
    if (!view.is_contiguous() || view.offset != 0) return std::nullopt;
    for (int64_t d = 0; d < rank; ++d) k.order.push_back(d);
    for (int64_t d = k.dim + 1; k.dim >= 0 && d < rank; ++d) k.width *= p.box[d];
    k.row = k.width;
    return k;
  }
  if (view.sizes[k.dim] <= 1) return std::nullopt;  // its stride says nothing
  k.order = view.storage_order();
  size_t at = k.at();
  int64_t outer_step = 0;
  k.row = view.strides[k.dim];
  k.start = view.offset;
  if (!dense_run(view, k.order, at + 1, k.order.size(), 1, k.width) || k.row < k.width ||
      !dense_run(view, k.order, 0, at, view.sizes[k.dim] * k.row, outer_step) || k.start + k.width > k.row)
    return std::nullopt;
  return k;
}

// Blocks of a packed view: [outer, rows, width] of the box in storage order.
struct Blocks {
  int64_t outer = 1, rows = 1, width;
  Blocks(const std::vector<int64_t>& box, const Packing& k) : width(k.width) {
    if (k.dim < 0) return;
    std::vector<int64_t> stored = in_order(box, k.order);
    size_t at = k.at();
    for (size_t i = 0; i < at; ++i) outer *= stored[i];
    rows = stored[at];
  }
};

// Whether a packed read's padded positions are its storage's tail, which holds zeros
// (exec/buffer_ref.h), where the op reads zeros there: then they need no mask. One block, whose
// rows past the exact size lie past the storage's logical elements.
bool reads_tail(const Padding& p, const Packing& k, const Blocks& blocks) {
  return p.fill == Fill::kZero && p.covers_storage && k.dim >= 0 && k.dense() && blocks.outer == 1;
}

// Each block's first flat position (block o starts at start + o * exact rows * row), as s64[outer, 1].
Value block_starts(Builder& b, const Value& geometry, const Padding& p, const Packing& k, const Blocks& blocks) {
  Value stride = entry(b, geometry, p.at + k.dim) * b.constant(static_cast<double>(k.row), {DType::kS64, {}});
  Value starts = b.iota({DType::kS64, {blocks.outer}}, 0) * splat(b, stride, {blocks.outer});
  if (k.start) starts = starts + b.constant(static_cast<double>(k.start), {DType::kS64, {blocks.outer}});
  return b.reshape(starts, {blocks.outer, 1});
}

// Over [outer, rows, width]: whether a row lies inside the exact size of the varying dimension.
Value rows_inside(Builder& b, const Value& geometry, const Padding& p, const Packing& k, const Blocks& blocks) {
  std::vector<int64_t> dims{blocks.outer, blocks.rows, blocks.width};
  return b.compare(hlo::Compare::kLT, b.iota({DType::kS64, dims}, 1), splat(b, entry(b, geometry, p.at + k.dim), dims));
}

// The permutation taking a box in storage order to the view's order (stablehlo.transpose's).
std::vector<int64_t> to_view_order(const Packing& k) {
  std::vector<int64_t> permutation(k.order.size());
  for (size_t i = 0; i < k.order.size(); ++i) permutation[k.order[i]] = static_cast<int64_t>(i);
  return permutation;
}

bool is_identity(const std::vector<int64_t>& order) { return std::is_sorted(order.begin(), order.end()); }

Value read_packed(Builder& b, const Value& flat, const Value& geometry, const View& view, const Padding& p,
                  const Packing& k) {
  int64_t n = numel(p.box), length = flat.type.dims.at(0);
  Blocks blocks(p.box, k);
  // Windows may reach past an exact-size storage's end (XLA would move them back): pad it.
  int64_t reach = k.start + blocks.outer * blocks.rows * k.row;
  Value data = length >= reach ? flat : b.pad(flat, b.constant(0, {view.dtype, {}}), {0}, {reach - length}, {0});
  if (k.dim < 0) return b.reshape(b.slice(data, {0}, {n}, {1}), p.box);
  Value rows = b.gather(data, block_starts(b, geometry, p, k, blocks), {{1}, {}, {0}, 1}, {blocks.rows * k.row},
                        {blocks.outer, blocks.rows * k.row});
  Value x = b.reshape(rows, {blocks.outer, blocks.rows, k.row});
  std::vector<int64_t> dims{blocks.outer, blocks.rows, blocks.width};
  if (!k.dense()) x = b.slice(x, {0, 0, 0}, dims, {1, 1, 1});
  if (!reads_tail(p, k, blocks))
    x = b.select(rows_inside(b, geometry, p, k, blocks), x, fill_value(b, p.fill, view.dtype, dims));
  x = b.reshape(x, in_order(p.box, k.order));
  return is_identity(k.order) ? x : b.transpose(x, to_view_order(k));
}

// The whole storage (`length` elements) from a dense packed view's box: each block's rows written
// over the previous block's padded tail, in order; zeros past the logical elements.
Value write_packed(Builder& b, int64_t length, const Value& geometry, const View& view, const Padding& p,
                   const Value& box, const Packing& k) {
  int64_t n = numel(p.box);
  Value zero = b.constant(0, {view.dtype, {}});
  if (k.dim < 0) {
    Value x = b.reshape(box, {n});
    return length == n ? x : b.pad(x, zero, {0}, {length - n}, {0});
  }
  Blocks blocks(p.box, k);
  std::vector<int64_t> dims{blocks.outer, blocks.rows, blocks.width};
  Value stored = is_identity(k.order) ? box : b.transpose(box, k.order);
  Value x = b.reshape(
      b.select(rows_inside(b, geometry, p, k, blocks), b.reshape(stored, dims), b.constant(0, {view.dtype, dims})),
      {blocks.outer, blocks.rows * blocks.width});
  // The last block's window ends by o * rows * width + rows * width <= n: pad to that first.
  Value flat = b.constant(0, {view.dtype, {std::max(length, n)}});
  Value stride = entry(b, geometry, p.at + k.dim) * b.constant(static_cast<double>(k.row), {DType::kS64, {}});
  for (int64_t o = 0; o < blocks.outer; ++o) {
    int64_t elements = blocks.rows * blocks.width;
    Value block = b.reshape(b.slice(x, {o, 0}, {o + 1, elements}, {1, 1}), {elements});
    Value start = stride * b.constant(static_cast<double>(o), {DType::kS64, {}});
    flat = b.dynamic_update_slice(flat, block, {start});
  }
  return length >= n ? flat : b.slice(flat, {0}, {length}, {1});
}

// The storage's first elements as the box, in storage order (Padding::in_storage_order).
Value read_in_storage_order(Builder& b, const Value& flat, const View& view, const Padding& p) {
  int64_t n = numel(p.box), length = flat.type.dims.at(0);
  Value data = length >= n ? b.slice(flat, {0}, {n}, {1})
                           : b.pad(flat, b.constant(0, {view.dtype, {}}), {0}, {n - length}, {0});
  return b.reshape(data, p.box);
}

// A box in storage order as its storage's flat value of `length` elements: zeros past the view's
// elements, as every whole write leaves them (NaN checks read them); an in-place write (`flat`)
// keeps what lies past the box.
Value write_in_storage_order(Builder& b, const std::optional<Value>& flat, int64_t length, const Value& geometry,
                             const View& view, const Padding& p, const Value& box) {
  int64_t n = numel(p.box);
  Value x = b.reshape(box, {n});
  if (n > 0) {
    // Masked as whole rows of the dimensions after the one that varies, where the key names it:
    // a 2-D select XLA spreads over threads (a 1-D one of the elements it ran on one).
    int64_t rank = static_cast<int64_t>(p.box.size()), last = p.rows >= 0 ? p.rows : rank - 1, inner = 1;
    for (int64_t d = last + 1; d < rank; ++d) inner *= p.box[d];
    Value count = b.constant(1, {DType::kS64, {}});
    for (int64_t d = 0; d <= last; ++d) count = count * entry(b, geometry, p.at + d);
    std::vector<int64_t> rows{n / inner, inner};
    Value inside = b.compare(hlo::Compare::kLT, b.iota({DType::kS64, rows}, 0), splat(b, count, rows));
    x = b.reshape(b.select(inside, b.reshape(box, rows), b.constant(0, {view.dtype, rows})), {n});
  }
  if (length <= n) return length == n ? x : b.slice(x, {0}, {length}, {1});
  if (flat) return b.concatenate({x, b.slice(*flat, {n}, {length}, {1})}, 0);
  return b.pad(x, b.constant(0, {view.dtype, {}}), {0}, {length - n}, {0});
}

// Blocks written one update each: beyond this many, the element path's single gather is cheaper.
constexpr int64_t kMostPackedBlocks = 64;

}  // namespace

bool attach_geometry(OpCall& call) {
  std::vector<int64_t> geometry;
  int device = -1;
  bool padded = false;
  size_t k = 0;
  bool offsets = !capturing();  // a captured graph runs at the geometry it was captured at
  auto is_padded = [](const Operand& o) { return o.padding.has_value(); };
  bool beside_padding = std::any_of(call.inputs.begin(), call.inputs.end(), is_padded) ||
                        std::any_of(call.outputs.begin(), call.outputs.end(), is_padded);
  auto number = [&](Operand& o) {
    size_t index = k++;
    if (o.padding) {
      o.padding->at = static_cast<int64_t>(geometry.size());
      geometry.insert(geometry.end(), o.view.sizes.begin(), o.view.sizes.end());
      geometry.insert(geometry.end(), o.view.strides.begin(), o.view.strides.end());
      geometry.push_back(o.view.offset);
      check_box(o.view, *o.padding);
      padded = true;
    } else if (offsets && offset_varies(call, index, o, beside_padding)) {
      o.offset_at = static_cast<int64_t>(geometry.size());
      geometry.push_back(o.view.offset);
    } else {
      return;
    }
    device = o.storage->device();
  };
  for (Operand& o : call.inputs) {
    number(o);
    if (o.padding)
      o.padding->covers_storage = o.view.is_dense() && o.view.offset == 0 &&
                                  o.view.numel() * static_cast<int64_t>(element_size(o.view.dtype)) ==
                                      static_cast<int64_t>(o.storage->nbytes());
  }
  for (Operand& o : call.outputs) number(o);
  if (geometry.empty()) return false;
  call.geometry = recent_geometry().get(device, geometry);
  int64_t length = static_cast<int64_t>(geometry.size());
  call.inputs.push_back({call.geometry.get(), View{DType::kS64, {length}, {1}, 0}, std::nullopt});
  return padded;
}

Value read_padded(Builder& b, const Value& flat, const Value& geometry, const View& view, const Padding& p) {
  if (flat.type.dtype != view.dtype) throw std::logic_error("a padded view must have its storage's element type");
  // Nothing to read (an empty part of a `cat`): XLA cannot gather or slice from an empty value.
  if (numel(p.box) == 0 || flat.type.dims.at(0) == 0) return fill_value(b, p.fill, view.dtype, p.box);
  if (p.in_storage_order) return read_in_storage_order(b, flat, view, p);
  if (std::optional<Packing> k = packing(view, p)) return read_packed(b, flat, geometry, view, p, *k);
  auto [index, inside] = box_positions(b, geometry, p);
  int64_t n = numel(p.box);
  Value safe = b.select(inside, index, b.constant(0, index.type));
  Value gathered = b.gather(flat, b.reshape(safe, {n, 1}), {{}, {0}, {0}, 1}, {1}, {n});
  return b.select(inside, b.reshape(gathered, p.box), fill_value(b, p.fill, view.dtype, p.box));
}

Value write_padded(Builder& b, const std::optional<Value>& flat, int64_t length, const Value& geometry,
                   const View& view, const Padding& p, const Value& box) {
  if (p.in_storage_order) return write_in_storage_order(b, flat, length, geometry, view, p, box);
  int64_t rank = static_cast<int64_t>(p.box.size());
  if (flat) {  // a scatter through the exact view; positions outside it aim past the end, and XLA skips those
    auto [index, inside] = box_positions(b, geometry, p);
    Value aimed = b.select(inside, index, b.constant(static_cast<double>(length), index.type));
    int64_t n = numel(p.box);
    auto replace = [](Builder&, const std::vector<Value>& a) { return std::vector<Value>{a[1]}; };
    return b.scatter(*flat, b.reshape(aimed, {n, 1}), b.reshape(box, {n}), {{}, {0}, {0}, 1}, replace);
  }
  if (std::optional<Packing> k = packing(view, p); k && k->dense() && Blocks(p.box, *k).outer <= kMostPackedBlocks)
    return write_packed(b, length, geometry, view, p, box, *k);
  // The whole storage: flat element j is the box element at j's position in the exact sizes,
  // laid out in the view's storage order; elements past the logical ones are zeros.
  TensorType index_type{DType::kS64, {length}};
  Value j = b.iota(index_type, 0);
  Value inner = b.constant(1, index_type);
  std::vector<Value> coordinates(rank);
  std::vector<int64_t> order = view.storage_order();
  for (int64_t i = rank; i-- > 0;) {
    int64_t d = order[i];
    Value size = splat(b, entry(b, geometry, p.at + d), {length});
    coordinates[d] = b.reshape(b.binary(hlo::BinaryOp::kRemainder, j / inner, size), {length, 1});
    inner = inner * size;
  }
  std::vector<int64_t> all(rank), ones(rank, 1);
  for (int64_t d = 0; d < rank; ++d) all[d] = d;
  Value at = rank == 1 ? coordinates[0] : b.concatenate(coordinates, 1);
  Value gathered = b.gather(box, at, {{}, all, all, 1}, ones, {length});
  Value logical = b.compare(hlo::Compare::kLT, j, inner);
  return b.select(logical, gathered, b.constant(0, {view.dtype, {length}}));
}

bool share_storage_order(std::vector<Operand>& inputs, std::vector<Operand>& outputs, int64_t row_dims,
                         const std::vector<bool>& reads_rows) {
  // Programs of one op only: in a fused or lazy window XLA fuses the unmasked buffers into each
  // of their consumers and computes the op again in every one (docs/design.md).
  if (mode() == Mode::kFused || mode() == Mode::kLazy) return false;
  auto padded = [](const Operand& o) { return o.padding.has_value(); };
  if (outputs.empty() || !std::all_of(outputs.begin(), outputs.end(), padded)) return false;
  const std::vector<int64_t>& sizes = outputs[0].view.sizes;
  const std::vector<int64_t>& box = outputs[0].padding->box;
  // The dimensions up to the last padded one lie differently in the buffer and in the box.
  int64_t last = -1;
  for (auto* operands : {&inputs, &outputs})
    for (const Operand& o : *operands) {
      if (!o.padding) continue;
      last = std::max(last, o.padding->rows);
      for (size_t d = 0; d < o.view.sizes.size(); ++d)
        if (o.view.sizes[d] < o.padding->box[d]) last = std::max(last, static_cast<int64_t>(d));
    }
  if (last >= row_dims) return false;  // the op computes across a padded dimension
  auto shares = [&](const Operand& o) {
    if (!o.view.is_contiguous() || o.view.offset != 0 || o.view.sizes.size() != sizes.size()) return false;
    for (size_t d = 0; d < sizes.size(); ++d) {
      bool row = static_cast<int64_t>(d) <= last;
      if (row ? o.view.sizes[d] != sizes[d] || o.padding->box[d] != box[d] : o.view.sizes[d] != o.padding->box[d])
        return false;
    }
    return true;
  };
  auto broadcasts_after_last = [&](const View& v) {
    size_t rank = sizes.size(), r = v.sizes.size();
    if (r > rank) return false;
    for (size_t d = 0; d < r; ++d)
      if (static_cast<int64_t>(rank - r + d) <= last && v.sizes[d] != 1) return false;
    return true;
  };
  for (const Operand& o : outputs)
    if (!shares(o) || o.view.numel() * static_cast<int64_t>(element_size(o.view.dtype)) !=
                          static_cast<int64_t>(o.storage->nbytes()))
      return false;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Operand& o = inputs[k];
    bool reads = reads_rows.empty() || (k < reads_rows.size() && reads_rows[k]);
    if (o.padding ? !reads || !shares(o) : reads && !broadcasts_after_last(o.view)) return false;
  }
  for (auto* operands : {&inputs, &outputs})
    for (Operand& o : *operands)
      if (o.padding) o.padding->in_storage_order = true;
  return true;
}

Value padded_sizes(Builder& b, const Value& geometry, const View& view, const Padding& p) {
  int64_t rank = static_cast<int64_t>(view.sizes.size());
  std::optional<Packing> k = packing(view, p);
  if (!k) return b.slice(geometry, {p.at}, {p.at + rank}, {1});
  // A packed view fills its box but in one dimension, which its key names: the others' sizes are
  // constants, so that XLA folds what a lowering computes from them (a padded cat along a fixed
  // dimension places its parts at static offsets).
  auto known = [&](int64_t from, int64_t to) {
    return b.constant_bytes(p.box.data() + from, {DType::kS64, {to - from}});
  };
  int64_t dim = k->dim;
  if (dim < 0) return known(0, rank);
  std::vector<Value> parts;
  if (dim > 0) parts.push_back(known(0, dim));
  parts.push_back(b.slice(geometry, {p.at + dim}, {p.at + dim + 1}, {1}));
  if (dim + 1 < rank) parts.push_back(known(dim + 1, rank));
  return parts.size() == 1 ? parts[0] : b.concatenate(parts, 0);
}

void append_padded_key(std::string& key, const View& view, const Padding& p) {
  constexpr size_t kNumber = graph::KeyWriter::kNumberRoom;
  {
    graph::KeyWriter w(key, dtype_name(view.dtype).size() + 8 + p.box.size() * (kNumber + 1));
    w << dtype_name(view.dtype) << "pad" << static_cast<char>('0' + static_cast<int>(p.fill)) << '[';
    for (int64_t d : p.box) w.number(d) << ',';
    w << ']';
  }  // (a writer's room ends with it: the next one appends after what it wrote)
  if (std::optional<Packing> k = packing(view, p)) {  // its order follows ('<') where not PyTorch's
    graph::KeyWriter w(key, 5 + 3 * kNumber);
    w << 'r';
    w.number(k->dim);
    if (reads_tail(p, *k, Blocks(p.box, *k))) w << 'z';
    if (!k->dense()) {
      w << 'w';
      w.number(k->row) << '+';
      w.number(k->start);
    }
  }
  if (p.in_storage_order) key += 's';
  std::vector<int64_t> order = view.storage_order();  // a whole write follows it
  if (!std::is_sorted(order.begin(), order.end())) {
    graph::KeyWriter o(key, 2 + order.size() * (kNumber + 1));
    o << '<';
    for (int64_t d : order) o.number(d) << ',';
  }
}

}  // namespace torchtpu::exec
