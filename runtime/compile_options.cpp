#include "runtime/compile_options.h"

#include <cstdint>
#include <stdexcept>

namespace torchtpu::runtime {
namespace {

// Field numbers from xla/pjrt/proto/compile_options.proto and xla/xla_data.proto.
constexpr int kCompileOptionsBuildOptions = 3;       // CompileOptionsProto.executable_build_options
constexpr int kCompileOptionsPortable = 4;           // .compile_portable_executable
constexpr int kCompileOptionsOverrides = 7;          // .env_option_overrides (map<string, OptionOverrideProto>)
constexpr int kMapKey = 1, kMapValue = 2;            // a map entry's fields
constexpr int kOverrideString = 1;                   // OptionOverrideProto.string_field
constexpr int kOverrideBool = 2;                     // .bool_field
constexpr int kOverrideInt = 3;                      // OptionOverrideProto.int_field
constexpr int kBuildDeviceOrdinal = 1;               // ExecutableBuildOptionsProto.device_ordinal
constexpr int kBuildNumReplicas = 4;                 // .num_replicas
constexpr int kBuildNumPartitions = 5;               // .num_partitions
constexpr int kBuildDeviceAssignment = 9;            // .device_assignment
constexpr int kAssignmentReplicaCount = 1;           // DeviceAssignmentProto.replica_count
constexpr int kAssignmentComputationCount = 2;       // .computation_count
constexpr int kAssignmentComputationDevices = 3;     // .computation_devices
constexpr int kComputationDeviceReplicaIds = 1;      // ComputationDevice.replica_device_ids

enum WireType { kVarint = 0, kLengthDelimited = 2 };

// Protobuf wire format: each field is a varint key (number << 3 | wire type) and a payload.
class ProtoWriter {
 public:
  void varint_field(int field, int64_t value) {
    key(field, kVarint);
    varint(static_cast<uint64_t>(value));
  }
  void bytes_field(int field, const std::string& bytes) {
    key(field, kLengthDelimited);
    varint(bytes.size());
    out_ += bytes;
  }
  void packed_field(int field, const std::vector<int64_t>& values) {
    ProtoWriter payload;
    for (int64_t v : values) payload.varint(static_cast<uint64_t>(v));
    bytes_field(field, payload.out_);
  }
  const std::string& bytes() const { return out_; }

 private:
  void key(int field, WireType type) { varint((static_cast<uint64_t>(field) << 3) | type); }
  void varint(uint64_t v) {
    while (v >= 0x80) {
      out_.push_back(static_cast<char>(v | 0x80));
      v >>= 7;
    }
    out_.push_back(static_cast<char>(v));
  }
  std::string out_;
};

std::string encode_device_assignment(const std::vector<std::vector<int>>& assignment,
                                     int replicas, int partitions) {
  if (static_cast<int>(assignment.size()) != replicas)
    throw std::invalid_argument("device_assignment has " + std::to_string(assignment.size()) +
                                " rows, expected one per replica (" + std::to_string(replicas) +
                                ")");
  ProtoWriter w;
  w.varint_field(kAssignmentReplicaCount, replicas);
  w.varint_field(kAssignmentComputationCount, partitions);
  for (int p = 0; p < partitions; ++p) {
    std::vector<int64_t> ids;
    for (const auto& row : assignment) {
      if (static_cast<int>(row.size()) != partitions)
        throw std::invalid_argument("device_assignment row has " + std::to_string(row.size()) +
                                    " entries, expected one per partition (" +
                                    std::to_string(partitions) + ")");
      ids.push_back(row[p]);
    }
    ProtoWriter computation;
    computation.packed_field(kComputationDeviceReplicaIds, ids);
    w.bytes_field(kAssignmentComputationDevices, computation.bytes());
  }
  return w.bytes();
}

}  // namespace

std::string CompileOptions::encode() const {
  ProtoWriter build;
  build.varint_field(kBuildDeviceOrdinal, -1);  // proto3 default 0 would pin device 0
  build.varint_field(kBuildNumReplicas, num_replicas);
  build.varint_field(kBuildNumPartitions, num_partitions);
  if (!device_assignment.empty())
    build.bytes_field(kBuildDeviceAssignment,
                      encode_device_assignment(device_assignment, num_replicas, num_partitions));
  ProtoWriter options;
  options.bytes_field(kCompileOptionsBuildOptions, build.bytes());
  if (portable) options.varint_field(kCompileOptionsPortable, 1);
  auto add_override = [&](const std::string& name, auto write_value) {
    ProtoWriter override_value, entry;
    write_value(override_value);
    entry.bytes_field(kMapKey, name);
    entry.bytes_field(kMapValue, override_value.bytes());
    options.bytes_field(kCompileOptionsOverrides, entry.bytes());
  };
  for (const auto& [name, value] : xla_flags)
    add_override(name, [&](ProtoWriter& w) { w.varint_field(kOverrideBool, value ? 1 : 0); });
  for (const auto& [name, value] : xla_int_flags)
    add_override(name, [&](ProtoWriter& w) { w.varint_field(kOverrideInt, value); });
  for (const auto& [name, value] : xla_string_flags)
    add_override(name, [&](ProtoWriter& w) { w.bytes_field(kOverrideString, value); });
  return options.bytes();
}

}  // namespace torchtpu::runtime
