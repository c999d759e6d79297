// A compiled, loaded executable, owned.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pjrt_c_api.h"
#include "runtime/buffer.h"
#include "runtime/event.h"

namespace torchtpu::runtime {

// What XLA planned for the program's device memory (xla::CompiledMemoryStats): its code, its
// arguments and outputs, the argument bytes its outputs reuse, and one run's temporaries (every
// intermediate the program keeps in a buffer, after XLA's buffer reuse).
struct ProgramMemory {
  int64_t code_bytes = 0, argument_bytes = 0, output_bytes = 0, alias_bytes = 0, temp_bytes = 0;
};

struct ExecuteResult {
  std::vector<std::vector<Buffer>> outputs;  // outputs[device][i]
  std::vector<Event> done;                   // one per device: that device finished the program
};

class Executable {
 public:
  Executable(const PJRT_Api* api, PJRT_LoadedExecutable* executable);
  Executable(Executable&& other) noexcept { *this = std::move(other); }
  Executable& operator=(Executable&& other) noexcept;
  Executable(const Executable&) = delete;
  Executable& operator=(const Executable&) = delete;
  ~Executable();

  size_t num_outputs() const { return num_outputs_; }
  std::string name() const;
  // The devices the program was compiled for, in argument-list order (empty for portable ones).
  std::vector<PJRT_Device*> devices() const;
  // Bytes that DeserializeAndLoad turns back into an equivalent executable.
  std::string serialize() const;
  // Nothing when the plugin does not report them.
  std::optional<ProgramMemory> planned_memory() const;

  // Runs on every device it was compiled for: args[d] is the argument list of devices()[d].
  // Asynchronous: returns once dispatched; outputs become ready as the devices finish.
  ExecuteResult execute(const std::vector<std::vector<const Buffer*>>& args) const;
  // Runs a portable executable on one chosen device. A program may declare that a parameter's
  // buffer can become one of its outputs (tf.aliasing_output); such an argument is then *donated*
  // (consumed: its Buffer must not be used again) unless listed in `keep`, which makes XLA copy.
  ExecuteResult execute_on(PJRT_Device* device, const std::vector<const Buffer*>& args,
                           const std::vector<int64_t>& keep = {}) const;

 private:
  // `args` points at one argument list per device (num_devices of them).
  ExecuteResult run(const std::vector<const Buffer*>* args, size_t num_devices, PJRT_Device* device,
                    const std::vector<int64_t>& keep = {}) const;
  void release();

  const PJRT_Api* api_ = nullptr;
  PJRT_LoadedExecutable* loaded_ = nullptr;
  PJRT_Executable* executable_ = nullptr;  // the unloaded view, for metadata and serialization
  size_t num_outputs_ = 0;
};

}  // namespace torchtpu::runtime
