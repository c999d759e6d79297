#include "runtime/device.h"

#include "runtime/error.h"
#include "runtime/pjrt_args.h"

namespace torchtpu::runtime {

Device::Device(const PJRT_Api* api, PJRT_Device* device) : api_(api), device_(device) {
  PJRT_ARGS(PJRT_Device_GetDescription_Args, get);
  get.device = device;
  check(api, api->PJRT_Device_GetDescription(&get), "PJRT_Device_GetDescription");

  PJRT_ARGS(PJRT_DeviceDescription_Id_Args, id);
  id.device_description = get.device_description;
  check(api, api->PJRT_DeviceDescription_Id(&id), "PJRT_DeviceDescription_Id");
  id_ = id.id;

  PJRT_ARGS(PJRT_DeviceDescription_Kind_Args, kind);
  kind.device_description = get.device_description;
  check(api, api->PJRT_DeviceDescription_Kind(&kind), "PJRT_DeviceDescription_Kind");
  kind_.assign(kind.device_kind, kind.device_kind_size);

  PJRT_ARGS(PJRT_DeviceDescription_DebugString_Args, debug);
  debug.device_description = get.device_description;
  check(api, api->PJRT_DeviceDescription_DebugString(&debug),
        "PJRT_DeviceDescription_DebugString");
  description_.assign(debug.debug_string, debug.debug_string_size);

  PJRT_ARGS(PJRT_Device_LocalHardwareId_Args, hw);
  hw.device = device;
  check(api, api->PJRT_Device_LocalHardwareId(&hw), "PJRT_Device_LocalHardwareId");
  local_hardware_id_ = hw.local_hardware_id;
}

std::optional<MemoryStats> Device::memory_stats() const {
  PJRT_ARGS(PJRT_Device_MemoryStats_Args, args);
  args.device = device_;
  try {
    check(api_, api_->PJRT_Device_MemoryStats(&args), "PJRT_Device_MemoryStats");
  } catch (const PjrtError& e) {
    if (e.code() == PJRT_Error_Code_UNIMPLEMENTED) return std::nullopt;
    throw;
  }
  MemoryStats stats;
  stats.bytes_in_use = args.bytes_in_use;
  if (args.peak_bytes_in_use_is_set) stats.peak_bytes_in_use = args.peak_bytes_in_use;
  if (args.bytes_limit_is_set) stats.bytes_limit = args.bytes_limit;
  return stats;
}

}  // namespace torchtpu::runtime
