// Ops without a lowering run on the CPU: inputs are copied out, the CPU kernel runs, results are
// copied back. Every such run is counted per op (torchtpu.metrics.cpu_fallbacks()), and
// TORCHTPU_FALLBACK=error turns it into an error naming the op.
#include <ATen/native/CPUFallback.h>
#include <torch/library.h>

#include <cstdlib>
#include <cstring>

#include "aten/origin.h"
#include "exec/capture.h"
#include "exec/metrics.h"
#include "exec/trace.h"

namespace torchtpu::aten {
namespace {

// Some ops only have CUDA kernels (PyTorch calls them on every non-CPU device): copying to the CPU
// cannot run them, and PyTorch's own error would blame the CPU.
bool cpu_can_run(const c10::OperatorHandle& op) {
  for (auto key : {c10::DispatchKey::CPU, c10::DispatchKey::CompositeExplicitAutograd,
                   c10::DispatchKey::CompositeExplicitAutogradNonFunctional})
    if (op.hasKernelForDispatchKey(key)) return true;
  return false;
}

bool fallback_is_error() {
  const char* mode = std::getenv("TORCHTPU_FALLBACK");
  return mode && std::strcmp(mode, "error") == 0;
}

// The fallback as a profiler sees it: its time on the host and the user's line, which its copies
// to and from the CPU name too.
void run_traced(const std::string& name, const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  TracedLine line(name);
  exec::TraceEvent event(exec::TraceEvent::Kind::kCpuFallback, "cpu fallback (" + name + ")");
  event.location = exec::TraceCause::location();
  event.correlation = exec::trace_correlation();
  event.text = {{"op", name}};
  event.start_ns = exec::trace_clock_ns();
  at::native::cpu_fallback(op, stack);
  event.end_ns = exec::trace_clock_ns();
  exec::emit(std::move(event));
}

}  // namespace

void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& n = op.operator_name();
  std::string name = n.overload_name.empty() ? n.name : n.name + "." + n.overload_name;
  TORCH_CHECK_NOT_IMPLEMENTED(!fallback_is_error(), name,
                              " has no tpu lowering, and TORCHTPU_FALLBACK=error forbids running "
                              "it on the CPU");
  // Inside a torch.compile capture a CPU result would be baked into the program as a constant;
  // the backend runs such nodes outside the captured graph instead.
  TORCH_CHECK_NOT_IMPLEMENTED(!exec::capturing(), name, " has no tpu lowering, so it cannot join a compiled graph");
  TORCH_CHECK_NOT_IMPLEMENTED(cpu_can_run(op), name,
                              " has no tpu lowering and no CPU kernel to fall back to (PyTorch implements it for "
                              "CUDA only)");
  exec::record_fallback(name);
  if (exec::tracing()) return run_traced(name, op, stack);
  at::native::cpu_fallback(op, stack);
}

namespace {

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
}

}  // namespace
}  // namespace torchtpu::aten
