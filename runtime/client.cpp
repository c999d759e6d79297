#include "runtime/client.h"

#include <cstddef>
#include <cstdlib>
#include <stdexcept>

#include "runtime/error.h"
#include "runtime/pjrt_args.h"

namespace torchtpu::runtime {

ClientOptions default_client_options(const Plugin& plugin) {
  ClientOptions options;
  if (plugin.path().find("xla_cpu") != std::string::npos) {
    const char* count = std::getenv("TORCHTPU_NUM_CPU_DEVICES");
    int64_t n = count && *count ? std::strtoll(count, nullptr, 10) : 1;
    if (n < 1)
      throw std::invalid_argument("TORCHTPU_NUM_CPU_DEVICES must be a positive integer, got '" +
                                  std::string(count) + "'");
    options["cpu_device_count"] = n;
  }
  return options;
}

std::unique_ptr<Client> Client::create(const Plugin& plugin, const ClientOptions& options) {
  std::vector<PJRT_NamedValue> values;
  for (const auto& [name, value] : options) {
    PJRT_ARGS(PJRT_NamedValue, v);
    v.name = name.c_str();
    v.name_size = name.size();
    v.type = PJRT_NamedValue_kInt64;
    v.int64_value = value;
    v.value_size = 1;
    values.push_back(v);
  }
  PJRT_ARGS(PJRT_Client_Create_Args, args);
  args.create_options = values.data();
  args.num_options = values.size();
  check(plugin.api(), plugin.api()->PJRT_Client_Create(&args),
        "PJRT_Client_Create (" + plugin.path() + ")");
  return std::unique_ptr<Client>(new Client(plugin, args.client));
}

Client::Client(const Plugin& plugin, PJRT_Client* client) : plugin_(plugin), client_(client) {
  const PJRT_Api* api = plugin.api();
  PJRT_ARGS(PJRT_Client_PlatformName_Args, name);
  name.client = client_;
  check(api, api->PJRT_Client_PlatformName(&name), "PJRT_Client_PlatformName");
  platform_name_.assign(name.platform_name, name.platform_name_size);

  PJRT_ARGS(PJRT_Client_PlatformVersion_Args, version);
  version.client = client_;
  check(api, api->PJRT_Client_PlatformVersion(&version), "PJRT_Client_PlatformVersion");
  platform_version_.assign(version.platform_version, version.platform_version_size);

  PJRT_ARGS(PJRT_Client_AddressableDevices_Args, devices);
  devices.client = client_;
  check(api, api->PJRT_Client_AddressableDevices(&devices), "PJRT_Client_AddressableDevices");
  for (size_t i = 0; i < devices.num_addressable_devices; ++i)
    devices_.emplace_back(api, devices.addressable_devices[i]);
}

Client::~Client() {
  PJRT_ARGS(PJRT_Client_Destroy_Args, args);
  args.client = client_;
  api()->PJRT_Client_Destroy(&args);
}

const Device& Client::device(size_t index) const {
  if (index >= devices_.size())
    throw std::out_of_range("device index " + std::to_string(index) + " out of range: " +
                            platform_name_ + " has " + std::to_string(devices_.size()) +
                            " device(s)");
  return devices_[index];
}

std::vector<Memory> Client::memories() const {
  PJRT_ARGS(PJRT_Client_AddressableMemories_Args, args);
  args.client = client_;
  check(api(), api()->PJRT_Client_AddressableMemories(&args), "PJRT_Client_AddressableMemories");
  std::vector<Memory> out;
  for (size_t i = 0; i < args.num_addressable_memories; ++i) {
    PJRT_Memory* m = args.addressable_memories[i];
    PJRT_ARGS(PJRT_Memory_Id_Args, id);
    id.memory = m;
    check(api(), api()->PJRT_Memory_Id(&id), "PJRT_Memory_Id");
    PJRT_ARGS(PJRT_Memory_Kind_Args, kind);
    kind.memory = m;
    check(api(), api()->PJRT_Memory_Kind(&kind), "PJRT_Memory_Kind");
    out.push_back({id.id, std::string(kind.kind, kind.kind_size), m});
  }
  return out;
}

Executable Client::compile(const std::string& stablehlo, const CompileOptions& options) const {
  static const std::string kFormat = "mlir";
  std::string encoded = options.encode();
  PJRT_ARGS(PJRT_Program, program);
  program.code = const_cast<char*>(stablehlo.data());  // read-only for compilation
  program.code_size = stablehlo.size();
  program.format = kFormat.data();
  program.format_size = kFormat.size();

  PJRT_ARGS(PJRT_Client_Compile_Args, args);
  args.client = client_;
  args.program = &program;
  args.compile_options = encoded.data();
  args.compile_options_size = encoded.size();
  check(api(), api()->PJRT_Client_Compile(&args), "compiling StableHLO");
  return Executable(api(), args.executable);
}

Executable Client::deserialize(const std::string& bytes) const {
  PJRT_ARGS(PJRT_Executable_DeserializeAndLoad_Args, args);
  args.client = client_;
  args.serialized_executable = bytes.data();
  args.serialized_executable_size = bytes.size();
  check(api(), api()->PJRT_Executable_DeserializeAndLoad(&args),
        "PJRT_Executable_DeserializeAndLoad");
  return Executable(api(), args.loaded_executable);
}

Buffer Client::to_device(const void* data, DType dtype, const std::vector<int64_t>& dims,
                         const Device& device) const {
  return transfer(data, dtype, dims, device, PJRT_HostBufferSemantics_kImmutableOnlyDuringCall)
      .first;
}

std::pair<Buffer, Event> Client::to_device_async(const void* data, DType dtype,
                                                 const std::vector<int64_t>& dims,
                                                 const Device& device) const {
  return transfer(data, dtype, dims, device,
                  PJRT_HostBufferSemantics_kImmutableUntilTransferCompletes);
}

std::pair<Buffer, Event> Client::transfer(const void* data, DType dtype,
                                          const std::vector<int64_t>& dims, const Device& device,
                                          PJRT_HostBufferSemantics semantics) const {
  for (int64_t d : dims)
    if (d < 0) throw std::invalid_argument("to_device: negative dimension " + std::to_string(d));
  PJRT_ARGS(PJRT_Client_BufferFromHostBuffer_Args, args);
  args.client = client_;
  args.data = data;
  args.type = to_pjrt(dtype);
  args.dims = dims.data();
  args.num_dims = dims.size();
  args.host_buffer_semantics = semantics;
  args.device = device.raw();
  check(api(), api()->PJRT_Client_BufferFromHostBuffer(&args), "PJRT_Client_BufferFromHostBuffer");
  return {Buffer(api(), args.buffer), Event(api(), args.done_with_host_buffer)};
}

bool Client::dma_map(void* data, size_t size) const {
  const PJRT_Api* api = plugin_.api();
  // A plugin built against an older C API has no such entry (its table ends before it).
  if (api->struct_size <= offsetof(PJRT_Api, PJRT_Client_DmaUnmap) || !api->PJRT_Client_DmaMap) return false;
  PJRT_ARGS(PJRT_Client_DmaMap_Args, args);
  args.client = client_;
  args.data = data;
  args.size = size;
  try {
    check(api, api->PJRT_Client_DmaMap(&args), "PJRT_Client_DmaMap");
  } catch (const PjrtError&) {
    return false;  // unimplemented by this plugin
  }
  return true;
}

void Client::dma_unmap(void* data) const {
  PJRT_ARGS(PJRT_Client_DmaUnmap_Args, args);
  args.client = client_;
  args.data = data;
  check(plugin_.api(), plugin_.api()->PJRT_Client_DmaUnmap(&args), "PJRT_Client_DmaUnmap");
}

}  // namespace torchtpu::runtime
