// Element types shared by the runtime and the StableHLO emitter.
// Plain C++: no PJRT or PyTorch types here, so every layer can name a dtype.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace torchtpu {

enum class DType : uint8_t {
  kBool, kS8, kS16, kS32, kS64, kU8, kU32, kU64, kF16, kBF16, kF32, kF64, kC64, kC128,
  // complex32 (torch.chalf): XLA has no complex<f16>, so its elements are stored as 32-bit words
  // holding the float16 real and imaginary parts (PyTorch's own layout). Programs see ui32 and
  // convert (hlo::Builder::convert) to complex64 to compute; is_complex() is false for it.
  kC32,
  kU16,
  // float8 (torch.float8_e4m3fn: no infinities, one NaN pattern per sign; torch.float8_e5m2:
  // IEEE-like). PyTorch computes with them in float32 and rounds each result, as XLA does.
  kF8E4M3FN, kF8E5M2,
};

// Size of one element in bytes.
size_t element_size(DType t);

// The MLIR spelling used in StableHLO tensor types ("f32", "i1", "ui8", "complex<f32>").
std::string_view mlir_name(DType t);

// A short human name for messages ("float32", "bfloat16").
std::string_view dtype_name(DType t);

bool is_floating(DType t);
bool is_complex(DType t);
bool is_unsigned(DType t);

// The type of a complex type's real and imaginary parts (float32 for complex64); any other type
// itself.
DType component_dtype(DType t);

// The range of values the type holds: ±infinity for floats. StableHLO constants saturate to it,
// so "the lowest value" of any type (a max reduction's identity) is written -INFINITY.
double lowest_value(DType t);
double highest_value(DType t);

}  // namespace torchtpu
