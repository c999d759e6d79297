// The bridge from PyTorch tensors to the executor: dtype mapping and a tensor's storage + view.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <string>

#include "exec/op_call.h"

namespace torchtpu::aten {

// Throws a TypeError-style c10::Error for dtypes XLA cannot hold.
DType to_dtype(c10::ScalarType t);

// The contents object behind a tpu tensor's storage.
exec::BufferRef& buffer_ref(const at::Tensor& t);

// The tensor as the executor sees it: its storage and its view geometry.
exec::Operand operand(const at::Tensor& t);

// The executor's entry points with its errors turned into PyTorch's exception types (IndexError
// for a failed device-side check, OutOfMemoryError, RuntimeError naming the op and user line).
void run_on_device(exec::OpCall call);
void download_to_host(const exec::BufferRef& storage, void* dst, const std::string& reason);
void synchronize_device(int device, const std::string& reason);
void flush_pending(const std::string& reason);
// Runs `f`, turning the executor's exceptions into PyTorch's (`what` prefixes unexpected ones).
void translating_errors(const std::function<void()>& f, const std::string& what);
// Makes the executor's long waits (compiles) end in KeyboardInterrupt on Ctrl-C.
void install_interrupt_check();

// Checks that `t` lives on the tpu device; `what` names the argument in the message.
void check_tpu(const at::Tensor& t, const char* what);

}  // namespace torchtpu::aten
