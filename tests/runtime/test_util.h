// Shared fixtures for runtime tests: one client per process on the discovered plugin.
// CTest runs these with TORCHTPU_NUM_CPU_DEVICES=4 so the CPU plugin exposes four devices.
#pragma once

#include <cstring>
#include <vector>

#include "hlo/builder.h"
#include "runtime/client.h"
#include "runtime/error.h"

namespace torchtpu::testing {

runtime::Client& client();

// Compiles `b` for one device and runs it on device 0 with `args`; returns the outputs.
std::vector<runtime::Buffer> run_single(hlo::Builder& b, const std::vector<const runtime::Buffer*>& args);

template <typename T>
runtime::Buffer upload(const std::vector<T>& data, DType dtype, const std::vector<int64_t>& dims,
                       size_t device = 0) {
  return client().to_device(data.data(), dtype, dims, client().device(device));
}

template <typename T>
std::vector<T> download(const runtime::Buffer& b) {
  std::vector<T> out(b.byte_size() / sizeof(T));
  b.copy_to_host(out.data(), out.size() * sizeof(T));
  return out;
}

}  // namespace torchtpu::testing
