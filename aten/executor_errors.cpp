// The executor's exceptions as the ones PyTorch raises for the same problem on CPU or CUDA.
#include <c10/util/Exception.h>

#include "aten/tensor_operand.h"
#include "exec/executor.h"

namespace torchtpu::aten {
namespace {

}  // namespace

void translating_errors(const std::function<void()>& f, const std::string& what) {
  try {
    f();
  } catch (const c10::Error&) {
    throw;
  } catch (const exec::CheckFailed& e) {
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

void run_on_device(const exec::OpCall& call) {
  translating_errors([&] { exec::run(call); }, call.origin ? call.origin->describe() : call.key);
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
