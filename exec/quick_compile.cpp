#include "exec/quick_compile.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <initializer_list>
#include <string_view>
#include <vector>

namespace torchtpu::exec {
namespace {

// Ops whose floating-point results code generation cannot change: nothing in them can be
// contracted into a fused multiply-add, approximated or reassociated.
constexpr std::array<std::string_view, 23> kExactOnFloats = {
    "abs", "add", "bitcast_convert", "broadcast_in_dim", "compare", "concatenate", "constant",
    "convert", "dynamic_slice", "dynamic_update_slice", "gather", "iota", "maximum", "minimum",
    "negate", "optimization_barrier", "pad", "reshape", "reverse", "select", "slice", "subtract",
    "transpose"};

bool mentions(std::string_view line, std::initializer_list<std::string_view> types) {
  for (std::string_view t : types)
    if (line.find(t) != std::string_view::npos) return true;
  return false;
}

bool mentions_floats(std::string_view line) { return mentions(line, {"xf32>", "xf64>", "<f32>", "<f64>"}); }

// The CPU has no arithmetic on float8, float16 and bfloat16 and LLVM emulates it (in float32,
// through conversions), complex numbers are pairs of floats: how depends on optimization, which
// changed a conversion to float8 and the bits of a float16 NaN that was only moved. No program
// with them is exact here.
bool mentions_emulated_types(std::string_view line) {
  return mentions(line, {"xf8E", "<f8E", "xf16>", "<f16>", "xbf16>", "<bf16>", "complex<"});
}

// The op of a line of generic-form text ("stablehlo.add" -> "add"), or "" for other lines.
std::string_view op_of(std::string_view line) {
  size_t start = line.find("\"stablehlo.");
  size_t skip = 11;
  if (start == std::string_view::npos) {
    start = line.find("\"chlo.");
    skip = 6;
  }
  if (start == std::string_view::npos) return {};
  size_t end = line.find('"', start + skip);
  return line.substr(start + skip, end - start - skip);
}

bool exact_on_floats(std::string_view op) {
  for (std::string_view exact : kExactOnFloats)
    if (op == exact) return true;
  return false;
}

// The bytes of one element of a StableHLO element type ("f32", "i1", "complex<f64>").
int64_t element_bytes(std::string_view type) {
  if (type.rfind("complex<", 0) == 0) return 2 * element_bytes(type.substr(8, type.size() - 9));
  if (type == "i1") return 1;
  size_t digits = type.find_first_of("0123456789");
  if (digits == std::string_view::npos) return 8;  // index and other types: count them wide
  int64_t bits = 0;
  for (size_t i = digits; i < type.size() && std::isdigit(static_cast<unsigned char>(type[i])); ++i)
    bits = 10 * bits + (type[i] - '0');
  return bits <= 8 ? 1 : bits / 8;  // f8E4M3FN: 8 bits
}

// The dimensions of a tensor type's text, and where its element type starts ("1x768xf32" ->
// {1, 768}, 6).
std::vector<int64_t> dimensions(std::string_view type, size_t* element_at = nullptr) {
  std::vector<int64_t> dims;
  size_t start = 0;
  for (size_t x = type.find('x'); x != std::string_view::npos && std::isdigit(static_cast<unsigned char>(type[start]));
       x = type.find('x', start)) {
    int64_t n = 0;
    for (size_t i = start; i < x; ++i) n = 10 * n + (type[i] - '0');
    dims.push_back(n);
    start = x + 1;
  }
  if (element_at) *element_at = start;
  return dims;
}

// The bytes of a tensor type's contents: "4x256xf32" -> 4096.
int64_t tensor_bytes(std::string_view type) {
  size_t element_at = 0;
  int64_t elements = 1;
  for (int64_t n : dimensions(type, &element_at)) elements *= n;
  return elements * element_bytes(type.substr(element_at));
}

// How many numbers the list after `name` holds on `line` ("lhs_batching_dimensions = [0, 1]" -> 2).
size_t listed(std::string_view line, std::string_view name) {
  size_t at = line.find(name);
  if (at == std::string_view::npos) return 0;
  size_t open = line.find('[', at), close = line.find(']', at);
  if (open == std::string_view::npos || close == std::string_view::npos || close == open + 1) return 0;
  return 1 + static_cast<size_t>(std::count(line.begin() + open, line.begin() + close, ','));
}

std::vector<std::string_view> lines_of(std::string_view text) {
  std::vector<std::string_view> lines;
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

bool is_matrix_vector(std::string_view dot_line) {
  size_t arrow = dot_line.rfind("-> tensor<");
  if (arrow == std::string_view::npos) return false;
  std::string_view type = dot_line.substr(arrow + 10);
  std::vector<int64_t> dims = dimensions(type.substr(0, type.find('>')));
  size_t batch = listed(dot_line, "lhs_batching_dimensions");
  if (dims.size() < batch + 2) return true;
  return std::find(dims.begin() + static_cast<std::ptrdiff_t>(batch), dims.end(), 1) != dims.end();
}

}  // namespace

bool matrix_vector_without_reductions(const std::string& program) {
  std::string_view text(program);
  bool matrix_vector = false;
  for (std::string_view line : lines_of(text)) {
    std::string_view op = op_of(line);
    if (op == "reduce" || op == "reduce_window") return false;
    if (op == "dot_general" && is_matrix_vector(line)) matrix_vector = true;
  }
  return matrix_vector;
}

bool matrix_vector_result(const std::vector<int64_t>& sizes) {
  return sizes.size() == 1 || (sizes.size() == 2 && (sizes[0] == 1 || sizes[1] == 1));
}

bool has_emulated_types(const std::string& program) { return mentions_emulated_types(program); }

namespace {

// The bytes of the tensor types on the main function's line from `from` ("@main(": operands and
// results; ") -> ": results).
int64_t main_bytes(const std::string& program, std::string_view from) {
  size_t main = program.find("@main(");
  if (main == std::string::npos) return 0;
  std::string_view line(program);
  line = line.substr(main, line.find('\n', main) - main);
  line = line.substr(std::min(line.find(from), line.size()));
  int64_t bytes = 0;
  for (size_t open = line.find("tensor<"); open != std::string_view::npos; open = line.find("tensor<", open)) {
    open += 7;
    int depth = 1;  // complex<f32> nests one level
    size_t close = open;
    for (; close < line.size() && depth > 0; ++close) depth += line[close] == '<' ? 1 : line[close] == '>' ? -1 : 0;
    bytes += tensor_bytes(line.substr(open, close - 1 - open));
  }
  return bytes;
}

}  // namespace

int64_t bytes_per_run(const std::string& program) { return main_bytes(program, "@main("); }

int64_t result_bytes(const std::string& program) { return main_bytes(program, ") -> "); }

namespace {

enum class FloatArithmetic {
  kExact,        // none that code generation can change
  kMultiplyAdd,  // float products beside float sums, and nothing else inexact
  kOther,        // reductions, regions, transcendental functions, ...
};

FloatArithmetic float_arithmetic(const std::string& program) {
  std::string_view text(program);
  // Integer and boolean programs are exact whatever they do, reductions and loops included.
  if (!mentions_floats(text) && !mentions_emulated_types(text)) return FloatArithmetic::kExact;
  // A float product or quotient is exact on its own; only beside a float sum can optimization
  // contract it into a fused multiply-add.
  bool float_sums = false, float_products = false;
  for (std::string_view line : lines_of(text)) {
    std::string_view op = op_of(line);
    if (op.empty() || op == "return") continue;
    if (mentions_emulated_types(line)) return FloatArithmetic::kOther;
    bool floats = mentions_floats(line);
    if (floats && (op == "add" || op == "subtract")) float_sums = true;
    if (exact_on_floats(op)) continue;
    if (floats && (op == "multiply" || op == "divide")) {
      float_products = true;
      continue;
    }
    // An op with regions (reduce, sort, while) has its types on a later line: not judged here.
    bool typed_here = line.find(" : (") != std::string_view::npos;
    if (floats || !typed_here) return FloatArithmetic::kOther;
  }
  return float_sums && float_products ? FloatArithmetic::kMultiplyAdd : FloatArithmetic::kExact;
}

}  // namespace

bool same_bits_however_compiled(const std::string& program) {
  return float_arithmetic(program) == FloatArithmetic::kExact;
}

bool only_multiply_adds(const std::string& program) {
  return float_arithmetic(program) == FloatArithmetic::kMultiplyAdd;
}

}  // namespace torchtpu::exec
