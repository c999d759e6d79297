#include "runtime/executable.h"

#include <cstddef>
#include <stdexcept>

#include "runtime/error.h"
#include "runtime/pjrt_args.h"

namespace torchtpu::runtime {

Executable::Executable(const PJRT_Api* api, PJRT_LoadedExecutable* executable)
    : api_(api), loaded_(executable) {
  PJRT_ARGS(PJRT_LoadedExecutable_GetExecutable_Args, get);
  get.loaded_executable = loaded_;
  check(api_, api_->PJRT_LoadedExecutable_GetExecutable(&get),
        "PJRT_LoadedExecutable_GetExecutable");
  executable_ = get.executable;

  PJRT_ARGS(PJRT_Executable_NumOutputs_Args, outputs);
  outputs.executable = executable_;
  check(api_, api_->PJRT_Executable_NumOutputs(&outputs), "PJRT_Executable_NumOutputs");
  num_outputs_ = outputs.num_outputs;
}

Executable& Executable::operator=(Executable&& other) noexcept {
  if (this != &other) {
    release();
    api_ = other.api_;
    loaded_ = other.loaded_;
    executable_ = other.executable_;
    num_outputs_ = other.num_outputs_;
    other.loaded_ = nullptr;
    other.executable_ = nullptr;
  }
  return *this;
}

Executable::~Executable() { release(); }

void Executable::release() {
  if (executable_) {
    PJRT_ARGS(PJRT_Executable_Destroy_Args, args);
    args.executable = executable_;
    api_->PJRT_Executable_Destroy(&args);
    executable_ = nullptr;
  }
  if (loaded_) {
    PJRT_ARGS(PJRT_LoadedExecutable_Destroy_Args, args);
    args.executable = loaded_;
    api_->PJRT_LoadedExecutable_Destroy(&args);
    loaded_ = nullptr;
  }
}

std::string Executable::name() const {
  PJRT_ARGS(PJRT_Executable_Name_Args, args);
  args.executable = executable_;
  check(api_, api_->PJRT_Executable_Name(&args), "PJRT_Executable_Name");
  return std::string(args.executable_name, args.executable_name_size);
}

std::vector<PJRT_Device*> Executable::devices() const {
  PJRT_ARGS(PJRT_LoadedExecutable_AddressableDevices_Args, args);
  args.executable = loaded_;
  check(api_, api_->PJRT_LoadedExecutable_AddressableDevices(&args),
        "PJRT_LoadedExecutable_AddressableDevices");
  return std::vector<PJRT_Device*>(args.addressable_devices,
                                   args.addressable_devices + args.num_addressable_devices);
}

std::string Executable::serialize() const {
  PJRT_ARGS(PJRT_Executable_Serialize_Args, args);
  args.executable = executable_;
  check(api_, api_->PJRT_Executable_Serialize(&args), "PJRT_Executable_Serialize");
  std::string bytes(args.serialized_bytes, args.serialized_bytes_size);
  if (args.serialized_executable_deleter)
    args.serialized_executable_deleter(args.serialized_executable);
  return bytes;
}

std::optional<ProgramMemory> Executable::planned_memory() const {
  // A plugin built against an older C API has no such entry (its table ends before it).
  if (api_->struct_size <= offsetof(PJRT_Api, PJRT_Executable_GetCompiledMemoryStats) ||
      !api_->PJRT_Executable_GetCompiledMemoryStats)
    return std::nullopt;
  PJRT_ARGS(PJRT_Executable_GetCompiledMemoryStats_Args, args);
  args.executable = executable_;
  try {
    check(api_, api_->PJRT_Executable_GetCompiledMemoryStats(&args), "PJRT_Executable_GetCompiledMemoryStats");
  } catch (const PjrtError&) {
    return std::nullopt;  // unimplemented by this plugin
  }
  return ProgramMemory{args.generated_code_size_in_bytes, args.argument_size_in_bytes, args.output_size_in_bytes,
                     args.alias_size_in_bytes, args.temp_size_in_bytes};
}

ExecuteResult Executable::execute(const std::vector<std::vector<const Buffer*>>& args) const {
  return run(args.data(), args.size(), nullptr);
}

ExecuteResult Executable::execute_on(PJRT_Device* device, const std::vector<const Buffer*>& args,
                                     const std::vector<int64_t>& keep) const {
  return run(&args, 1, device, keep);
}

ExecuteResult Executable::run(const std::vector<const Buffer*>* args, size_t num_devices, PJRT_Device* device,
                              const std::vector<int64_t>& keep) const {
  if (num_devices == 0) throw std::invalid_argument("execute: no argument lists (one per device)");
  const size_t num_args = args[0].size();
  // Flat arrays, one row per device: a few allocations per execution, however many devices.
  std::vector<PJRT_Buffer*> raw_args(num_devices * num_args);
  std::vector<PJRT_Buffer*> raw_outputs(num_devices * num_outputs_);
  std::vector<PJRT_Buffer* const*> arg_lists(num_devices);
  std::vector<PJRT_Buffer**> output_lists(num_devices);
  for (size_t d = 0; d < num_devices; ++d) {
    if (args[d].size() != num_args)
      throw std::invalid_argument("execute: device " + std::to_string(d) + " got " +
                                  std::to_string(args[d].size()) + " arguments, device 0 got " +
                                  std::to_string(num_args));
    for (size_t i = 0; i < num_args; ++i) raw_args[d * num_args + i] = args[d][i]->raw();
    arg_lists[d] = raw_args.data() + d * num_args;
    output_lists[d] = raw_outputs.data() + d * num_outputs_;
  }
  std::vector<PJRT_Event*> events(num_devices, nullptr);

  PJRT_ARGS(PJRT_ExecuteOptions, options);
  options.non_donatable_input_indices = keep.data();
  options.num_non_donatable_input_indices = keep.size();
  PJRT_ARGS(PJRT_LoadedExecutable_Execute_Args, exec);
  exec.executable = loaded_;
  exec.options = &options;
  exec.argument_lists = arg_lists.data();
  exec.num_devices = num_devices;
  exec.num_args = num_args;
  exec.output_lists = output_lists.data();
  exec.device_complete_events = events.data();
  exec.execute_device = device;
  check(api_, api_->PJRT_LoadedExecutable_Execute(&exec), "PJRT_LoadedExecutable_Execute");

  ExecuteResult result;
  result.done.reserve(num_devices);
  result.outputs.resize(num_devices);
  for (size_t d = 0; d < num_devices; ++d) {
    result.done.emplace_back(api_, events[d]);
    result.outputs[d].reserve(num_outputs_);
    for (size_t i = 0; i < num_outputs_; ++i) result.outputs[d].emplace_back(api_, output_lists[d][i]);
  }
  return result;
}

}  // namespace torchtpu::runtime
