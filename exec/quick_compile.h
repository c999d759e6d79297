// What a program's text tells the compile cache about compiling it (exec/compile_cache.cpp): which
// programs may be compiled quickly first (Tier::kQuick, below), how many bytes a run moves, whether
// it holds types the CPU emulates, whether it multiplies a matrix by a vector.
//
// A quick compile turns LLVM's optimizations off, and with them the fused multiply-adds that XLA
// lets LLVM contract: float results can then differ from the optimized program's in the last bit
// (a bfloat16 bilinear resize did in one pixel of 42). The same op must not give other bits once it
// is promoted, so by default only programs whose results cannot depend on code generation compile
// quickly: programs of integers and booleans only, whatever they compute (reductions and loops
// included), and programs whose floats are only moved, selected, compared, converted, and either
// added and subtracted or multiplied and divided, not both (no reductions or transcendental
// functions, and no regions: their types are not on the line this rule reads), without float8,
// float16, bfloat16 or complex values (a conversion to float8 differed, and a float16 NaN that was
// only copied).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace torchtpu::exec {

// Whether `program` (StableHLO text in the generic form hlo::Builder writes) computes the same bits
// however it is compiled.
bool same_bits_however_compiled(const std::string& program);

// Whether `program`'s only float arithmetic that code generation can change is products beside
// sums (lerp's a + w * (b - a), linspace's start + i * step): optimized, they become the fused
// multiply-adds PyTorch's CPU kernels compute too; unoptimized, they round twice.
bool only_multiply_adds(const std::string& program);

// Whether `program` has float8, float16, bfloat16 or complex values anywhere: the CPU emulates
// them, and how depends on code generation (a float8 conversion rounds otherwise without XLA's
// fusion emitters or LLVM's optimizations, and one complex comparison does not compile).
bool has_emulated_types(const std::string& program);

// Whether `program` multiplies a matrix by a vector (a dot_general whose result has one row or one
// column past its batch dimensions: a decode step's projection) and reduces nothing else. XLA
// CPU's fusion pass makes such a dot of a reshaped parameter (every torchtpu operand is a flat
// buffer) an element-by-element loop fusion instead of its library call, 10-20x slower; without
// the pass, the dot stays a library call (exec/compile_cache.cpp).
bool matrix_vector_without_reductions(const std::string& program);

// Whether a matmul's result of these sizes is a matrix times a vector: a vector, or a matrix of one
// row or one column. Fused mode runs such a matmul alone, between windows: inside one, XLA needs
// its fusion pass for everything else and makes the dot a loop.
bool matrix_vector_result(const std::vector<int64_t>& sizes);

// The bytes of `program`'s operands and results (its main function's types): what one run reads and
// writes, which decides whether compiling it optimized can pay back (exec/compile_cache.cpp).
int64_t bytes_per_run(const std::string& program);

// The bytes of `program`'s results: what one run computes.
int64_t result_bytes(const std::string& program);

}  // namespace torchtpu::exec
