// A device and a memory space of a PJRT client. Both are owned by the client; these are views.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "pjrt_c_api.h"

namespace torchtpu::runtime {

struct MemoryStats {
  int64_t bytes_in_use = 0;
  std::optional<int64_t> peak_bytes_in_use;
  std::optional<int64_t> bytes_limit;
};

class Device {
 public:
  Device(const PJRT_Api* api, PJRT_Device* device);

  int id() const { return id_; }                    // global id, used in device assignments
  int local_hardware_id() const { return local_hardware_id_; }
  const std::string& kind() const { return kind_; }  // "cpu", "NVIDIA H200", "TPU v5 lite"
  const std::string& description() const { return description_; }
  // Allocator statistics; std::nullopt where the plugin does not implement them (the CPU one).
  std::optional<MemoryStats> memory_stats() const;
  PJRT_Device* raw() const { return device_; }

 private:
  const PJRT_Api* api_;
  PJRT_Device* device_;
  int id_ = 0;
  int local_hardware_id_ = -1;
  std::string kind_;
  std::string description_;
};

struct Memory {
  int id;
  std::string kind;  // "device", "pinned_host", "unpinned_host"
  PJRT_Memory* raw;
};

}  // namespace torchtpu::runtime
