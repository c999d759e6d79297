#include "hlo/attributes.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>

namespace torchtpu::hlo {

std::string int_list(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

std::string i64_array(const std::vector<int64_t>& v) {
  if (v.empty()) return "array<i64>";
  std::string s = "array<i64: ";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + ">";
}

std::string i64_matrix(const std::vector<std::vector<int64_t>>& rows) {
  size_t cols = rows.empty() ? 0 : rows[0].size();
  std::string s = "dense<[";
  for (size_t r = 0; r < rows.size(); ++r) {
    require(rows[r].size() == cols, "replica groups / pairs must all have the same size");
    s += (r ? ", " : "") + int_list(rows[r]);
  }
  return s + "]> : tensor<" + std::to_string(rows.size()) + "x" + std::to_string(cols) + "xi64>";
}

std::string i64_attr(int64_t v) { return std::to_string(v) + " : i64"; }

namespace {

// MLIR float literals: decimal when finite (it must contain '.' or 'e'), else the bit pattern.
std::string float_literal(double value, DType dtype) {
  if (std::isfinite(value)) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.17e", value);
    return buf;
  }
  // Non-finite values must be spelled as the type's bit pattern.
  uint64_t bits = 0;
  bool neg = std::signbit(value);
  switch (dtype) {
    case DType::kF64:
      bits = std::isnan(value) ? 0x7FF8000000000000ull : (neg ? 0xFFF0000000000000ull : 0x7FF0000000000000ull);
      break;
    case DType::kF32:
      bits = std::isnan(value) ? 0x7FC00000u : (neg ? 0xFF800000u : 0x7F800000u);
      break;
    case DType::kBF16:
      bits = std::isnan(value) ? 0x7FC0u : (neg ? 0xFF80u : 0x7F80u);
      break;
    case DType::kF16:
      bits = std::isnan(value) ? 0x7E00u : (neg ? 0xFC00u : 0x7C00u);
      break;
    case DType::kF8E5M2:
      bits = std::isnan(value) ? 0x7Eu : (neg ? 0xFCu : 0x7Cu);
      break;
    case DType::kF8E4M3FN:  // no infinities: they saturate, as the integer types' do
      if (!std::isnan(value)) return float_literal(neg ? lowest_value(dtype) : highest_value(dtype), dtype);
      bits = 0x7Fu;
      break;
    default:
      throw std::invalid_argument("non-finite constant for a non-float type");
  }
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llX", static_cast<unsigned long long>(bits));
  return buf;
}

}  // namespace

std::string splat_literal(double value, DType dtype) {
  // -INFINITY, "the lowest value", is false for bools (a max reduction's identity); any other
  // nonzero value is true.
  if (dtype == DType::kBool) return value != 0 && value != -INFINITY ? "true" : "false";
  if (is_floating(dtype)) return float_literal(value, dtype);
  if (is_complex(dtype)) {
    DType part = component_dtype(dtype);
    return "(" + float_literal(value, part) + ", " + float_literal(0.0, part) + ")";
  }
  require(!std::isnan(value), "integer constant must not be NaN");
  // Saturate to the type's range: "the lowest value" is written -INFINITY for every dtype (a max
  // reduction's identity), and a double at or beyond 2^63 does not convert to int64 otherwise.
  value = std::clamp(value, lowest_value(dtype), highest_value(dtype));
  if (is_unsigned(dtype)) {
    if (value >= 18446744073709551615.0) return std::to_string(UINT64_MAX);
    return std::to_string(static_cast<uint64_t>(value));
  }
  if (value >= 9223372036854775807.0) return std::to_string(INT64_MAX);
  return std::to_string(static_cast<int64_t>(value));
}

std::string hex_literal(const void* data, size_t size) {
  static const char kDigits[] = "0123456789ABCDEF";
  std::string s = "\"0x";
  const auto* bytes = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < size; ++i) {
    s += kDigits[bytes[i] >> 4];
    s += kDigits[bytes[i] & 15];
  }
  return s + "\"";
}

void require(bool ok, std::string_view what) {
  if (!ok) throw std::invalid_argument("StableHLO builder: " + std::string(what));
}

}  // namespace torchtpu::hlo
