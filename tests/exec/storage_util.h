// float32 storages for the executor tests: made from host data, read back to the host.
#pragma once

#include <memory>
#include <vector>

#include "exec/executor.h"

namespace torchtpu::exec::testing {

inline std::unique_ptr<BufferRef> storage_of(const std::vector<float>& data) {
  auto s = std::make_unique<BufferRef>(0, data.size() * sizeof(float));
  upload(*s, data.data(), DType::kF32);
  return s;
}

inline std::vector<float> contents(const BufferRef& s) {
  std::vector<float> out(s.nbytes() / sizeof(float));
  download(s, out.data());
  return out;
}

}  // namespace torchtpu::exec::testing
