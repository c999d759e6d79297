// How a tensor looks at its storage: element type, sizes, strides and offset (in elements).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/dtype.h"

namespace torchtpu::exec {

struct View {
  DType dtype;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  int64_t offset = 0;

  int64_t numel() const;
  // Row-major dense strides for `sizes` (size-1 dimensions may have any stride).
  bool is_contiguous() const;
  // Appends a compact description to a cache key, of at most key_room() characters.
  void append_key(std::string& key) const;
  size_t key_room() const;
};

}  // namespace torchtpu::exec
