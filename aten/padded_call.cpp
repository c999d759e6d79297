#include "aten/padded_call.h"

#include <ATen/ops/empty.h>

#include <algorithm>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "aten/lowering.h"
#include "aten/tensor_operand.h"
#include "aten/varying_sizes.h"
#include "exec/capture.h"
#include "exec/padded_view.h"

namespace torchtpu::aten {
namespace {

// Per dimension of a tensor reading `storage` with `sizes` and `strides`: whether it keeps its
// size though that size varies in the call. Marks are sizes (docs/design.md, "Shapes that
// change"), so a fixed size equal to a varying one looks varying too; two things tell them apart:
// - without `duck_sizing` (a matmul's first try, pad_operands), an unmarked tensor keeps all its
//   sizes: a weight [3·D, D] beside activations of B·L = 3·D rows;
// - among dimensions of one size, where one has a stride its storage varied along, the others keep
//   theirs: [B·L, 3·D] = [384, 384] of a qkv projection at L = 48 varies in its rows only.
std::vector<bool> fixed_dims(const exec::BufferRef& storage, c10::IntArrayRef sizes, c10::IntArrayRef strides,
                             bool duck_sizing) {
  std::vector<bool> fixed(sizes.size(), !duck_sizing && !storage.varies());
  const std::vector<int64_t>& along = storage.varying_strides();
  auto varies_here = [&](size_t d) { return std::find(along.begin(), along.end(), strides[d]) != along.end(); };
  for (size_t d = 0; d < sizes.size() && !along.empty(); ++d)
    for (size_t e = 0; e < sizes.size(); ++e)
      if (e != d && sizes[e] == sizes[d] && varies_here(e) && !varies_here(d)) fixed[d] = true;
  return fixed;
}

// `probe` > 0 gives boxes that much larger: which result sizes follow them (aten::cat's does, a
// reduction's does not) says which of a result's sizes vary.
std::vector<int64_t> box_of(const PaddingRule& rule, const std::vector<c10::IValue>& args, size_t arg,
                            c10::IntArrayRef sizes, const std::vector<int64_t>& varying, const std::vector<bool>& fixed,
                            int64_t probe = 0) {
  std::vector<int64_t> box(sizes.begin(), sizes.end());
  for (size_t d = 0; d < box.size(); ++d)
    if (std::binary_search(varying.begin(), varying.end(), box[d]) && !fixed[d] &&
        (!rule.paddable || rule.paddable(args, arg, static_cast<int64_t>(d))))
      box[d] = box_size(box[d], varying) + probe;
  return box;
}

// The op's metadata with its tpu tensors replaced by contiguous meta tensors of their boxes;
// null when PyTorch refuses the boxes (sizes that must match did not pad alike).
std::shared_ptr<const MetaResult> box_metadata(const c10::OperatorHandle& op, const OpPlan& plan,
                                               const std::vector<c10::IValue>& args,
                                               const std::vector<int64_t>& varying, bool duck_sizing,
                                               int64_t probe = 0) {
  static std::mutex mu;
  static std::unordered_map<std::string, std::shared_ptr<const MetaResult>> cache;
  const PaddingRule& rule = *plan.entry->options.padding;
  auto result = std::make_shared<MetaResult>();
  for (size_t i = 0; i < args.size(); ++i)
    result->args.push_back(map_tensors(plan.args[i], args[i], [&](const at::Tensor& t) {
      if (!t.defined() || !on_tpu(t)) return t;
      std::vector<bool> fixed = fixed_dims(buffer_ref(t), t.sizes(), t.strides(), duck_sizing);
      return at::empty(box_of(rule, args, i, t.sizes(), varying, fixed, probe), t.options().device(c10::kMeta));
    }));
  std::string key = meta_key(plan, result->args);
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = cache.find(key); it != cache.end()) return it->second;
  }
  result->returns = result->args;
  try {
    if (rule.box_meta)
      result->returns = rule.box_meta(op.schema(), result->args);
    else if (plan.entry->options.meta)
      result->returns = plan.entry->options.meta(op.schema(), result->args);
    else
      op.callBoxedForDispatchKey(c10::DispatchKey::Meta, result->returns);
  } catch (...) {
    return nullptr;
  }
  std::lock_guard<std::mutex> lock(mu);
  if (cache.size() >= (1 << 14)) cache.clear();
  return cache.emplace(key, result).first->second;
}

// The meta tensors of `meta` in the order destinations() lists the op's results.
std::vector<at::Tensor> destination_metas(const OpPlan& plan, const MetaResult& meta) {
  std::vector<at::Tensor> metas;
  for (size_t i : plan.written_args) for_each_tensor(meta.args[i], [&](const at::Tensor& t) { metas.push_back(t); });
  for (size_t r = 0; r < plan.aliased_returns.size(); ++r) {
    if (plan.aliased_returns[r]) continue;
    const c10::IValue& m = meta.returns[r];
    if (m.isTensor() && m.toTensor().defined()) metas.push_back(m.toTensor());
    else if (m.isList() && !m.isNone())
      for (const at::Tensor& t : m.toTensorList().vec())
        if (t.defined()) metas.push_back(t);
  }
  return metas;
}

// Whether `box` can hold `sizes` (a result's exact sizes): same rank, no dimension smaller.
bool holds(const std::vector<int64_t>& box, const std::vector<int64_t>& sizes) {
  if (box.size() != sizes.size()) return false;
  for (size_t d = 0; d < box.size(); ++d)
    if (box[d] < sizes[d]) return false;
  return true;
}

// Whether a dimension of tensor argument `arg` that the rule lets vary has a varying size.
bool pads_any(const PaddingRule& rule, const std::vector<c10::IValue>& args, size_t arg,
              const std::vector<int64_t>& sizes, const std::vector<int64_t>& varying, const std::vector<bool>& fixed) {
  for (size_t d = 0; d < sizes.size(); ++d)
    if (sizes[d] > 1 && std::binary_search(varying.begin(), varying.end(), sizes[d]) && !fixed[d] &&
        (!rule.paddable || rule.paddable(args, arg, static_cast<int64_t>(d))))
      return true;
  return false;
}

using Box = std::vector<int64_t>;

// Whether what varies in the call comes from its line's history, not only from marked storages:
// an op that seeds padding, or one reading a part of a larger storage (the first L positions of a
// model's position-id buffer), which can be read padded where L changes at this line: the storage
// holds the box already.
bool seeds_here(const PaddingRule& rule, const Inputs& in) {
  return rule.seeds || std::any_of(in.operands.begin(), in.operands.end(), [](const exec::Operand& o) {
    return o.view.numel() * static_cast<int64_t>(element_size(o.view.dtype)) < static_cast<int64_t>(o.storage->nbytes());
  });
}

// The sizes that vary in a call the rule applies to; nothing where it runs at exact sizes (no
// input is padded and the op seeds no padding, nothing varies, or an operand is empty).
std::optional<std::vector<int64_t>> call_varying(const PaddingRule& rule, const std::vector<c10::IValue>& args,
                                                 const graph::Origin* origin, const Inputs& in,
                                                 const std::vector<exec::Operand>& outputs) {
  bool reads_padded =
      std::any_of(in.operands.begin(), in.operands.end(), [](const exec::Operand& o) { return o.storage->varies(); });
  bool seeds = seeds_here(rule, in);
  if (!reads_padded && !seeds) return std::nullopt;  // every op of a static workload leaves here
  if (rule.applies && !rule.applies(args)) return std::nullopt;
  // An empty contiguous input reads as an empty box (the cache a first `cat` appends to); other
  // empty operands have nothing a gather or scatter could address.
  auto unreadable = [](const exec::Operand& o) { return empty_operand(o) && !(o.view.is_contiguous() && o.view.offset == 0); };
  if (std::any_of(in.operands.begin(), in.operands.end(), unreadable) ||
      std::any_of(outputs.begin(), outputs.end(), empty_operand))
    return std::nullopt;
  std::vector<std::vector<int64_t>> output_sizes;
  for (const exec::Operand& o : outputs) output_sizes.push_back(o.view.sizes);
  std::vector<int64_t> varying = varying_sizes(seeds ? origin : nullptr, in.operands, output_sizes);
  // A seeding op's result as long as what varies now (`arange` of a padded batch's length) varies
  // from its first call: run exact first, its programs and those of everything reading it would
  // be compiled twice, once for that first length and once padded (a fused window too). Only
  // where nothing else varies (beside a cache, a head size equal to a length seen earlier would).
  if (rule.seeds && varying.empty() && !reads_padded)
    for (const std::vector<int64_t>& sizes : output_sizes)
      for (int64_t n : sizes)
        if (recently_varied(n) && !std::binary_search(varying.begin(), varying.end(), n))
          varying.insert(std::upper_bound(varying.begin(), varying.end(), n), n);
  if (varying.empty() && !reads_padded) return std::nullopt;
  return varying;
}

// Each input's box, or nothing where it is read at its exact view; nothing at all where an input
// to pad is a view of another type (a padded read gathers elements of its own type).
std::optional<std::vector<std::optional<Box>>> input_boxes(const PaddingRule& rule, const std::vector<c10::IValue>& args,
                                                           const Inputs& in, const std::vector<int64_t>& varying,
                                                           bool duck_sizing) {
  std::vector<std::optional<Box>> boxes;
  for (size_t arg = 0, k = 0; arg < in.count.size(); ++arg)
    for (size_t n = 0; n < in.count[arg]; ++n, ++k) {
      const exec::Operand& o = in.operands[k];
      // A padded storage is read padded even at exact sizes: its view's offset and strides, which
      // may vary with the padded sizes (x[:, -1] of a growing x), are read at run time. An exact one
      // whose box is its size is read as it is: its size only equals a varying one (a weight's
      // d_ff = B·L at L = 64), which must not give it a program of its own.
      std::vector<bool> fixed = fixed_dims(*o.storage, o.view.sizes, o.view.strides, duck_sizing);
      Box box = arg < args.size() ? box_of(rule, args, arg, o.view.sizes, varying, fixed) : o.view.sizes;
      bool pads = arg < args.size() && (o.storage->varies() ||
                                        (pads_any(rule, args, arg, o.view.sizes, varying, fixed) && box != o.view.sizes));
      if (pads && !holds_own_type(o)) return std::nullopt;
      boxes.push_back(pads ? std::optional<Box>(std::move(box)) : std::nullopt);
    }
  return boxes;
}

// The results' boxes (the meta kernel's on the inputs' boxes) and the sizes each varies in: where
// the probe's larger boxes move a dimension (else where it is padded or has a varying size).
// Nothing where a box cannot hold its result or a result is a view of another type.
struct ResultBoxes {
  std::vector<Box> boxes;
  std::vector<std::vector<int64_t>> varying, strides;  // per result: the sizes that vary, and their strides
};
std::optional<ResultBoxes> result_boxes(const c10::OperatorHandle& op, const OpPlan& plan,
                                        const std::vector<c10::IValue>& args, const MetaResult& box_meta,
                                        const std::vector<exec::Operand>& outputs, const std::vector<int64_t>& varying,
                                        bool duck_sizing) {
  std::vector<at::Tensor> metas = destination_metas(plan, box_meta);
  if (metas.size() != outputs.size()) return std::nullopt;
  std::shared_ptr<const MetaResult> probe_meta = box_metadata(op, plan, args, varying, duck_sizing, /*probe=*/1);
  std::vector<at::Tensor> probes = probe_meta ? destination_metas(plan, *probe_meta) : std::vector<at::Tensor>{};
  ResultBoxes r;
  r.varying.resize(outputs.size());
  r.strides.resize(outputs.size());
  for (size_t k = 0; k < outputs.size(); ++k) {
    Box box(metas[k].sizes().begin(), metas[k].sizes().end());
    const std::vector<int64_t>& sizes = outputs[k].view.sizes;
    if (!holds(box, sizes) || !holds_own_type(outputs[k])) return std::nullopt;
    bool probed = probes.size() == metas.size() && probes[k].dim() == metas[k].dim();
    for (size_t d = 0; d < sizes.size(); ++d) {
      bool varies = probed ? probes[k].size(d) != box[d]
                           : box[d] != sizes[d] || std::binary_search(varying.begin(), varying.end(), sizes[d]);
      if (!varies || sizes[d] <= 1) continue;
      r.varying[k].push_back(sizes[d]);
      r.strides[k].push_back(outputs[k].view.strides[d]);
      if (plan.entry->options.padding->results_in_buckets) box[d] = box_size(sizes[d], varying);
    }
    std::sort(r.varying[k].begin(), r.varying[k].end());
    r.boxes.push_back(std::move(box));
  }
  return r;
}

// Removes the operands of out= arguments, which a padded call only writes: read, their exact-size
// storages would make a program per size (arange's).
void drop_out_arguments(const c10::FunctionSchema& schema, Inputs& in) {
  std::vector<exec::Operand> kept;
  kept.reserve(in.operands.size());
  for (size_t arg = 0, k = 0; arg < in.count.size(); ++arg) {
    bool out = arg < schema.arguments().size() && schema.arguments()[arg].is_out();
    for (size_t n = 0; n < in.count[arg]; ++n, ++k)
      if (!out) kept.push_back(std::move(in.operands[k]));
    if (out) in.count[arg] = 0;
  }
  in.operands = std::move(kept);
}

// `marked` with the call's varying sizes that divide one of the result's varying sizes: a result
// [B*L, N] of inputs varying in L keeps L, so that a view splitting B*L into [B, H, L, D] (even
// transposed) finds it. Not those dividing a product of several dimensions: a [B, H, L, D] cache
// would keep every earlier length dividing H·L·D, and box a later multiple of it (L = 48, a
// length 16 seen) as a new size.
std::vector<int64_t> with_factors(std::vector<int64_t> marked, const std::vector<int64_t>& result_varying,
                                  const std::vector<int64_t>& varying) {
  for (int64_t n : varying)
    if (std::any_of(result_varying.begin(), result_varying.end(), [&](int64_t m) { return m % n == 0; }))
      marked.push_back(n);
  std::sort(marked.begin(), marked.end());
  marked.erase(std::unique(marked.begin(), marked.end()), marked.end());
  return marked;
}

// A result's marks: the runs of its dimensions holding a varying size, in PyTorch's order and,
// for a result stored transposed (attention's [B, H, L, D] in [B, L, H, D] order), in its storage's:
// the view merging B and L that a projection reads next then finds B·L marked, where otherwise it
// saw an unmarked split of B·L·H·D and took the other part (H·D) for a varying size too.
std::vector<int64_t> marks_in_layout(const exec::View& view, const std::vector<int64_t>& result_varying) {
  std::vector<int64_t> marked = marks(view.sizes, result_varying);
  if (view.is_contiguous() || !view.is_dense()) return marked;
  std::vector<int64_t> stored;
  for (int64_t d : view.storage_order()) stored.push_back(view.sizes[d]);
  for (int64_t n : marks(stored, result_varying)) marked.push_back(n);
  std::sort(marked.begin(), marked.end());
  marked.erase(std::unique(marked.begin(), marked.end()), marked.end());
  return marked;
}

bool pads_result(const ResultBoxes& results, const std::vector<exec::Operand>& outputs, size_t k) {
  return results.boxes[k] != outputs[k].view.sizes || !results.varying[k].empty();
}

// Gives each input with a box its padding.
void pad_inputs(const PaddingRule& rule, const std::vector<c10::IValue>& args, const std::vector<int64_t>& varying,
                bool duck_sizing, std::vector<std::optional<Box>>& boxes, Inputs& in) {
  for (size_t arg = 0, k = 0; arg < in.count.size(); ++arg)
    for (size_t n = 0; n < in.count[arg]; ++n, ++k) {
      if (!boxes[k]) continue;
      const exec::Operand& o = in.operands[k];
      const std::vector<int64_t>& sizes = o.view.sizes;
      std::vector<bool> fixed = fixed_dims(*o.storage, sizes, o.view.strides, duck_sizing);
      in.operands[k].padding = padding_of(std::move(*boxes[k]), sizes, [&](size_t d) {
        return std::binary_search(varying.begin(), varying.end(), sizes[d]) && !fixed[d] &&
               (!rule.paddable || rule.paddable(args, arg, static_cast<int64_t>(d)));
      }, rule.fill);
    }
}

// Gives each result that runs padded its padding, and `marked` what its storage will vary in.
void pad_results(ResultBoxes& results, const std::vector<int64_t>& varying, std::vector<exec::Operand>& outputs,
                 std::vector<std::vector<int64_t>>& marked, std::vector<std::vector<int64_t>>& strides) {
  marked.clear();
  strides.clear();
  for (size_t k = 0; k < outputs.size(); ++k) {
    if (!pads_result(results, outputs, k)) continue;
    const std::vector<int64_t>& sizes = outputs[k].view.sizes;
    const std::vector<int64_t>& result_varying = results.varying[k];
    outputs[k].padding = padding_of(std::move(results.boxes[k]), sizes, [&](size_t d) {
      return std::find(result_varying.begin(), result_varying.end(), sizes[d]) != result_varying.end();
    });
    marked.push_back(with_factors(marks_in_layout(outputs[k].view, result_varying), result_varying, varying));
    strides.push_back(std::move(results.strides[k]));
  }
}

// Per input operand, whether the rule reads it by rows (PaddingRule::reads_rows); empty: all.
std::vector<bool> reading_rows(const PaddingRule& rule, const Inputs& in) {
  std::vector<bool> reads;
  if (!rule.reads_rows) return reads;
  for (size_t arg = 0; arg < in.count.size(); ++arg) reads.insert(reads.end(), in.count[arg], rule.reads_rows(arg));
  return reads;
}

}  // namespace

std::shared_ptr<const MetaResult> pad_operands(const c10::OperatorHandle& op, const OpPlan& plan,
                                               const std::vector<c10::IValue>& args, const graph::Origin* origin,
                                               Inputs& in, std::vector<exec::Operand>& outputs) {
  // A compiled graph runs at the sizes its capture saw (compile/buckets.py pads its inputs itself),
  // and its capture starts by storing every input exactly: padding there would only turn the
  // graph's slices and transposes into gathers.
  if (exec::capturing()) return nullptr;
  const PaddingRule& rule = *plan.entry->options.padding;
  std::optional<std::vector<int64_t>> called_varying = call_varying(rule, args, origin, in, outputs);
  if (!called_varying) return nullptr;
  const std::vector<int64_t>& varying = *called_varying;
  // An unmarked operand keeps its sizes where PyTorch accepts them beside the boxes (a weight beside
  // padded activations), for an op whose meta kernel checks every size that pairs up (a matmul's;
  // attention's does not check its mask) and unless what varies comes from the line's history;
  // else every size of it that varies is padded (a mask made at the exact length).
  bool duck_sizing = !rule.meta_checks_sizes || seeds_here(rule, in);
  std::optional<std::vector<std::optional<Box>>> inputs;
  std::shared_ptr<const MetaResult> box_meta;
  bool pads_input = false;
  while (true) {
    inputs = input_boxes(rule, args, in, varying, duck_sizing);
    if (!inputs) return nullptr;
    pads_input = std::any_of(inputs->begin(), inputs->end(), [](const auto& b) { return b.has_value(); });
    if (!pads_input && !rule.seeds) return nullptr;
    box_meta = box_metadata(op, plan, args, varying, duck_sizing);
    if (box_meta) break;
    if (duck_sizing) return nullptr;
    duck_sizing = true;  // PyTorch refused an unmarked tensor's exact sizes beside the boxes: pad it too
  }
  std::optional<ResultBoxes> results = result_boxes(op, plan, args, *box_meta, outputs, varying, duck_sizing);
  if (!results) return nullptr;
  bool pads_output = false;
  for (size_t k = 0; k < outputs.size(); ++k) pads_output |= pads_result(*results, outputs, k);
  if (!pads_input && !pads_output) return nullptr;  // a seeding op (arange) whose sizes did not vary
  pad_inputs(rule, args, varying, duck_sizing, *inputs, in);
  drop_out_arguments(op.schema(), in);
  pad_results(*results, varying, outputs, in.varying, in.varying_strides);
  const LoweringOptions& options = plan.entry->options;
  bool checks = options.device_check && (!options.device_check_when || options.device_check_when(args));
  if (rule.row_dims && !rule.needs_sizes && !checks)
    exec::share_storage_order(in.operands, outputs, rule.row_dims(args), reading_rows(rule, in));
  return box_meta;
}

std::vector<VaryingResult> varying_results(const std::vector<exec::Operand>& outputs, Inputs& in) {
  std::vector<VaryingResult> marks;
  size_t next = 0;
  for (const exec::Operand& o : outputs)
    if (o.padding) {
      marks.push_back({o.storage, std::move(in.varying.at(next)), std::move(in.varying_strides.at(next))});
      ++next;
    }
  return marks;
}

hlo::Value LoweringContext::exact_size(size_t i, int64_t dim, size_t k) const {
  const hlo::Value& sizes = sizes_.at(i).at(k);
  int64_t d = dim < 0 ? dim + sizes.type.dims.at(0) : dim;
  return b.reshape(b.slice(sizes, {d}, {d + 1}, {1}), {});
}

hlo::Value LoweringContext::inside(size_t i, size_t k) const {
  const hlo::Value& x = values_.at(i).at(k);
  hlo::TensorType index{DType::kS64, x.type.dims};
  hlo::Value mask = b.constant(1, {DType::kBool, x.type.dims});
  for (int64_t d = 0; d < x.type.rank(); ++d) {
    hlo::Value size = b.broadcast_in_dim(exact_size(i, d, k), x.type.dims, {});
    mask = b.binary(hlo::BinaryOp::kAnd, mask, b.compare(hlo::Compare::kLT, b.iota(index, d), size));
  }
  return mask;
}

}  // namespace torchtpu::aten
