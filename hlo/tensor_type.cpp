#include "hlo/tensor_type.h"

namespace torchtpu::hlo {

int64_t TensorType::element_count() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

std::string TensorType::str() const {
  std::string s = "tensor<";
  for (int64_t d : dims) s += std::to_string(d) + "x";
  s += mlir_name(dtype);
  return s + ">";
}

}  // namespace torchtpu::hlo
