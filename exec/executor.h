// Runs OpCalls in strict eager mode: one cached single-op executable per (op, geometry),
// dispatched asynchronously. The host waits only when it reads data (download()).
#pragma once

#include <memory>
#include <stdexcept>
#include <string>

#include "exec/op_call.h"

namespace torchtpu::exec {

// Compiles (on a cache miss) and dispatches `call`; swaps the new contents into each output
// storage. Returns as soon as the work is queued on the device.
void run(const OpCall& call);

// Waits until every execution dispatched to `device` so far has finished; rethrows the first
// failure among them, then any failed device-side check (see defer_check).
void synchronize(int device);

// A condition a program computed on the device (a 0-d bool storage: true = fine), such as
// "every index is in range". It is read when the host next waits for data, so checking costs no
// extra synchronization; a false one raises CheckFailed with `message` there.
void defer_check(std::shared_ptr<BufferRef> ok, std::string message);

class CheckFailed : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The device could not allocate what an execution or transfer needed (PJRT RESOURCE_EXHAUSTED).
class OutOfDeviceMemory : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Whole-storage transfers. upload() replaces the contents with host data read as elements of
// `dtype` (storage.nbytes() bytes); download() copies storage.nbytes() raw bytes out, waiting for
// the work that produces them. A never-written storage reads as zeros.
void upload(BufferRef& storage, const void* data, DType dtype);
void download(const BufferRef& storage, void* dst);

}  // namespace torchtpu::exec
