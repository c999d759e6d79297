// torch.profiler for the tpu device. ProfilerActivity.PrivateUse1 turns on torchtpu's activity
// profiler, a child of PyTorch's (kineto), which turns the executor's reports (exec/trace.h) into
// trace events: program runs, host<->device copies and compiles on a "tpu:N" process of the
// timeline, CPU fallbacks on the host thread that ran them.
#pragma once

namespace torchtpu::aten {

// Registers the activity profiler with PyTorch's; called once at import.
void register_profiler();

}  // namespace torchtpu::aten
