// Formatting of MLIR attribute values used by the emitter.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "hlo/tensor_type.h"

namespace torchtpu::hlo {

std::string i64_array(const std::vector<int64_t>& v);                 // array<i64: 1, 2>
std::string int_list(const std::vector<int64_t>& v);                  // [1, 2]
std::string i64_matrix(const std::vector<std::vector<int64_t>>& rows);  // dense<[[..]]> : tensor<RxCxi64>
std::string i64_attr(int64_t v);                                      // 3 : i64
std::string splat_literal(double value, DType dtype);                 // element literal for dense<>
std::string hex_literal(const void* data, size_t size);               // "0x0A0B..."

// Throws std::invalid_argument(`what`) unless `ok`.
void require(bool ok, std::string_view what);

}  // namespace torchtpu::hlo
