// The executor's exceptions as the ones PyTorch raises for the same problem on CPU or CUDA, and
// Ctrl-C during a long wait as the exception Python's signal handler raised.
#include <Python.h>
#include <c10/util/Exception.h>
#include <pybind11/pybind11.h>

#include "aten/tensor_operand.h"
#include "exec/executor.h"
#include "exec/interrupt.h"

namespace torchtpu::aten {
namespace {

// What Python's signal handler raised (KeyboardInterrupt for Ctrl-C) on this thread, held from
// the wait that noticed it to translating_errors, which hands it back to Python.
thread_local PyObject *raised_type = nullptr, *raised_value = nullptr, *raised_traceback = nullptr;

// Runs Python's signal handlers (only the main thread has any to run).
bool python_signal_raised() {
  if (!Py_IsInitialized() || PyGILState_GetThisThreadState() == nullptr) return false;
  PyGILState_STATE gil = PyGILState_Ensure();
  bool raised = PyErr_CheckSignals() != 0;
  if (raised) PyErr_Fetch(&raised_type, &raised_value, &raised_traceback);
  PyGILState_Release(gil);
  return raised;
}

[[noreturn]] void rethrow_python_signal() {
  pybind11::gil_scoped_acquire gil;
  PyErr_Restore(raised_type, raised_value, raised_traceback);
  raised_type = raised_value = raised_traceback = nullptr;
  throw pybind11::error_already_set();
}

}  // namespace

void install_interrupt_check() { exec::set_interrupt_check(python_signal_raised); }

// Rethrows the exception being handled as PyTorch's; called in a catch block.
[[noreturn]] void rethrow_translated(const std::string& what) {
  try {
    throw;
  } catch (const c10::Error&) {
    throw;
  } catch (const pybind11::error_already_set&) {
    throw;
  } catch (const exec::Interrupted&) {
    rethrow_python_signal();
  } catch (const exec::CheckFailed& e) {
    if (!e.index_error()) TORCH_CHECK(false, e.what());
    TORCH_CHECK_INDEX(false, e.what());
  } catch (const exec::OutOfDeviceMemory& e) {
    TORCH_CHECK_WITH(OutOfMemoryError, false, e.what());
  } catch (const exec::ExecutionFailed& e) {
    TORCH_CHECK(false, e.what());
  } catch (const exec::NonFiniteValue& e) {
    TORCH_CHECK_VALUE(false, e.what());
  } catch (const std::exception& e) {
    TORCH_CHECK(false, what, " on tpu failed: ", e.what());
  }
}

void translating_errors(const std::function<void()>& f, const std::string& what) {
  try {
    f();
  } catch (...) {
    rethrow_translated(what);
  }
}

void run_on_device(exec::OpCall call) {
  try {
    exec::run(std::move(call));
  } catch (...) {  // the description is built only when there is an error to describe
    rethrow_translated(call.origin ? call.origin->describe() : call.key);
  }
}

void download_to_host(const exec::BufferRef& storage, void* dst, const std::string& reason) {
  translating_errors([&] { exec::download(storage, dst, reason); }, "reading a tensor");
}

void synchronize_device(int device, const std::string& reason) {
  translating_errors([&] { exec::synchronize(device, reason); }, "synchronize");
}

void flush_pending(const std::string& reason) {
  translating_errors([&] { exec::flush(reason); }, "executing pending ops");
}

}  // namespace torchtpu::aten
