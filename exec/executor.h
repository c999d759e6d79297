// Runs OpCalls in the current eager mode. Every mode records the op as a graph node through the
// same lowering; they differ in when the node runs:
//   debug   executes it now and waits (optionally checking outputs for NaN/Inf);
//   strict  executes its cached single-op program now, asynchronously (the default);
//   fused   defers it into the pending graph, cut into windows that run as one program each;
//   lazy    defers it until the host needs data or the user calls sync().
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "exec/device_memory.h"  // OutOfDeviceMemory
#include "exec/op_call.h"
#include "exec/trace.h"
#include "runtime/executable.h"

namespace torchtpu::exec {

enum class Mode { kDebug, kStrict, kFused, kLazy };

// The mode starts from TORCHTPU_EAGER_MODE (TORCHTPU_LAUNCH_BLOCKING=1 means debug), else strict.
Mode mode();
// Switching executes whatever the previous mode left pending.
void set_mode(Mode mode);
const char* mode_name(Mode mode);
std::optional<Mode> parse_mode(const std::string& name);

// While set (torchtpu.modes.one_program: an optimizer step run as one program), fused and lazy
// mode upload the zeros of a zero fill of a whole storage (a new optimizer state) at once instead
// of recording it, and a window run then donates the old contents of what it updates.
//  - A fill reads nothing, so its result is the same, and the window that follows is then the
//    program of every later step, which finds the states as inputs, not the first step's own; no
//    program is compiled for such a one-off fill.
//  - Donation (docs/design.md, "Optimizer windows donate") makes the XLA CPU plugin's execute call wait
//    until the programs still reading those buffers have run (the whole backward pass before an
//    optimizer step): worth the memory for an optimizer step, not for every window.
void set_one_program_block(bool inside);

// Records `call` (its output storages now hold its results, possibly pending) and runs it as
// the mode says. Takes the lowering and the views out of `call`; its key and origin stay.
void run(OpCall&& call);

// Dispatches a compiled program on `device` (asynchronously, tracked like every execution so that
// a failure names `what`); returns its result buffers (`output_bytes`, their size, for errors).
// `keep`: arguments the program may alias to a result that must not be donated (see
// runtime::Executable::execute_on). `info` describes the run to a profiler (exec/trace.h).
std::vector<std::shared_ptr<runtime::Buffer>> execute_program(runtime::Executable& exe, int device,
                                             const std::vector<graph::ValuePtr>& args,
                                             size_t output_bytes, const std::string& what,
                                             const std::vector<int64_t>& keep = {}, const RunInfo& info = {});

// Dispatches a program compiled for several devices: args[i] runs on device devices[i] (in the
// executable's device order). Returns each device's result buffers, tracked like execute_program's.
std::vector<std::vector<std::shared_ptr<runtime::Buffer>>> execute_replicated(
    runtime::Executable& exe, const std::vector<int>& devices,
    const std::vector<std::vector<graph::ValuePtr>>& args, const std::string& what);

// Executes every pending op: fused and lazy mode's (`reason` counted as a cut), and strict mode's
// ops waiting for their programs. A no-op in debug mode.
void flush(const std::string& reason);
size_t pending_ops();

// Waits until every execution dispatched to `device` so far has finished; rethrows the first
// failure among them, then any failed device-side check (see defer_check).
void synchronize(int device, const std::string& reason = "synchronize");

// A condition a program computed on the device (a 0-d bool storage: true = fine), such as
// "every index is in range". It is read when the host next waits for data, so checking costs no
// extra synchronization; a false one raises CheckFailed with `message` there. The `guarded`
// values (the checked op's results) and every value later computed from them carry the check:
// once it has failed, reading or computing from them raises CheckFailed again, so a result of a
// failed op never passes for data.
void defer_check(std::shared_ptr<BufferRef> ok, std::string message, const std::vector<graph::ValuePtr>& guarded,
                 bool index_error = true);

// Throws CheckFailed when a check `value` depends on is known to have failed.
void raise_if_failed(const graph::DeviceValue& value);

class CheckFailed : public std::runtime_error {
 public:
  CheckFailed(const std::string& message, bool index_error) : std::runtime_error(message), index_error_(index_error) {}
  // IndexError (an index out of range, as CPU's index ops), else RuntimeError (gather, scatter).
  bool index_error() const { return index_error_; }

 private:
  bool index_error_;
};

// An asynchronous execution failed; the message names the op (or window) and the user's line.
class ExecutionFailed : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Debug mode with TORCHTPU_CHECK_NANS=1: an op produced NaN or Inf.
class NonFiniteValue : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Whole-storage transfers. upload() replaces the contents with host data read as elements of
// `dtype` (storage.nbytes() bytes); download() copies storage.nbytes() raw bytes out, waiting for
// the work that produces them (counted as a host sync for `reason`). A never-written storage reads
// as zeros.
void upload(BufferRef& storage, const void* data, DType dtype);
// upload() into a padded buffer of `capacity` elements (exec/padded_view.h): the data, then zeros.
void upload_padded(BufferRef& storage, const void* data, DType dtype, int64_t capacity);
// upload() that returns before the device has read `data` (a non_blocking copy from pinned host
// memory): the caller keeps `data` unchanged and allocated until `when_read` is called, from a
// PJRT thread. synchronize() waits for the read too (`when_read` may run just after it returns).
void upload_async(BufferRef& storage, const void* data, DType dtype, std::function<void()> when_read);
void download(const BufferRef& storage, void* dst, const std::string& reason = "cpu");

// Gives a padded storage (one whose value holds more elements than its bytes: exec/padded_view.h)
// a value of exactly its bytes, for what reads whole buffers: collectives, compiled graphs.
void drop_padding(BufferRef& storage);

}  // namespace torchtpu::exec
