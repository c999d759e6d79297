// float32 storages and views for the executor tests: made from host data, read back to the host.
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

// A float32 row-major view of `sizes` starting `offset` elements in.
inline View contiguous(std::vector<int64_t> sizes, int64_t offset = 0) {
  std::vector<int64_t> strides(sizes.size());
  int64_t st = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    strides[i] = st;
    st *= sizes[i];
  }
  return {DType::kF32, sizes, strides, offset};
}

inline std::vector<float> contents(const BufferRef& s) {
  std::vector<float> out(s.nbytes() / sizeof(float));
  download(s, out.data());
  return out;
}

}  // namespace torchtpu::exec::testing
