// The kernel behind every lowered op (see aten/lowering.h): one instance per op, holding its
// decoded schema (aten/op_plan.h).
#include <ATen/EmptyTensor.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/result_type.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "aten/device.h"
#include "aten/dtype_support.h"
#include "aten/generator.h"
#include "aten/lowering.h"
#include "aten/lowering_registry.h"
#include "aten/op_plan.h"
#include "aten/boxed_call.h"
#include "aten/ops/lowering_util.h"
#include "aten/padded_call.h"
#include "aten/prepared_args.h"
#include "aten/origin.h"
#include "aten/scalar_cache.h"
#include "aten/tensor_operand.h"
#include "aten/varying_sizes.h"
#include "exec/capture.h"
#include "exec/executor.h"
#include "graph/key_text.h"

namespace torchtpu::aten {
namespace {

std::vector<std::string>& installed() {
  static std::vector<std::string> names;
  return names;
}

std::string full_name(const c10::OperatorHandle& op) {
  const auto& n = op.operator_name();
  return n.overload_name.empty() ? n.name : n.name + "." + n.overload_name;
}

at::Tensor to_meta(const at::Tensor& t) {
  if (!t.defined() || !on_tpu(t)) return t;
  return at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::kMeta));
}

// A zeroed CPU tensor of t's geometry: zeros, so that a kernel's checks of values meet valid ones.
at::Tensor to_cpu_stand_in(const at::Tensor& t) {
  if (!t.defined() || !on_tpu(t)) return t;
  int64_t span = t.numel() > 0;
  for (int64_t d = 0; d < t.dim() && span; ++d) span += (t.size(d) - 1) * t.stride(d);
  return at::zeros({span}, t.options().device(c10::kCPU)).as_strided(t.sizes(), t.strides());
}

// A Generator argument becomes None: shapes never depend on it, and some of PyTorch's Python meta
// kernels (exponential_'s, from torch._refs) refuse a generator.
c10::IValue to_meta(const ArgPlan& arg, const c10::IValue& v) {
  if (v.isGenerator()) return c10::IValue();
  return map_tensors(arg, v, [](const at::Tensor& t) { return to_meta(t); });
}

void append_key(std::string& key, const c10::IValue& v) {
  if (v.isNone()) {
    key += 'N';
  } else if (v.isBool()) {
    key += v.toBool() ? "T" : "F";
  } else if (v.isInt()) {
    graph::append_number(key, v.toInt());
  } else if (v.isDouble()) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%a", v.toDouble());  // exact: no two values share a key
    key += buf;
  } else if (v.isString()) {
    key += v.toStringRef();
  } else if (v.isIntList()) {
    for (const c10::IValue& i : v.toListRef()) {
      graph::append_number(key, i.toInt());
      key += ',';
    }
  } else if (v.isList()) {
    key += '[';
    for (const c10::IValue& e : v.toListRef()) {
      if (e.isTensor()) key += e.toTensor().defined() ? 't' : 'N';
      else append_key(key, e);
      key += ',';
    }
    key += ']';
  } else if (v.isDevice()) {
    key += v.toDevice().str();
  } else {
    key += v.tagKind();
  }
}

// A Scalar reaches the program as a runtime 0-d input (a cached device copy of its value).
void add_scalar(Inputs& in, const c10::Scalar& s, int device) {
  in.scalars.push_back(device_scalar(s, device));
  in.operands.push_back({in.scalars.back().get(), {scalar_dtype(s), {}, {}, 0}});
  in.key += 's';
}

// A CPU 0-d tensor's value. Wrapped Python numbers (x + 1.0) are read in place: item() would go
// through the dispatcher, a microsecond on every such op.
c10::Scalar cpu_scalar_value(const at::Tensor& t) {
  if (t.is_conj() || t.is_neg()) return t.item();
  switch (t.scalar_type()) {
    case c10::kDouble: return *t.const_data_ptr<double>();
    case c10::kLong: return *t.const_data_ptr<int64_t>();
    case c10::kBool: return *t.const_data_ptr<bool>();
    case c10::kComplexDouble: return *t.const_data_ptr<c10::complex<double>>();
    default: return t.item();
  }
}

void add_tensor(Inputs& in, const at::Tensor& t, int device, const std::string& op) {
  if (on_tpu(t)) {
    in.operands.push_back(operand(t));
    in.key += 't';
  } else if (t.dim() == 0) {  // a CPU scalar tensor (wrapped number) mixes with tpu tensors
    add_scalar(in, cpu_scalar_value(t), device);
  } else {
    TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two "
                "devices, tpu:", device, " and ", t.device(), "! (in ", op, ")");
  }
}

bool is_unread(const OpPlan& plan, size_t arg) {
  const std::vector<size_t>& unread = plan.entry->options.unread_args;
  return std::find(unread.begin(), unread.end(), arg) != unread.end();
}

Inputs gather_inputs(const OpPlan& plan, const std::vector<c10::IValue>& args, int device) {
  Inputs in;
  in.key = plan.name;
  size_t operands = 0;  // at most: a list's elements, one for anything else
  for (const c10::IValue& a : args) operands += a.isList() ? a.toListRef().size() : 1;
  in.operands.reserve(operands);
  in.count.reserve(args.size() + 1);
  for (size_t i = 0; i < args.size(); ++i) {
    size_t before = in.operands.size();
    const c10::IValue& a = args[i];
    const ArgPlan& arg = plan.args[i];
    in.key += '|';
    if (arg.kind == ArgKind::kScalar && !arg.static_value && !a.isNone()) {
      add_scalar(in, a.toScalar(), device);
    } else if (arg.kind == ArgKind::kScalarList && !arg.static_value) {
      for (const c10::IValue& e : a.toListRef()) add_scalar(in, e.toScalar(), device);
    } else if (a.isTensor() || arg.tensor_list()) {
      if (a.isList()) append_key(in.key, a);
      for_each_tensor(a, [&](const at::Tensor& t) {
        if (t.defined()) add_tensor(in, t, device, plan.name);
      });
    } else if (!is_unread(plan, i)) {
      append_key(in.key, a);
    }
    in.count.push_back(in.operands.size() - before);
  }
  return in;
}

// A fresh rng_bit_generator state from the op's Generator argument or the device default.
void add_rng_state(Inputs& in, const std::vector<c10::IValue>& args, int device) {
  at::Generator gen = default_generator(static_cast<c10::DeviceIndex>(device));
  for (const c10::IValue& a : args)
    if (a.isGenerator() && a.toGenerator().defined()) gen = a.toGenerator();
  std::array<uint64_t, 2> state = gen.get<TpuGenerator>()->next_state();
  auto storage = std::make_shared<exec::BufferRef>(device, sizeof(state));
  exec::upload(*storage, state.data(), DType::kU64);
  if (exec::capturing())  // a compiled graph draws a fresh state on every run
    exec::capture_random_state(storage->value(), [gen] { return gen.get<TpuGenerator>()->next_state(); });
  in.scalars.push_back(storage);
  in.operands.push_back({storage.get(), {DType::kU64, {2}, {1}, 0}});
  in.count.push_back(1);
}

char scalar_kind(const c10::IValue& a) { return a.isDouble() ? 'f' : a.isInt() ? 'i' : a.isBool() ? 'b' : 'c'; }

}  // namespace

int device_of(const std::vector<c10::IValue>& args) {
  int device = -1;
  for (const c10::IValue& a : args) {
    for_each_tensor(a, [&](const at::Tensor& t) {
      if (device < 0 && t.defined() && on_tpu(t)) device = t.device().index();
    });
    if (device < 0 && a.isDevice() && a.toDevice().type() == c10::DeviceType::PrivateUse1)
      device = a.toDevice().has_index() ? a.toDevice().index() : current_device();
  }
  return device < 0 ? current_device() : device;
}

std::string meta_key(const OpPlan& plan, const std::vector<c10::IValue>& args) {
  const bool scalar_values = plan.entry->options.shape_from_scalars;
  std::string key = plan.name;
  key.reserve(key.size() + 48 * args.size());
  auto add_tensor = [&key](const at::Tensor& t) {
    if (!t.defined()) {
      key += "u,";
      return;
    }
    std::string_view dtype = c10::toString(t.scalar_type());
    c10::IntArrayRef sizes = t.sizes(), strides = t.strides();
    graph::KeyWriter w(key, dtype.size() + 2 + sizes.size() * (2 * graph::KeyWriter::kNumberRoom + 2));
    // A wrapped Python number promotes like a Scalar (x_int * 2.5 is float32), a CPU 0-d tensor
    // by its own dtype (x_int * torch.tensor(2.5, dtype=torch.float64) is float64).
    w << dtype << (on_tpu(t) ? '[' : t.unsafeGetTensorImpl()->is_wrapped_number() ? 'w' : '<');
    for (size_t d = 0; d < sizes.size(); ++d) {
      w.number(sizes[d]) << ':';
      w.number(strides[d]) << ',';
    }
    w << ']';
  };
  for (size_t i = 0; i < args.size(); ++i) {
    const c10::IValue& a = args[i];
    key += '|';
    if (a.isTensor()) add_tensor(a.toTensor());
    else if (a.isTensorList()) for_each_tensor(a, add_tensor);
    else if (plan.args[i].tensor_list() && a.isList())
      for (const c10::IValue& e : a.toListRef()) e.isTensor() ? add_tensor(e.toTensor()) : void(key += "N,");
    else if (plan.args[i].static_value) append_key(key, a);  // the lowering branches on it: see LoweringCall
    else if (plan.args[i].kind == ArgKind::kScalar && !a.isNone() && !scalar_values) key += scalar_kind(a);
    else if (plan.args[i].kind == ArgKind::kScalarList && a.isList() && !scalar_values)
      for (const c10::IValue& e : a.toListRef()) key += scalar_kind(e);  // a new lr each step is no new key
    else append_key(key, a);
  }
  return key;
}

namespace {

// An in-place op writes its result into self, which must be able to hold it, as CPU checks:
// int_tensor.div_(2) raises (true division gives floats), and so does _foreach_div_ of integer
// tensors. Some meta kernels skip the check, so the functional form's metadata (its meta kernel,
// or the registry's MetaFn for ops PyTorch has none for) gives the result types.
void check_inplace_result_fits(const c10::FunctionSchema& schema, const std::vector<c10::IValue>& meta_args) {
  const std::string& name = schema.name();
  if (name.empty() || name.back() != '_' || meta_args.empty()) return;
  auto functional = c10::Dispatcher::singleton().findSchema(
      {name.substr(0, name.size() - 1), schema.overload_name()});
  if (!functional || functional->schema().arguments().size() != meta_args.size()) return;
  std::vector<c10::IValue> results(meta_args.begin(), meta_args.end());
  try {
    auto entry = lowering_registry().find(full_name(*functional));
    if (entry != lowering_registry().end() && entry->second.options.meta)
      results = entry->second.options.meta(functional->schema(), meta_args);
    else
      functional->callBoxedForDispatchKey(c10::DispatchKey::Meta, results);
  } catch (const c10::Error&) {
    return;  // the functional form has its own rules; the in-place meta kernel decided
  }
  if (results.empty()) return;
  std::vector<at::Tensor> outs, selves;
  for_each_tensor(results[0], [&](const at::Tensor& t) { outs.push_back(t); });
  for_each_tensor(meta_args[0], [&](const at::Tensor& t) { selves.push_back(t); });
  for (size_t k = 0; k < outs.size() && k < selves.size(); ++k)
    TORCH_CHECK(c10::canCast(outs[k].scalar_type(), selves[k].scalar_type()), "result type ",
                outs[k].scalar_type(), " can't be cast to the desired output type ", selves[k].scalar_type());
}

// CUDA's error for tensors on two devices (a CPU 0-d tensor is a scalar, welcome anywhere).
void check_same_device(const c10::FunctionSchema& schema, const std::vector<c10::IValue>& args) {
  std::optional<c10::Device> tpu, other;
  for (const c10::IValue& a : args)
    for_each_tensor(a, [&](const at::Tensor& t) {
      if (!t.defined() || (t.is_cpu() && t.dim() == 0)) return;
      if (on_tpu(t) && (!tpu || *tpu == t.device())) tpu = t.device();
      else if (!other) other = t.device();
    });
  TORCH_CHECK(!tpu || !other, "Expected all tensors to be on the same device, but found at least two devices, ",
              *tpu, " and ", *other, "! (in ", schema.name(),
              schema.overload_name().empty() ? "" : "." + schema.overload_name(), ")");
}

// CPU's error for arguments PyTorch's meta kernel rejects, which words many errors differently
// ("a and b must have same reduction dim" where CPU and CUDA say "mat1 and mat2 shapes cannot be
// multiplied (2x3 and 4x5)"): the op runs on zeroed CPU stand-ins of its arguments. Only ATen's
// ops (a collective's CPU kernel would talk to the process group), with arguments of up to 64 MB,
// and never a random op (it would draw from CPU's generator); returns when CPU has no kernel or
// accepts the arguments. Also asked when the op's program fails to lower or compile (in strict and
// debug modes, where that happens in the op's call).
void raise_cpu_error(const c10::OperatorHandle& op, const OpPlan& plan, const std::vector<c10::IValue>& args) {
  constexpr int64_t kMaxBytes = 64 << 20;
  const auto& schema_args = op.schema().arguments();
  bool random = std::any_of(schema_args.begin(), schema_args.end(), [](const c10::Argument& a) {
    c10::TypePtr t = a.type();
    if (auto opt = t->cast<c10::OptionalType>()) t = opt->getElementType();
    return t->kind() == c10::TypeKind::GeneratorType;
  });
  int64_t bytes = 0;
  for (const c10::IValue& a : args)
    for_each_tensor(a, [&](const at::Tensor& t) { bytes += t.defined() ? t.nbytes() : 0; });
  bool aten = op.schema().name().rfind("aten::", 0) == 0;
  if (!aten || random || bytes > kMaxBytes || !op.hasComputedKernelForDispatchKey(c10::DispatchKey::CPU)) return;
  torch::jit::Stack stack;
  for (size_t i = 0; i < args.size(); ++i) {
    bool tpu_device = args[i].isDevice() && args[i].toDevice().type() == c10::DeviceType::PrivateUse1;
    stack.push_back(tpu_device ? c10::IValue(c10::Device(c10::kCPU)) : map_tensors(plan.args[i], args[i], to_cpu_stand_in));
  }
  op.callBoxed(stack);  // below autograd, as this kernel is: to the CPU kernel
}

// Meta results are a pure function of meta_key, so they are cached: the meta kernels of common
// ops are Python functions costing tens of microseconds, more than the op itself.
std::shared_ptr<const MetaResult> output_metadata(const c10::OperatorHandle& op, const OpPlan& plan,
                                                  const std::vector<c10::IValue>& args) {
  constexpr size_t kMaxEntries = 1 << 16;
  static std::mutex mu;
  static std::unordered_map<std::string, std::shared_ptr<const MetaResult>> cache;
  const c10::FunctionSchema& schema = op.schema();
  const LoweringEntry& entry = *plan.entry;
  std::string key = meta_key(plan, args);
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = cache.find(key); it != cache.end()) return it->second;
  }
  check_cpu_dtype_support(schema.name(), schema.overload_name(), entry.options.cpu_refusals, args);
  auto result = std::make_shared<MetaResult>();
  for (size_t i = 0; i < args.size(); ++i) result->args.push_back(to_meta(plan.args[i], args[i]));
  result->returns = result->args;
  try {
    if (entry.options.meta)
      result->returns = entry.options.meta(schema, result->args);
    else
      op.callBoxedForDispatchKey(c10::DispatchKey::Meta, result->returns);
  } catch (...) {  // c10::Error, or a Python meta kernel's exception
    check_same_device(schema, args);  // a CPU tensor among meta ones: say so, as CUDA does
    raise_cpu_error(op, plan, args);
    throw;
  }
  check_inplace_result_fits(schema, result->args);
  std::lock_guard<std::mutex> lock(mu);
  if (cache.size() >= kMaxEntries) cache.clear();  // shapes are not repeating: start over
  return cache.emplace(key, result).first->second;
}

// Where an op's results go: written arguments first (resized where the meta kernel resized an
// out= argument), then fresh tensors for the other returns. `wanted` has one entry per result;
// false marks a return the op leaves undefined (a backward op's output_mask).
struct Destinations {
  std::vector<at::Tensor> tensors;
  std::vector<bool> wanted;
  std::vector<c10::IValue> fresh;  // the non-aliased returns, as they will be returned
};

Destinations destinations(const OpPlan& plan, const std::vector<c10::IValue>& args, const MetaResult& meta) {
  Destinations d;
  for (size_t i : plan.written_args) {
    std::vector<at::Tensor> metas;
    for_each_tensor(meta.args[i], [&](const at::Tensor& t) { metas.push_back(t); });
    size_t k = 0;
    for_each_tensor(args[i], [&](const at::Tensor& t) {
      if (t.sizes() != metas[k].sizes()) {
        // As CPU's TensorIterator: an out= that is also an input cannot grow to the result.
        for (size_t j = 0; j < args.size(); ++j)
          TORCH_CHECK(j == i || !args[j].isTensor() || !args[j].toTensor().is_same(t), "output with shape ",
                      t.sizes(), " doesn't match the broadcast shape ", metas[k].sizes());
        t.resize_(metas[k].sizes());
      }
      d.tensors.push_back(t);
      d.wanted.push_back(true);
      ++k;
    });
  }
  auto make = [&](const at::Tensor& mt) {
    d.wanted.push_back(mt.defined());
    if (!mt.defined()) return at::Tensor();
    // Allocated directly, as the tpu empty_strided kernel does (the caller's DeviceGuard picks the
    // device): a dispatcher round trip per result is a measurable part of a small op.
    at::Tensor t = at::detail::empty_strided_generic(mt.sizes(), mt.strides(), tpu_allocator(),
                                                     c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                                     mt.scalar_type());
    d.tensors.push_back(t);
    return t;
  };
  for (size_t r = 0; r < plan.aliased_returns.size(); ++r) {
    if (plan.aliased_returns[r]) continue;
    const c10::IValue& m = meta.returns[r];
    if (m.isTensor() || m.isNone()) {  // None: an undefined tensor (fused attention's cum_seq_q)
      d.fresh.emplace_back(make(m.isTensor() ? m.toTensor() : at::Tensor()));
    } else if (!m.isList()) {  // an int (fused attention's max_q): no program result
      d.fresh.push_back(m);
    } else {
      c10::List<at::Tensor> list;
      for (const at::Tensor& mt : m.toTensorList().vec()) list.push_back(make(mt));
      d.fresh.emplace_back(list);
    }
  }
  return d;
}

// The arguments as the lowering sees them, safe to keep after the call returns (fused and lazy
// modes run lowerings later): tpu tensors become their meta twins (same dtype and geometry), so a
// deferred op does not keep its inputs' storages alive.
std::vector<c10::IValue> lowering_args(const std::vector<c10::IValue>& args, const MetaResult& meta) {
  std::vector<c10::IValue> kept = args;
  for (size_t i = 0; i < args.size(); ++i) {
    bool on_device = false;
    for_each_tensor(args[i], [&](const at::Tensor& t) { on_device |= t.defined() && on_tpu(t); });
    if (on_device) kept[i] = meta.args[i];
  }
  return kept;
}

// What a failed device check raises: the op's message, or the one its arguments give.
std::string check_message(const LoweringOptions& options, const std::vector<c10::IValue>& args) {
  int arg = options.device_check_message_arg;
  if (arg >= 0 && args.at(arg).isString() && !args.at(arg).toStringRef().empty()) return args.at(arg).toStringRef();
  return options.device_check;
}

// Lowerings compute complex32 in complex64 (computed_as): its inputs are widened, its results
// rounded back.
std::vector<hlo::TensorType> computed_types(std::vector<hlo::TensorType> types) {
  for (hlo::TensorType& t : types) t.dtype = computed_as(t.dtype);
  return types;
}

// Everything an op's lowering needs besides its flat inputs. It follows from the output
// metadata's key (and the matmul precision) alone, so the first call with that key builds it and
// the later ones share it: a call hands the executor a pointer instead of copies of its arguments.
// (A Scalar or wrapped number reaches the program as an input; its value here is the first
// call's, which a lowering must not read, as a cached program would not see a new one either.)
}  // namespace

struct LoweringCall {
  const LoweringEntry* entry;
  const std::string* name;
  std::vector<size_t> count;               // flat inputs per argument (and the RNG state's)
  std::vector<c10::IValue> args;           // tpu tensors as their meta twins: see lowering_args
  std::vector<hlo::TensorType> out_types;  // one per result, wanted or not
  std::vector<bool> wanted;
  hlo::Builder::Precision precision;
  bool device_check;  // the program ends with the device-check flag (LoweringOptions::device_check)
  bool sizes;         // each input's exact sizes follow the inputs (PaddingRule::needs_sizes)

  std::vector<hlo::Value> operator()(hlo::Builder& b, const std::vector<hlo::Value>& flat) const {
    std::vector<std::vector<hlo::Value>> values(count.size()), exact_sizes(sizes ? count.size() : 0);
    size_t next = 0, inputs = 0;
    for (size_t n : count) inputs += n;
    for (size_t i = 0; i < count.size(); ++i)
      for (size_t k = 0; k < count[i]; ++k) {
        if (sizes) exact_sizes[i].push_back(flat.at(inputs + next));
        // CPU converts wider operands (a Scalar) to a complex32 result's type first (0.3 to 0.30005).
        DType t = flat[next].type.dtype;
        bool rounded = !out_types.empty() && out_types[0].dtype == DType::kC32 &&
                       (t == DType::kF32 || t == DType::kF64 || t == DType::kC64 || t == DType::kC128);
        values[i].push_back(widened(b, rounded ? cast(b, flat[next], DType::kC32) : flat[next]));
        ++next;
      }
    LoweringContext ctx(b, std::move(values), args, computed_types(out_types));
    ctx.set_precision(precision);
    if (sizes) ctx.set_exact_sizes(std::move(exact_sizes));
    std::vector<hlo::Value> results = entry->fn(ctx);
    TORCH_INTERNAL_ASSERT(results.size() == out_types.size(), *name, ": lowering returned ", results.size(),
                          " values for ", out_types.size(), " outputs");
    std::vector<hlo::Value> written;
    for (size_t i = 0; i < results.size(); ++i)
      if (wanted[i]) written.push_back(b.convert(ctx.to_out(results[i], i), out_types[i].dtype));
    if (device_check) written.push_back(ctx.device_ok());
    return written;
  }
};

namespace {

// The shared lowering of calls with `meta`, built now if none is there yet (or for another precision).
std::shared_ptr<const LoweringCall> lowering_call(const OpPlan& plan, const std::vector<c10::IValue>& args,
                                                  const MetaResult& meta, const Destinations& d,
                                                  const std::vector<exec::Operand>& outputs, std::vector<size_t> count,
                                                  hlo::Builder::Precision precision, bool device_check,
                                                  bool sizes) {
  // A result the caller does not want (a backward's output_mask) still gets a type: the first
  // wanted result's dtype, so that out(0)-based arithmetic keeps the op's precision.
  auto out_types = [&] {
    std::vector<hlo::TensorType> types;
    DType unwanted_dtype = outputs.empty() ? DType::kF32 : outputs.front().view.dtype;
    size_t next_dest = 0;
    for (bool w : d.wanted) {
      if (!w) {
        types.push_back({unwanted_dtype, {}});
        continue;
      }
      const exec::Operand& o = outputs[next_dest++];
      types.push_back({o.view.dtype, o.padding ? o.padding->box : o.view.sizes});
    }
    return types;
  };
  // The meta key decides the result types, except the boxes of results in buckets
  // (PaddingRule::results_in_buckets), which follow the exact sizes.
  const std::optional<PaddingRule>& padding = plan.entry->options.padding;
  std::shared_ptr<const LoweringCall> shared = std::atomic_load(&meta.lowering);
  if (shared && shared->precision == precision && shared->device_check == device_check && shared->sizes == sizes &&
      !(padding && padding->results_in_buckets && shared->out_types != out_types()))
    return shared;
  auto call = std::make_shared<LoweringCall>(
      LoweringCall{plan.entry, &plan.name, std::move(count), lowering_args(args, meta), out_types(), d.wanted,
                   precision, device_check, sizes});
  std::atomic_store(&meta.lowering, std::shared_ptr<const LoweringCall>(call));
  return call;
}

// One program: inputs read through their views, the lowering, results cast and broadcast into
// the destinations (plus the device-check flag, for ops that have one).
void run_program(const c10::OperatorHandle& op, const OpPlan& plan, const std::vector<c10::IValue>& args,
                 const MetaResult& meta, const Destinations& d, int device) {
  const LoweringEntry& entry = *plan.entry;
  const std::string& name = plan.name;
  // Empty results are all there is to compute (and XLA rejects some ops on empty operands, such
  // as a gather from a dimension of size 0), unless the op checks indices that are there.
  auto empty = [](const at::Tensor& t) { return t.numel() == 0; };
  const LoweringOptions& o = entry.options;
  bool device_check = o.device_check && (!o.device_check_when || o.device_check_when(args));
  bool indices_to_check = false;
  if (device_check)
    for (const c10::IValue& a : args)
      for_each_tensor(a, [&](const at::Tensor& t) {
        indices_to_check |= t.defined() && !t.is_floating_point() && !t.is_complex() && !empty(t);
      });
  if (!d.tensors.empty() && std::all_of(d.tensors.begin(), d.tensors.end(), empty) && !indices_to_check) return;
  std::shared_ptr<const graph::Origin> origin = origin_of(name);
  exec::TraceCause cause(origin.get());  // the scalar and RNG-state uploads below name the op's line
  Inputs in = gather_inputs(plan, args, device);
  if (entry.options.random) add_rng_state(in, args, device);
  hlo::Builder::Precision precision = hlo::Builder::Precision::kHighest;
  if (entry.options.matmul) {
    precision = matmul_precision();
    in.key += "|precision=" + std::to_string(static_cast<int>(precision));
  }
  std::vector<exec::Operand> outputs;
  outputs.reserve(d.tensors.size() + 1);
  for (const at::Tensor& t : d.tensors) outputs.push_back(operand(t));
  std::shared_ptr<const MetaResult> box_meta;
  if (o.padding && padding_enabled()) box_meta = pad_operands(op, plan, args, origin.get(), in, outputs);
  if (!box_meta && padding_enabled() &&
      std::any_of(in.operands.begin(), in.operands.end(), [](const exec::Operand& x) { return x.storage->varies(); }))
    exec::record_unpadded(name);
  bool sizes = box_meta && o.padding->needs_sizes;
  std::shared_ptr<const LoweringCall> call = lowering_call(plan, args, box_meta ? *box_meta : meta, d, outputs,
                                                           std::move(in.count), precision, device_check, sizes);
  exec::Lowering lower = [call = std::move(call)](hlo::Builder& b, const std::vector<hlo::Value>& flat) {
    return (*call)(b, flat);
  };
  std::shared_ptr<exec::BufferRef> ok;
  if (device_check) {
    ok = std::make_shared<exec::BufferRef>(device, 1);
    outputs.push_back({ok.get(), {DType::kBool, {}, {}, 0}});
  }
  std::vector<exec::BufferRef*> checked;  // the storages a device check vouches for
  if (ok)
    for (const exec::Operand& out : outputs)
      if (out.storage != ok.get()) checked.push_back(out.storage);
  std::vector<VaryingResult> varying;  // what padded results vary in
  if (box_meta) varying = varying_results(outputs, in);
  exec::OpCall program{std::move(in.key), std::move(lower), std::move(in.operands), std::move(outputs), origin};
  program.sizes_to_lowering = sizes;
  program.matmul = o.matmul;
  run_on_device(std::move(program));
  for (VaryingResult& v : varying) v.storage->set_varying(std::move(v.sizes), std::move(v.strides));
  if (ok) {
    std::vector<graph::ValuePtr> results;
    for (exec::BufferRef* storage : checked) results.push_back(storage->value());
    std::string message = check_message(entry.options, args) + " (" + origin->describe() +
                          " on tpu, detected on the device)";
    translating_errors([&] { exec::defer_check(ok, message, results, !entry.options.device_check_runtime_error); },
                       name);  // debug mode raises here
  }
}

// Aliased returns are the written arguments themselves; the others are the fresh tensors.
void push_returns(const OpPlan& plan, const std::vector<c10::IValue>& args, const Destinations& d,
                  torch::jit::Stack* stack) {
  size_t next_fresh = 0, next_written = 0;
  for (size_t r = 0; r < plan.aliased_returns.size(); ++r) {
    if (plan.aliased_returns[r])
      stack->push_back(args[plan.written_args.at(next_written++)]);
    else
      stack->push_back(d.fresh[next_fresh++]);
  }
}

// CPU refuses a write whose destination overlaps itself (an expanded tensor) or partly overlaps an
// input (a.add_(a.t()), a[1:].copy_(a[:-1])): the result would depend on the order of the writes.
// A destination that is exactly an input (x.add_(x)) is fine, except for ops that are `no_aliasing`
// (indexing ops), whose tensor-list inputs (cat's) are checked too. Written lists (foreach) are not.
void check_no_overlap(const c10::FunctionSchema& schema, const OpPlan& plan, const std::vector<c10::IValue>& args) {
  const bool no_aliasing = plan.entry->options.no_aliasing;
  for (size_t w : plan.written_args) {
    if (!args[w].isTensor()) continue;
    const at::Tensor& out = args[w].toTensor();
    at::assert_no_internal_overlap(out);
    for (size_t i = 0; i < args.size(); ++i) {
      if (i == w) continue;
      if (!no_aliasing) {  // the common case: one cheap test per tensor argument
        if (args[i].isTensor() && args[i].toTensor().defined()) at::assert_no_partial_overlap(out, args[i].toTensor());
        continue;
      }
      const std::string& name = schema.arguments()[i].name();
      bool index = (name == "index" || name == "indices") && !plan.entry->options.index_is_not_out;
      for_each_tensor(args[i], [&](const at::Tensor& in) {
        bool legacy_empty = !args[i].isTensor() && in.dim() == 1 && in.numel() == 0;  // cat skips these
        if (!in.defined() || legacy_empty) return;
        if (!index) at::assert_no_overlap(out, in);
        else if (args[i].isTensor()) at::assert_no_partial_overlap(out, in);
      });
    }
  }
}

void run_lowered(const OpPlan& plan, const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  if (rerun_with_prepared_args(plan, op, stack)) return;
  const LoweringEntry& entry = *plan.entry;
  const size_t num_args = plan.args.size();
  std::vector<c10::IValue> args(std::make_move_iterator(stack->end() - num_args),
                                std::make_move_iterator(stack->end()));
  if (entry.options.cpu_when && entry.options.cpu_when(args)) {
    std::move(args.begin(), args.end(), stack->end() - num_args);
    return cpu_fallback(op, stack);
  }
  torch::jit::drop(*stack, num_args);

  // Output metadata from PyTorch's meta kernels: shapes, dtypes and errors exactly as on CPU.
  std::shared_ptr<const MetaResult> meta = output_metadata(op, plan, args);
  check_scalar_ranges(plan.scalar_ranges, args);  // values, so not cached with the metadata
  check_no_overlap(op.schema(), plan, args);
  int device = device_of(args);
  c10::DeviceGuard guard(c10::Device(c10::DeviceType::PrivateUse1, device));
  Destinations d = destinations(plan, args, *meta);
  try {
    run_program(op, plan, args, *meta, d, device);
  } catch (const c10::Error&) {  // a dtype the lowering cannot compile (logcumsumexp of int8): CPU's refusal
    raise_cpu_error(op, plan, args);
    throw;
  }
  push_returns(plan, args, d, stack);
}

// The kernel installed for one lowered op: its schema decoded once, at install time.
class LoweredOpKernel final : public c10::OperatorKernel {
 public:
  explicit LoweredOpKernel(OpPlan plan) : plan_(std::move(plan)) {}
  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
    run_lowered(plan_, op, stack);
  }

 private:
  OpPlan plan_;
};

}  // namespace

namespace {
thread_local std::optional<hlo::Builder::Precision> precision_override;
}  // namespace

hlo::Builder::Precision matmul_precision() {
  if (precision_override) return *precision_override;
  switch (at::globalContext().float32MatmulPrecision()) {
    case at::Float32MatmulPrecision::HIGHEST: return hlo::Builder::Precision::kHighest;
    case at::Float32MatmulPrecision::HIGH: return hlo::Builder::Precision::kHigh;
    case at::Float32MatmulPrecision::MEDIUM: return hlo::Builder::Precision::kDefault;
  }
  return hlo::Builder::Precision::kHighest;
}

void set_matmul_precision_override(std::optional<hlo::Builder::Precision> p) { precision_override = p; }

hlo::Value LoweringContext::input(size_t i) const { return input_as(i, compute_dtype()); }

hlo::Value LoweringContext::input_as(size_t i, DType dtype) const { return cast(b, input_uncast(i), dtype); }

DType LoweringContext::promoted(size_t i, size_t j) const {
  const c10::IValue& a = args_.at(i);
  const c10::IValue& c = args_.at(j);
  // at::result_type implements PyTorch's rules, including that dimensioned tensors win over 0-d
  // tensors and Scalars of the same category.
  c10::ScalarType t = a.isTensor() && c.isTensor() ? at::result_type(a.toTensor(), c.toTensor())
                      : a.isTensor()               ? at::result_type(a.toTensor(), c.toScalar())
                      : c.isTensor()               ? at::result_type(a.toScalar(), c.toTensor())
                                                   : at::result_type(a.toScalar(), c.toScalar());
  return computed_as(to_dtype(t));  // as the inputs are widened
}

hlo::Value LoweringContext::broadcast_to_output(const hlo::Value& v) const {
  return broadcast_to(b, v, out(0).dims);
}

hlo::Value LoweringContext::to_out(const hlo::Value& v, size_t i) const {
  return broadcast_to(b, cast(b, v, out(i).dtype), out(i).dims);
}

std::vector<int64_t> LoweringContext::int_list(size_t i) const {
  const c10::IValue& v = arg(i);
  if (v.isInt()) return {v.toInt()};
  return v.toIntVector();
}

MetaFn shaped_like(size_t like) {
  return [like](const c10::FunctionSchema& schema, const std::vector<c10::IValue>& args) {
    const at::Tensor& model = args.at(like).toTensor();
    if (!schema.arguments().empty() && schema.arguments().back().is_out()) {
      at::Tensor out = args.back().toTensor();
      out.resize_(model.sizes());
      return std::vector<c10::IValue>{out};
    }
    return std::vector<c10::IValue>{at::empty_like(model)};
  };
}

void install_lowerings() {
  run_derivers();
  attach_cpu_refusals();
  std::vector<std::string> problems = registration_problems();
  if (!problems.empty()) {
    std::string message = "torchtpu's lowering registrations are wrong:";
    for (const std::string& p : problems) message += "\n  " + p;
    throw std::logic_error(message);
  }
  static torch::Library lib(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                            __FILE__, __LINE__);
  for (const auto& [name, entry] : lowering_registry()) {
    auto handle = find_op(name);
    if (!handle) continue;  // a guessed spelling, or an op this PyTorch release lacks
    auto kernel = std::make_unique<LoweredOpKernel>(OpPlan(handle->schema(), name, entry));
    lib.impl(name.substr(6).c_str(), torch::CppFunction::makeFromBoxedFunctor(std::move(kernel)));
    installed().push_back(name.substr(6));
  }
  std::sort(installed().begin(), installed().end());
}

const std::vector<std::string>& installed_lowerings() { return installed(); }

}  // namespace torchtpu::aten
