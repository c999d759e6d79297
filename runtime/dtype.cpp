#include "runtime/dtype.h"

#include <cmath>

namespace torchtpu {
namespace {

struct DTypeInfo {
  size_t size;
  std::string_view mlir;
  std::string_view name;
};

// Indexed by DType; keep in enum order.
constexpr DTypeInfo kInfo[] = {
    {1, "i1", "bool"},          {1, "i8", "int8"},
    {2, "i16", "int16"},        {4, "i32", "int32"},
    {8, "i64", "int64"},        {1, "ui8", "uint8"},
    {4, "ui32", "uint32"},      {8, "ui64", "uint64"},
    {2, "f16", "float16"},      {2, "bf16", "bfloat16"},
    {4, "f32", "float32"},      {8, "f64", "float64"},
    {8, "complex<f32>", "complex64"}, {16, "complex<f64>", "complex128"},
    {4, "ui32", "complex32"},        {2, "ui16", "uint16"},
    {1, "f8E4M3FN", "float8_e4m3fn"}, {1, "f8E5M2", "float8_e5m2"},
};

const DTypeInfo& info(DType t) { return kInfo[static_cast<size_t>(t)]; }

}  // namespace

size_t element_size(DType t) { return info(t).size; }
std::string_view mlir_name(DType t) { return info(t).mlir; }
std::string_view dtype_name(DType t) { return info(t).name; }

bool is_floating(DType t) {
  return t == DType::kF16 || t == DType::kBF16 || t == DType::kF32 || t == DType::kF64 || t == DType::kF8E4M3FN ||
         t == DType::kF8E5M2;
}
bool is_complex(DType t) { return t == DType::kC64 || t == DType::kC128; }
bool is_unsigned(DType t) {
  return t == DType::kU8 || t == DType::kU16 || t == DType::kU32 || t == DType::kU64;
}

DType component_dtype(DType t) {
  if (t == DType::kC64) return DType::kF32;
  return t == DType::kC128 ? DType::kF64 : t;
}

double lowest_value(DType t) {
  switch (t) {
    case DType::kBool: case DType::kU8: case DType::kU16: case DType::kU32: case DType::kU64: return 0;
    case DType::kF8E4M3FN: return -448;  // no infinity: its largest finite value
    case DType::kS8: return -128;
    case DType::kS16: return -32768;
    case DType::kS32: return -2147483648.0;
    case DType::kS64: return -9223372036854775808.0;
    default: return -HUGE_VAL;
  }
}

double highest_value(DType t) {
  switch (t) {
    case DType::kBool: return 1;
    case DType::kS8: return 127;
    case DType::kS16: return 32767;
    case DType::kS32: return 2147483647.0;
    case DType::kS64: return 9223372036854775807.0;  // rounds to 2^63: constants saturate below it
    case DType::kU8: return 255;
    case DType::kU16: return 65535;
    case DType::kF8E4M3FN: return 448;
    case DType::kU32: return 4294967295.0;
    case DType::kU64: return 18446744073709551615.0;
    default: return HUGE_VAL;
  }
}

}  // namespace torchtpu
