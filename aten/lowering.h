// The lowering registry: each ATen op maps to a short function that emits its StableHLO.
//
// One boxed kernel (aten/boxed_kernel.cpp) serves every registered op: it computes output metadata
// by running the op on meta tensors (so errors, dtypes and shapes are PyTorch's own), hands the
// lowering the op's inputs as StableHLO values, and writes the results into new tensors, `self`
// (in-place) or `out=` tensors according to the schema. A lowering therefore only describes the
// functional computation. gcd, gcd_ and gcd.out, as aten/ops/binary.cpp registers them (`gcd` is a
// helper there; tests/python/test_source_tree.py checks that this example is compiled code):
//
//   TORCHTPU_LOWERINGS(binary) {
//     register_with_variants("gcd", {""}, [](LoweringContext& c) { return Values{gcd(c, c.elementwise_input(0), c.elementwise_input(1))}; });
//   }
//
// Plain arithmetic on values is written with operators (`x * y + 1`, hlo/operators.h); the
// builder's calls emit everything else, and aten/ops/math.h's Math rounds each step where CPU
// computes in bfloat16/float16.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>

#include <functional>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "aten/dtype_support.h"
#include "exec/op_call.h"
#include "hlo/builder.h"
#include "hlo/operators.h"

namespace torchtpu::aten {

class LoweringContext {
 public:
  LoweringContext(hlo::Builder& b, std::vector<std::vector<hlo::Value>> values,
                  const std::vector<c10::IValue>& args, std::vector<hlo::TensorType> outputs)
      : b(b), values_(std::move(values)), args_(args), outputs_(std::move(outputs)) {}

  hlo::Builder& b;

  // The value of tensor / Scalar argument `i` (schema position), cast to the first output's dtype.
  hlo::Value input(size_t i) const;
  // The same, cast to `dtype`.
  hlo::Value input_as(size_t i, DType dtype) const;
  // The same in the argument's own dtype.
  hlo::Value input_uncast(size_t i) const { return values_.at(i).at(0); }
  // input(i) broadcast to the first output's shape: the operand of an element-wise op.
  hlo::Value elementwise_input(size_t i) const { return broadcast_to_output(input(i)); }
  // `v` broadcast (numpy-style, trailing dimensions aligned) to the first output's shape.
  hlo::Value broadcast_to_output(const hlo::Value& v) const;
  // PyTorch's type promotion of tensor/Scalar arguments i and j (at::result_type rules).
  DType promoted(size_t i, size_t j) const;
  bool has(size_t i) const { return i < values_.size() && !values_[i].empty(); }
  // All values of a Tensor[] argument.
  const std::vector<hlo::Value>& list(size_t i) const { return values_.at(i); }
  // Non-tensor argument `i` as PyTorch passed it (ints, bools, int lists, optionals).
  const c10::IValue& arg(size_t i) const { return args_.at(i); }
  size_t num_args() const { return args_.size(); }
  std::vector<int64_t> int_list(size_t i) const;

  // The precision_config of a matmul or convolution (LoweringOptions::matmul): as the user set
  // it when the op was called.
  hlo::Builder::Precision precision() const { return precision_; }
  void set_precision(hlo::Builder::Precision p) { precision_ = p; }

  // The rng_bit_generator state of a random op (LoweringOptions::random).
  hlo::Value rng_state() const { return values_.at(args_.size()).at(0); }

  // Adds a condition the program checks on the device (a 0-d bool, true = fine) for ops
  // registered with LoweringOptions::device_check; see there.
  void check_on_device(const hlo::Value& ok) {
    device_ok_ = device_ok_ ? b.binary(hlo::BinaryOp::kAnd, *device_ok_, ok) : ok;
  }
  hlo::Value device_ok() const { return device_ok_ ? *device_ok_ : b.constant(1, {DType::kBool, {}}); }

  // Padded calls (LoweringOptions::padding): inputs and outputs are boxes of bucket sizes whose
  // padded positions hold the rule's fill. With PaddingRule::needs_sizes, the exact size of
  // dimension `dim` of tensor argument `i` (element `k` of a list), as a 0-d s64 value.
  bool padded() const { return !sizes_.empty(); }
  hlo::Value exact_size(size_t i, int64_t dim, size_t k = 0) const;
  // A bool mask shaped like the box of tensor argument `i`: true inside its exact sizes.
  hlo::Value inside(size_t i, size_t k = 0) const;
  void set_exact_sizes(std::vector<std::vector<hlo::Value>> sizes) { sizes_ = std::move(sizes); }

  const hlo::TensorType& out(size_t i = 0) const { return outputs_.at(i); }
  size_t num_outputs() const { return outputs_.size(); }
  DType compute_dtype() const { return outputs_.at(0).dtype; }

  // Common shorthands.
  hlo::Value scalar(double v, DType dtype) const { return b.constant(v, {dtype, {}}); }
  hlo::Value full(double v, const hlo::Value& like) const { return b.constant(v, like.type); }
  hlo::Value to_out(const hlo::Value& v, size_t i = 0) const;  // cast + broadcast to output i

 private:
  std::vector<std::vector<hlo::Value>> values_;
  const std::vector<c10::IValue>& args_;
  std::vector<hlo::TensorType> outputs_;
  std::optional<hlo::Value> device_ok_;
  std::vector<std::vector<hlo::Value>> sizes_;  // per argument, s64[rank] per tensor
  hlo::Builder::Precision precision_ = hlo::Builder::Precision::kHighest;
};

// The float32 matmul precision in force on this thread: a torch.tpu.precision(...) override, else
// torch.set_float32_matmul_precision ("highest" -> kHighest, "high" -> kHigh, "medium" -> kDefault).
hlo::Builder::Precision matmul_precision();
// torch.tpu.precision(...): overrides the global setting on this thread (nullopt: none).
void set_matmul_precision_override(std::optional<hlo::Builder::Precision> p);

using Lowering = std::function<std::vector<hlo::Value>(LoweringContext&)>;

// Shorthands for the lowering files.
using hlo::BinaryOp;
using hlo::Compare;
using hlo::UnaryOp;
using hlo::Value;
using Values = std::vector<hlo::Value>;

// Scalar arguments reach a program as runtime 0-d inputs (a new learning rate must not compile a
// new program), so a lowering must not branch on their values. The few that must (a norm's `ord`,
// var's `correction`) list them here: those values become part of the cache key instead, and
// arg(i) gives them.
using StaticScalars = std::vector<size_t>;

// Output metadata for ops PyTorch has no meta kernel for (the _foreach_* family): given the
// arguments as meta tensors, the op's returns as meta tensors.
using MetaFn = std::function<std::vector<c10::IValue>(const c10::FunctionSchema&,
                                                      const std::vector<c10::IValue>& meta_args)>;

// Arguments for which the op runs on the CPU instead (a case the lowering does not cover yet,
// such as a transposed convolution's backward); counted like any other fallback.
using CpuWhen = std::function<bool(const std::vector<c10::IValue>& args)>;

// An op that runs padded when sizes vary (docs/design.md, "Shapes that change"): one program per
// bucket instead of one per size. Its lowering sees boxes: padded positions of each input read as
// `fill` (the identity of what the op reduces over them), and results are stored only at their
// exact sizes, so garbage it computes in the padding is never seen. `paddable` says which
// dimensions of tensor argument `arg` may be padded, given the call's arguments (all when unset:
// element-wise ops); a lowering
// whose result depends on exact sizes (cat's offsets, attention's key length) sets `needs_sizes`
// and reads them with LoweringContext::exact_size.
struct PaddingRule {
  exec::Fill fill = exec::Fill::kZero;
  std::function<bool(const std::vector<c10::IValue>& args, size_t arg, int64_t dim)> paddable = nullptr;
  bool needs_sizes = false;
  // The calls the rule applies to (all when unset); the others run at exact sizes.
  std::function<bool(const std::vector<c10::IValue>& args)> applies = nullptr;
  // Sizes that change between calls at one line start padding there (aten/varying_sizes.h): ops
  // that grow a tensor from itself (cat: a KV cache, generated ids). Other ops pad only what
  // reads padded tensors: a line that handles many tensors (an optimizer's state for each
  // parameter) is not a size that varies.
  bool seeds = false;
  // The op's metadata on boxes, where PyTorch's meta kernel would shrink them back to exact
  // sizes (arange's out= is resized to its length); PyTorch's (or LoweringOptions::meta) if unset.
  MetaFn box_meta = nullptr;
  // Its results are boxed at the buckets of their exact sizes, not at the sizes its metadata
  // gives on the boxes (cat's: the sum of its parts' boxes, so that a cache growing by one
  // position would be stored one row past a bucket, and compile once more per bucket); its
  // lowering fits what it computes into the smaller box.
  bool results_in_buckets = false;
  // Its results are rows independent of one another: the dimensions before `row_dims(args)`,
  // each result row computed from the same row of the inputs `reads_rows` accepts (all where
  // unset) and from inputs that hold no rows (a weight, a norm's scale). Where the padded operands
  // share one layout in those rows, the program reads and writes their buffers as stored instead
  // of gathering boxes (exec::share_storage_order). Element-wise ops: every dimension is a row.
  std::function<int64_t(const std::vector<c10::IValue>& args)> row_dims = nullptr;
  std::function<bool(size_t arg)> reads_rows = nullptr;
  // Its meta kernel checks every pair of sizes that must match (a matmul's contraction): an
  // unmarked operand then keeps sizes that only equal a varying one (a weight [3·D, D] beside
  // activations of B·L = 3·D rows) wherever PyTorch accepts them beside the boxes.
  bool meta_checks_sizes = false;
};
// The rule of the matmuls (PaddingRule::meta_checks_sizes). With `reads_rows`, a product of
// matrices whose result rows are the rows of the arguments it accepts (mm's first, addmm's first two).
inline PaddingRule matmul_padding(std::function<bool(size_t arg)> reads_rows = nullptr) {
  PaddingRule rule;
  rule.meta_checks_sizes = true;
  if (reads_rows) {
    rule.row_dims = [](const std::vector<c10::IValue>&) { return int64_t{1}; };
    rule.reads_rows = std::move(reads_rows);
  }
  return rule;
}
// The rule of the element-wise families.
inline PaddingRule pointwise_padding(exec::Fill fill = exec::Fill::kZero) {
  PaddingRule rule;
  rule.fill = fill;
  rule.row_dims = [](const std::vector<c10::IValue>&) { return std::numeric_limits<int64_t>::max(); };
  return rule;
}
// The rule of an op over the trailing dimensions of argument 0, from the one `first_dim` gives:
// the rows before it are independent.
inline PaddingRule rowwise_padding(std::function<int64_t(const std::vector<c10::IValue>& args)> first_dim,
                                   std::function<bool(size_t arg)> reads_rows, exec::Fill fill = exec::Fill::kZero) {
  PaddingRule rule;
  rule.fill = fill;
  rule.row_dims = std::move(first_dim);
  rule.reads_rows = std::move(reads_rows);
  return rule;
}

struct LoweringOptions {
  StaticScalars static_scalars;
  MetaFn meta;
  CpuWhen cpu_when;
  // The op draws random numbers: the program gets an rng_bit_generator state from the op's
  // Generator argument (or the device's default one), available as rng_state().
  bool random = false;
  // The op checks its input on the device (indices in range): the program gets an extra bool
  // output, the AND of the lowering's check_on_device() calls, read at the next host sync; false
  // raises IndexError with this message (RuntimeError when device_check_runtime_error, as CPU's
  // gather and scatter). Asynchronous, like CUDA's device-side asserts.
  const char* device_check = nullptr;
  bool device_check_runtime_error = false;
  // A str argument that, when not empty, is the check's message instead (_assert_async.msg).
  int device_check_message_arg = -1;
  // The calls the check applies to (the others get no check output); decided by argument dtypes,
  // which the key a lowering is shared by includes. Every call when empty.
  std::function<bool(const std::vector<c10::IValue>& args)> device_check_when;
  // The output shape depends on Scalar values (arange): they join the output-metadata cache key
  // but stay runtime inputs of the program.
  bool shape_from_scalars = false;
  // Written arguments may not share memory with any input, not even as the same view (CPU's cat,
  // gather, index_select, index_put and scatter raise; element-wise ops only refuse partial overlap).
  bool no_aliasing = false;
  // With no_aliasing, the out= may still be an index argument itself (CPU's gather allows it),
  // unless this is set (CPU's index_select refuses that too).
  bool index_is_not_out = false;
  // A matmul or convolution: the float32 precision in force when it is called
  // (torch.set_float32_matmul_precision, torch.tpu.precision) joins its key; see precision().
  bool matmul = false;
  // Some PyTorch release of the supported window lacks the op (cholesky: gone in 2.14), so install
  // skips the name there instead of rejecting it as a typo.
  bool not_in_every_release = false;
  // Runs padded where sizes vary; unset: always at exact sizes (a program per size).
  std::optional<PaddingRule> padding = std::nullopt;
  // The dtypes CPU's kernel refuses that PyTorch's meta kernel lets through: set at install from
  // the op family's refuse_on_cpu declarations.
  std::vector<CpuRefusal> cpu_refusals;
  // Arguments the lowering never reads (the attention backward's max_q and max_k, the longest
  // sequence of a batch): left out of the program's key, so that a new length keys no new program
  // and a fused window holding the op stays one window.
  std::vector<size_t> unread_args;
};

// Option factories for the common cases.
inline LoweringOptions random_op() {
  LoweringOptions o;
  o.random = true;
  return o;
}
inline LoweringOptions matmul_op() {
  LoweringOptions o;
  o.matmul = true;
  return o;
}
inline LoweringOptions checked(const char* message) {
  LoweringOptions o;
  o.device_check = message;
  return o;
}
// gather/scatter-style: CPU raises RuntimeError for their out-of-range indices, and refuses any
// sharing of memory between the destination and the inputs.
inline LoweringOptions checked_runtime(const char* message) {
  LoweringOptions o = checked(message);
  o.device_check_runtime_error = true;
  o.no_aliasing = true;
  return o;
}
// `o` for an op that runs padded under `rule` (LoweringOptions::padding).
inline LoweringOptions padded(LoweringOptions o, PaddingRule rule = {}) {
  o.padding = std::move(rule);
  return o;
}
// Pads only the dimensions of the tensor arguments `args`: the others are read at exact sizes.
PaddingRule padding_of_args(std::vector<size_t> args, exec::Fill fill = exec::Fill::kZero);

// Inside its scope, ops registered without a padding rule get `rule`: a file of element-wise ops
// opens its TORCHTPU_LOWERINGS block with `PaddedFamily elementwise;`.
class PaddedFamily {
 public:
  explicit PaddedFamily(PaddingRule rule = {});
  ~PaddedFamily();
  PaddedFamily(const PaddedFamily&) = delete;
  PaddedFamily& operator=(const PaddedFamily&) = delete;
};

// `o` for an op some PyTorch release of the window lacks (LoweringOptions::not_in_every_release).
inline LoweringOptions in_some_releases(LoweringOptions o) {
  o.not_in_every_release = true;
  return o;
}
inline LoweringOptions with_meta(MetaFn meta) {
  LoweringOptions o;
  o.meta = std::move(meta);
  return o;
}
// PyTorch's own meta kernel of `name`.`overload` ("aten::add", "Tensor") on meta arguments: the returns.
inline std::vector<c10::IValue> meta_kernel(const std::string& name, const std::string& overload,
                                            std::vector<c10::IValue> stack) {
  c10::Dispatcher::singleton()
      .findSchemaOrThrow(name.c_str(), overload.c_str())
      .callBoxedForDispatchKey(c10::DispatchKey::Meta, stack);
  return stack;
}
// PyTorch's own meta kernel, after `check`: the argument checks CPU makes that the meta kernel
// skips (it would otherwise compute something where CPU raises).
inline MetaFn checked_meta(std::function<void(const std::vector<c10::IValue>& args)> check) {
  return [check](const c10::FunctionSchema& schema, const std::vector<c10::IValue>& args) {
    check(args);
    return meta_kernel(schema.name(), schema.overload_name(), args);
  };
}
// A batch of matrices laid out column-major, as LAPACK's results on CPU.
inline at::Tensor column_major(const at::Tensor& t) { return t.mT().contiguous().mT(); }
// PyTorch's meta kernel with return `i` column-major: what torch.compile's fake tensors say for a
// device that is not CUDA (the meta kernel, run on meta tensors, takes CUDA's row-major layout).
// Returns that are not matrices (empty when not computed) and out= tensors stay as they are.
inline MetaFn column_major_result(size_t i) {
  return [i](const c10::FunctionSchema& schema, const std::vector<c10::IValue>& args) {
    std::vector<c10::IValue> returns = meta_kernel(schema.name(), schema.overload_name(), args);
    if (schema.overload_name().empty() && i < returns.size() && returns[i].toTensor().dim() >= 2)
      returns[i] = column_major(returns[i].toTensor());
    return returns;
  };
}
// An op PyTorch has no meta kernel for whose result is shaped like argument `like` (a gradient
// like the forward's input, a scan like its input); an out= form's output is resized to it.
MetaFn shaped_like(size_t like);
// Ops that only write arguments PyTorch allocated for them (no returns, no meta kernel).
inline LoweringOptions written_only() {
  return with_meta([](const c10::FunctionSchema&, const std::vector<c10::IValue>&) { return std::vector<c10::IValue>{}; });
}

// Registers `fn` for each op name ("add.Tensor", "add_.Tensor", "add.out").
void register_lowering(std::initializer_list<const char*> ops, Lowering fn,
                       LoweringOptions options = {});

// Registers `fn` for `name.overload`, its in-place form `name_.overload` and its out= form
// (`name.out`, `name.Tensor_out` or `name.OutTensor` for the "Tensor" or empty overload,
// `name.<overload>_out`, `name.out_<mode>` for "Tensor_<mode>" or `name.Out<overload>` otherwise),
// for each overload. Forms PyTorch does not define are skipped at install time.
void register_with_variants(const char* name, std::initializer_list<const char*> overloads,
                            Lowering fn, LoweringOptions options = {});

// CPU's kernel for `name` ("abs": its in-place and out= forms and every overload, unless the
// refusal names one) refuses a dtype PyTorch's meta kernel lets through: tpu raises CPU's error
// too. Declared in the op's family file, in a TORCHTPU_LOWERINGS block; install attaches it to
// each registered form (LoweringOptions::cpu_refusals) and rejects a name no lowering has.
void refuse_on_cpu(const char* name, CpuRefusal refusal);

// A registered lowering and its options.
struct LoweringEntry {
  Lowering fn;
  LoweringOptions options;
};
// The lowering registered for `op` ("add.Tensor"), or null.
const LoweringEntry* find_lowering(const std::string& op);

// Registers a function that adds lowerings made of other ops' lowerings (the _foreach_* ops, from
// their element ops): it runs at install time, once every family has registered its own.
void register_derived_lowerings(std::function<void()> derive);

// Runs the op on the CPU (copying in and out), counted in torchtpu.metrics.cpu_fallbacks();
// raises instead when TORCHTPU_FALLBACK=error.
void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// Installs the boxed kernel for every registered op on the PrivateUse1 key; once, at import.
// Throws, installing nothing, when a registered name is no ATen op (except the in-place and out=
// spellings register_with_variants guesses, and not_in_every_release ops) or an op is registered
// twice.
void install_lowerings();
// The ops install_lowerings() installed ("add.Tensor"), sorted.
const std::vector<std::string>& installed_lowerings();

// Registers at static-initialization time: TORCHTPU_LOWERINGS(unary) { register_lowering(...); }
#define TORCHTPU_LOWERINGS(family)                       \
  static void register_##family##_lowerings();           \
  static const bool family##_registered = [] {           \
    register_##family##_lowerings();                     \
    return true;                                         \
  }();                                                   \
  static void register_##family##_lowerings()

}  // namespace torchtpu::aten
