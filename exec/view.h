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
  // The dimensions from outermost to innermost in memory (by stride; size-1 dimensions last).
  std::vector<int64_t> storage_order() const;
  // Its elements fill numel() consecutive places in some order of the dimensions (a transpose
  // of a contiguous tensor is dense).
  bool is_dense() const;
  // Appends a compact description to a cache key, of at most key_room() characters; without
  // the offset where the program reads it at run time (exec/runtime_offset.h).
  void append_key(std::string& key, bool with_offset = true) const;
  size_t key_room() const;
};

}  // namespace torchtpu::exec
