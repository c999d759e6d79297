// Compile options for PJRT_Client_Compile, encoded by hand as an xla.CompileOptionsProto.
//
// PJRT takes the options as serialized protobuf. We write the few fields we set with a minimal
// wire-format encoder instead of depending on protobuf and XLA's .proto files.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace torchtpu::runtime {

struct CompileOptions {
  int num_replicas = 1;
  int num_partitions = 1;
  // device_assignment[replica][partition] = global device id. Empty: PJRT's default assignment.
  std::vector<std::vector<int>> device_assignment;
  // A portable executable is compiled once and can run on any single device (chosen at execute).
  bool portable = false;
  // XLA DebugOptions overridden by name for this compile ("xla_allow_excess_precision" -> false),
  // on top of the plugin's defaults (CompileOptionsProto.env_option_overrides).
  std::map<std::string, bool> xla_flags;
  std::map<std::string, int64_t> xla_int_flags;  // the same for integer options
  std::map<std::string, std::string> xla_string_flags;  // and for strings ("xla_disable_hlo_passes")

  // The serialized xla.CompileOptionsProto.
  std::string encode() const;
};

}  // namespace torchtpu::runtime
