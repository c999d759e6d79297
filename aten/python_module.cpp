// torchtpu._C: the Python face of the C++ backend. Thin: it exposes facts and switches, while the
// device itself is wired into PyTorch by the registrations in aten/.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <mutex>

#include "aten/collective.h"
#include "aten/compiled_graph.h"
#include "aten/device.h"
#include "aten/generator.h"
#include "aten/kernel_call.h"
#include "aten/lowering.h"
#include "aten/padded_upload.h"
#include "aten/profiler.h"
#include "aten/tensor_operand.h"
#include "aten/varying_sizes.h"
#include "exec/capture.h"
#include "exec/compile_cache.h"
#include "exec/device_memory.h"
#include "exec/diagnostics.h"
#include "exec/executor.h"
#include "exec/metrics.h"
#include "exec/runtime_context.h"
#include "exec/trace.h"

namespace py = pybind11;
using namespace torchtpu;

namespace {

py::dict platform_info() {
  runtime::Client& c = exec::client();
  const runtime::Plugin& p = c.plugin();
  py::dict info;
  info["platform"] = c.platform_name();
  info["platform_version"] = c.platform_version();
  info["plugin_path"] = p.path();
  info["pjrt_api_version"] = std::to_string(p.api_major()) + "." + std::to_string(p.api_minor());
  for (const auto& [name, value] : p.attributes()) info[py::str(name)] = value;
  py::list devices;
  for (const runtime::Device& d : c.devices()) devices.append(d.kind());
  info["device_kinds"] = devices;
  return info;
}

// Runs `f` without the GIL, raising PyTorch's errors as the Python exceptions torch raises.
template <typename F>
auto without_gil(F&& f) {
  try {
    py::gil_scoped_release no_gil;
    return f();
  } catch (const c10::IndexError& e) {
    throw py::index_error(e.what_without_backtrace());
  } catch (const c10::ValueError& e) {
    throw py::value_error(e.what_without_backtrace());
  } catch (const c10::Error& e) {
    throw std::runtime_error(e.what_without_backtrace());
  }
}

// Strict mode's ops waiting for their programs (exec/executor.cpp, run_strict) run before what
// they would change is read; the pending ops of the other modes wait for the user's reads.
void run_waiting_ops(const std::string& reason) {
  if (exec::mode() == exec::Mode::kStrict) without_gil([&] { aten::flush_pending(reason); });
}

// torch.cuda.memory_stats's keys. Storages return their buffers when they die (no cache), so
// reserved, active and requested bytes all equal allocated bytes.
py::dict memory_stats(int index) {
  run_waiting_ops("memory statistics");
  exec::DeviceMemory m = exec::device_memory(index);
  py::dict out;
  for (const char* kind : {"allocated_bytes", "active_bytes", "reserved_bytes", "requested_bytes"}) {
    std::string k(kind);
    out[py::str(k + ".all.current")] = m.allocated;
    out[py::str(k + ".all.peak")] = m.peak;
    out[py::str(k + ".all.allocated")] = m.allocated_total;
    out[py::str(k + ".all.freed")] = m.freed_total;
  }
  out["allocation.all.current"] = m.allocations;
  out["allocation.all.peak"] = m.peak_allocations;
  out["allocation.all.allocated"] = m.num_allocs;
  out["allocation.all.freed"] = m.num_frees;
  out["num_ooms"] = m.num_ooms;
  out["num_alloc_retries"] = 0;
  if (m.limit) out["torchtpu.limit_bytes"] = *m.limit;
  if (auto stats = exec::device(index).memory_stats()) {
    out["pjrt.bytes_in_use"] = stats->bytes_in_use;  // what the plugin's allocator reports
    if (stats->peak_bytes_in_use) out["pjrt.peak_bytes_in_use"] = *stats->peak_bytes_in_use;
    if (stats->bytes_limit) out["pjrt.bytes_limit"] = *stats->bytes_limit;
  }
  return out;
}

void set_memory_limit(int index, std::optional<int64_t> bytes, const std::string& source) {
  exec::device(index);  // names the valid range for a bad index
  exec::set_device_memory_limit(index, bytes, source);
}

py::dict metrics() {
  run_waiting_ops("metrics");
  without_gil(exec::wait_for_first_runs);  // their compiles and executions count
  py::dict out;
  out["counters"] = exec::counters_snapshot();
  out["host_syncs"] = exec::sync_counts();
  out["window_cuts"] = exec::cut_counts();
  out["window_sizes"] = exec::window_sizes();
  out["recompiles"] = exec::recompiles();
  out["recompile_count"] = exec::recompile_count();
  out["cpu_fallbacks"] = exec::fallback_counts();
  out["unpadded_ops"] = exec::unpadded_counts();
  out["pending_ops"] = exec::pending_ops();
  return out;
}

py::dict cache_stats() {
  run_waiting_ops("compile cache statistics");
  without_gil(exec::wait_for_first_runs);
  exec::CacheStats s = exec::cache_stats();
  py::dict out;
  out["requests"] = s.requests;
  py::dict hits;
  for (const char* tier : {"memory", "disk", "shared"}) hits[tier] = s.hits.count(tier) ? s.hits.at(tier) : 0;
  out["hits"] = hits;
  out["misses"] = s.misses;
  out["quick_compiles"] = s.quick_compiles;
  out["promotions"] = s.promotions;
  out["background_pending"] = s.background_pending;
  out["skipped_background"] = s.skipped_background;
  out["deferred"] = s.deferred;
  out["prefetched"] = s.prefetched;
  out["started_ahead"] = s.started_ahead;
  py::list compiles;
  for (const auto& c : s.compiles) compiles.append(py::make_tuple(c.what, c.seconds, c.temp_bytes));
  out["compiles"] = compiles;
  out["dir"] = exec::cache_dir();
  out["shared_dir"] = exec::shared_cache_dir();
  return out;
}

// Warnings from the executor (a damaged cache entry, an unwritable cache directory) become Python
// warnings, also when they come from the background compiler's thread.
void warn_in_python(const std::string& message) {
  if (!Py_IsInitialized()) return;
  py::gil_scoped_acquire gil;
  if (PyErr_WarnEx(PyExc_UserWarning, ("torchtpu: " + message).c_str(), 1) != 0) PyErr_Clear();
}

const char* fill_name(exec::Fill fill) {
  switch (fill) {
    case exec::Fill::kZero: return "zero";
    case exec::Fill::kOne: return "one";
    case exec::Fill::kLowest: return "lowest";
    case exec::Fill::kHighest: return "highest";
  }
  return "?";
}

const char* refused_name(aten::Refused kind) {
  switch (kind) {
    case aten::Refused::kBool: return "bool";
    case aten::Refused::kComplex: return "complex";
    case aten::Refused::kInteger: return "integer";
    case aten::Refused::kComplexHalf: return "complex32";
    case aten::Refused::kFloat8: return "float8";
    case aten::Refused::kFloating: return "floating";
    case aten::Refused::kNotInteger: return "not integer";
    case aten::Refused::kHalfFloat: return "float16 and bfloat16";
  }
  return "?";
}

// What the registry says about one lowered op ("add.Tensor"): its record, as a dict.
py::dict lowering_record(const std::string& op) {
  const aten::LoweringEntry* entry = aten::find_lowering(op);
  if (!entry) throw py::key_error("no tpu lowering is registered for " + op);
  const aten::LoweringOptions& o = entry->options;
  py::dict record;
  if (o.padding) {
    py::dict padding;
    padding["fill"] = fill_name(o.padding->fill);
    padding["some_dimensions"] = static_cast<bool>(o.padding->paddable);
    padding["some_calls"] = static_cast<bool>(o.padding->applies);
    padding["needs_sizes"] = o.padding->needs_sizes;
    padding["seeds"] = o.padding->seeds;
    padding["results_in_buckets"] = o.padding->results_in_buckets;
    padding["by_rows"] = static_cast<bool>(o.padding->row_dims);  // may run on its buffers as stored
    padding["meta_checks_sizes"] = o.padding->meta_checks_sizes;
    record["padding"] = padding;
  } else {
    record["padding"] = py::none();
  }
  py::list refusals;
  for (const aten::CpuRefusal& r : o.cpu_refusals) {
    py::dict refusal;
    refusal["dtypes"] = refused_name(r.kind);
    refusal["error"] = r.message ? r.message : r.kernel ? r.kernel : "";
    refusal["overload"] = r.overload ? py::object(py::str(r.overload)) : py::object(py::none());
    refusals.append(refusal);
  }
  record["cpu_refusals"] = refusals;
  record["static_scalars"] = o.static_scalars;
  record["unread_args"] = o.unread_args;
  record["random"] = o.random;
  record["matmul"] = o.matmul;
  record["device_check"] = o.device_check ? py::object(py::str(o.device_check)) : py::object(py::none());
  record["own_metadata"] = static_cast<bool>(o.meta);
  return record;
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "torchtpu C++ backend";
  aten::register_device();
  aten::install_lowerings();
  m.def("_platform_info", &platform_info, "What the PJRT plugin reports about itself");
  m.def("_device_count", [] { return static_cast<int>(aten::device_count()); });
  m.def("_is_available", &aten::is_available);
  m.def("_is_initialized", &exec::client_started);
  m.def("_current_device", [] { return static_cast<int>(aten::current_device()); });
  m.def("_set_device", [](int index) { aten::set_current_device(static_cast<c10::DeviceIndex>(index)); });
  m.def("_set_sync_debug_mode", &aten::set_sync_debug_mode);
  m.def("_sync_debug_mode", &aten::sync_debug_mode);
  exec::set_warning_handler(warn_in_python);
  aten::install_interrupt_check();
  aten::register_profiler();
  m.def("_trace_events_emitted", &exec::trace_events_emitted, "Events handed to torch.profiler so far");
  m.def("_synchronize", [](int device, const std::string& reason) {
    without_gil([&] { aten::synchronize_device(device, reason); });
  });
  m.def("_set_eager_mode", [](const std::string& name) {
    auto mode = exec::parse_mode(name);
    if (!mode) throw py::value_error("unknown eager mode '" + name + "': use debug, strict, fused or lazy");
    without_gil([&] { exec::set_mode(*mode); });
  });
  m.def("_eager_mode", [] { return std::string(exec::mode_name(exec::mode())); });
  m.def("_set_thread_padding", [](std::optional<bool> enabled) { return aten::set_thread_padding(enabled); });
  m.def("_set_one_program_block", &exec::set_one_program_block);
  m.def("_lowered_ops", &aten::installed_lowerings, "The ATen ops with a tpu lowering (\"add.Tensor\")");
  m.def("_padded_ops", [] {
    std::vector<std::string> padded;
    for (const std::string& op : aten::installed_lowerings())
      if (aten::find_lowering(op)->options.padding) padded.push_back(op);
    return padded;
  }, "The lowered ATen ops with a padding rule: they run padded where their sizes vary");
  m.def("_lowering_record", &lowering_record, py::arg("op"),
        "The registry's record of a lowered op (\"add.Tensor\"): padding rule, CPU dtype refusals, options");
  m.def("_to_tpu_padded", &aten::to_tpu_padded, py::arg("host"), py::arg("varying"),
        "A CPU tensor copied to tpu, its storage padded in the sizes `varying` (tests)");
  m.def("_flush", [](const std::string& reason) {
    without_gil([&] { aten::flush_pending(reason); });
  });
  m.def("_metrics", &metrics);
  m.def("_cache_stats", &cache_stats);
  m.def("_cache_reset_stats", [] {
    run_waiting_ops("compile cache statistics reset");
    exec::reset_cache_stats();
  });
  m.def("_cache_clear", [] { without_gil([] { aten::translating_errors(exec::clear_cache, "clearing the cache"); }); });
  m.def("_allow_excess_precision", &exec::allow_excess_precision);
  m.def("_set_allow_excess_precision", [](bool allow) { without_gil([=] { exec::set_allow_excess_precision(allow); }); });
  m.def("_wait_for_background_compiles", [] {
    run_waiting_ops("waiting for compiles");
    without_gil([] {
      aten::translating_errors([] {
        exec::wait_for_first_runs();
        exec::wait_for_background_compiles();
      }, "waiting for compiles");
    });
  });
  m.def("_drop_queued_compiles", &exec::drop_queued_compiles);
  m.def("_running_compiles", [] { return exec::running_compiles() + exec::first_runs_in_flight(); });
  m.def("_memory_stats", &memory_stats);
  m.def("_reset_peak_memory", &exec::reset_peak_device_memory);
  m.def("_reset_accumulated_memory", &exec::reset_accumulated_device_memory);
  m.def("_set_memory_limit", &set_memory_limit);
  m.def("_memory_size", &exec::device_memory_size);
  // RNG state as plain values; torch.tpu wraps them in PyTorch's API.
  m.def("_manual_seed", [](int device, uint64_t seed) {
    auto gen = aten::default_generator(device);
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_current_seed(seed);
  });
  m.def("_initial_seed", [](int device) { return aten::default_generator(device).current_seed(); });
  m.def("_get_rng_state", [](int device) {
    auto* g = aten::default_generator(device).get<aten::TpuGenerator>();
    return std::make_pair(g->current_seed(), g->get_offset());
  });
  m.def("_set_rng_state", [](int device, uint64_t seed, uint64_t offset) {
    auto gen = aten::default_generator(device);
    gen.set_current_seed(seed);
    gen.set_offset(offset);
  });
  m.def("_cpu_fallbacks", &exec::fallback_counts);
  m.def("_count_collective", [] { exec::counters().collectives++; });
  m.def("_reset_counters", [] {
    run_waiting_ops("metrics reset");
    exec::reset_counters();
  });
  // torch.tpu.precision(...): "highest", "high", "default", or None to follow
  // torch.set_float32_matmul_precision again.
  m.def("_set_precision_override", [](std::optional<std::string> name) {
    using P = hlo::Builder::Precision;
    if (!name) return aten::set_matmul_precision_override(std::nullopt);
    if (*name == "highest") return aten::set_matmul_precision_override(P::kHighest);
    if (*name == "high") return aten::set_matmul_precision_override(P::kHigh);
    if (*name == "default") return aten::set_matmul_precision_override(P::kDefault);
    throw py::value_error("unknown precision '" + *name + "': use \"highest\", \"high\" or \"default\"");
  });
  m.def("_matmul_precision", [] { return static_cast<int>(aten::matmul_precision()); });
  m.def("_record_recompile", &exec::record_recompile, "Counts a recompilation with its cause");
  // Importing must not fail without a plugin (is_available() is then False); this re-raises the
  // discovery error for callers who want the reason.
  m.def("_init_runtime", [] { exec::client(); });
  aten::define_compiled_graph(m);
  aten::define_kernel_call(m);
  aten::define_collective(m);
}
