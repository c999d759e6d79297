// A PJRT client: the devices of one plugin, and compile / transfer / deserialize on them.
// Thread-safe: PJRT clients are, and this class adds no mutable state after construction.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "pjrt_c_api.h"
#include "runtime/buffer.h"
#include "runtime/compile_options.h"
#include "runtime/device.h"
#include "runtime/executable.h"
#include "runtime/plugin.h"

namespace torchtpu::runtime {

// Integer create options passed to PJRT_Client_Create ("cpu_device_count" -> 4).
using ClientOptions = std::map<std::string, int64_t>;

// The options torchtpu uses for `plugin`: on the XLA CPU plugin, the device count comes from
// TORCHTPU_NUM_CPU_DEVICES (default 1).
ClientOptions default_client_options(const Plugin& plugin);

class Client {
 public:
  static std::unique_ptr<Client> create(const Plugin& plugin, const ClientOptions& options);
  static std::unique_ptr<Client> create(const Plugin& plugin) {
    return create(plugin, default_client_options(plugin));
  }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;
  ~Client();

  const Plugin& plugin() const { return plugin_; }
  const std::string& platform_name() const { return platform_name_; }  // "cpu", "cuda", "tpu"
  const std::string& platform_version() const { return platform_version_; }
  const std::vector<Device>& devices() const { return devices_; }  // addressable ones
  const Device& device(size_t index) const;
  std::vector<Memory> memories() const;

  // Compiles StableHLO (MLIR text). Errors name the parse or compile failure.
  Executable compile(const std::string& stablehlo, const CompileOptions& options = {}) const;
  Executable deserialize(const std::string& bytes) const;

  // Copies dense row-major host data to `device`; `data` may be reused once this returns.
  Buffer to_device(const void* data, DType dtype, const std::vector<int64_t>& dims,
                   const Device& device) const;
  // Starts the copy and returns at once; `data` must stay alive until the event is ready.
  std::pair<Buffer, Event> to_device_async(const void* data, DType dtype,
                                           const std::vector<int64_t>& dims,
                                           const Device& device) const;

  // Registers host memory with the device for direct transfers (GPU plugins page-lock it). False
  // where the plugin has no such mapping, e.g. the CPU plugin, whose device memory is host memory.
  bool dma_map(void* data, size_t size) const;
  void dma_unmap(void* data) const;

  const PJRT_Api* api() const { return plugin_.api(); }
  PJRT_Client* raw() const { return client_; }

 private:
  Client(const Plugin& plugin, PJRT_Client* client);
  std::pair<Buffer, Event> transfer(const void* data, DType dtype, const std::vector<int64_t>& dims,
                                    const Device& device, PJRT_HostBufferSemantics semantics) const;

  const Plugin& plugin_;
  PJRT_Client* client_;
  std::string platform_name_;
  std::string platform_version_;
  std::vector<Device> devices_;
};

}  // namespace torchtpu::runtime
