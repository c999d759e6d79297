// A ranked tensor type: element type and static dimensions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/dtype.h"

namespace torchtpu::hlo {

struct TensorType {
  DType dtype;
  std::vector<int64_t> dims;

  int64_t rank() const { return static_cast<int64_t>(dims.size()); }
  int64_t element_count() const;
  TensorType with_dtype(DType d) const { return {d, dims}; }
  // "tensor<2x3xf32>", "tensor<i1>"
  std::string str() const;
  bool operator==(const TensorType& o) const { return dtype == o.dtype && dims == o.dims; }
  bool operator!=(const TensorType& o) const { return !(*this == o); }
};

}  // namespace torchtpu::hlo
