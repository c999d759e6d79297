// Emits a StableHLO module as MLIR text.
//
// Ops are written in MLIR's generic form ("stablehlo.add"(%a, %b) : (...) -> ...), which has been
// stable across StableHLO releases while the pretty forms changed. Result types are inferred here,
// so a malformed graph fails while it is built (std::invalid_argument) rather than inside XLA.
// Output is deterministic: the same sequence of calls gives byte-identical text.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "hlo/tensor_type.h"

namespace torchtpu::hlo {

class Builder;

// An SSA value: its name in the text ("%3", "%arg0", "%5#1"), its type, and the builder that made
// it, so that arithmetic on values reads as arithmetic (hlo/operators.h), as XLA's XlaOp does.
struct Value {
  std::string name;
  TensorType type;
  Builder* builder = nullptr;
};

// StableHLO unary ops, then CHLO ones (XLA lowers CHLO to HLO when it compiles the module).
enum class UnaryOp {
  kAbs, kCbrt, kCeil, kCosine, kCountLeadingZeros, kExponential, kExponentialMinusOne, kFloor,
  kImag, kIsFinite, kLog, kLogPlusOne, kLogistic, kNegate, kNot, kPopcnt, kReal,
  kRoundNearestAfz, kRoundNearestEven, kRsqrt, kSign, kSine, kSqrt, kTan, kTanh,
  kAcos, kAcosh, kAsin, kAsinh, kAtan, kAtanh, kCosh, kDigamma, kErf, kErfc, kErfInv, kLgamma,
  kSinh,
};

enum class BinaryOp {
  kAdd, kAnd, kAtan2, kComplex, kDivide, kMaximum, kMinimum, kMultiply, kOr, kPower, kRemainder,
  kShiftLeft, kShiftRightArithmetic, kShiftRightLogical, kSubtract, kXor,
  kZeta,  // chlo.zeta(s, q): the Hurwitz zeta function, float operands
};

enum class Compare { kEQ, kNE, kGE, kGT, kLE, kLT };

struct DotDims {
  std::vector<int64_t> lhs_batch, rhs_batch, lhs_contract, rhs_contract;
};

struct GatherDims {
  std::vector<int64_t> offset_dims, collapsed_slice_dims, start_index_map;
  int64_t index_vector_dim;
};

struct ScatterDims {
  std::vector<int64_t> update_window_dims, inserted_window_dims, scatter_dims_to_operand_dims;
  int64_t index_vector_dim;
};

struct Window {
  std::vector<int64_t> dims, strides, base_dilations, window_dilations;
  std::vector<std::pair<int64_t, int64_t>> padding;  // (low, high) per dimension
};

// Convolution geometry. `layout` is StableHLO's dimension-number string, e.g.
// "[b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1]" for PyTorch's NCHW / OIHW.
struct ConvSpec {
  std::string layout;
  std::vector<int64_t> window_strides, lhs_dilation, rhs_dilation;
  std::vector<std::pair<int64_t, int64_t>> padding;
  int64_t feature_group_count = 1;
  int64_t batch_group_count = 1;
};

// Builds the body of a region (reduce, sort, scatter, collectives) from its block arguments and
// returns the values the region yields.
using RegionBody = std::function<std::vector<Value>(Builder&, const std::vector<Value>& args)>;

class Builder {
 public:
  explicit Builder(std::string function_name = "main");

  // Function signature.
  Value parameter(const TensorType& type);
  void results(const std::vector<Value>& values);
  // Parameter `param`'s buffer may be reused for result `result` (same type): donated at execute.
  void alias_parameter(size_t param, size_t result) { aliases_.emplace_back(param, result); }

  // Constants.
  Value constant(double value, const TensorType& type);  // splat; ints and bools convert
  Value constant_int(int64_t value, const TensorType& type);  // exact for 64-bit integers
  Value constant_bytes(const void* data, const TensorType& type);  // dense row-major host bytes

  // Element-wise.
  Value unary(UnaryOp op, const Value& x);
  Value binary(BinaryOp op, const Value& a, const Value& b);
  Value compare(Compare dir, const Value& a, const Value& b);
  Value select(const Value& pred, const Value& on_true, const Value& on_false);
  Value clamp(const Value& lo, const Value& x, const Value& hi);
  // Also to and from complex32 (stored as 32-bit words of two float16 parts: see DType::kC32).
  Value convert(const Value& x, DType to);
  Value bitcast_convert(const Value& x, DType to);

  // Shape.
  Value broadcast_in_dim(const Value& x, const std::vector<int64_t>& dims,
                         const std::vector<int64_t>& broadcast_dimensions);
  Value reshape(const Value& x, const std::vector<int64_t>& dims);
  Value transpose(const Value& x, const std::vector<int64_t>& permutation);
  Value slice(const Value& x, const std::vector<int64_t>& start, const std::vector<int64_t>& limit,
              const std::vector<int64_t>& strides);
  Value dynamic_slice(const Value& x, const std::vector<Value>& start_indices,
                      const std::vector<int64_t>& sizes);
  Value dynamic_update_slice(const Value& x, const Value& update,
                             const std::vector<Value>& start_indices);
  Value concatenate(const std::vector<Value>& xs, int64_t dimension);
  Value pad(const Value& x, const Value& padding_value, const std::vector<int64_t>& low,
            const std::vector<int64_t>& high, const std::vector<int64_t>& interior);
  Value iota(const TensorType& type, int64_t dimension);

  Value reverse(const Value& x, const std::vector<int64_t>& dimensions);

  // Contractions, reductions, indexing.
  // StableHLO's precision_config: kHighest asks for full f32 precision where a backend would
  // otherwise use reduced-precision units (TF32 on NVIDIA GPUs, one bf16 pass on TPUs), PyTorch's
  // default for float32 matmuls; kHigh allows a faster approximation (TF32, three bf16 passes).
  enum class Precision { kDefault, kHigh, kHighest };
  Value dot_general(const Value& lhs, const Value& rhs, const DotDims& dims, DType result_dtype,
                    Precision precision = Precision::kDefault);
  enum class FftType { kFFT, kIFFT, kRFFT, kIRFFT };
  // FFT over the trailing fft_length.size() (1 to 3) dims. IFFT and IRFFT scale by 1/n, as XLA does.
  Value fft(const Value& x, FftType type, const std::vector<int64_t>& fft_length);

  // Linear algebra over the trailing two dimensions (leading ones are a batch). cholesky leaves
  // the other triangle unspecified; triangular_solve solves op(a) x = b (left_side) or
  // x op(a) = b, reading only a's `lower` (or upper) triangle.
  Value cholesky(const Value& a, bool lower);
  enum class TransposeA { kNo, kTranspose, kAdjoint };
  Value triangular_solve(const Value& a, const Value& b, bool left_side, bool lower, bool unit_diagonal,
                         TransposeA transpose_a);

  // The caller gives the result shape (PyTorch's shape rules already computed it).
  Value convolution(const Value& lhs, const Value& rhs, const ConvSpec& spec,
                    const std::vector<int64_t>& result_dims, DType result_dtype,
                    Precision precision = Precision::kDefault);
  std::vector<Value> reduce(const std::vector<Value>& inputs, const std::vector<Value>& inits,
                            const std::vector<int64_t>& dimensions, const RegionBody& body);
  std::vector<Value> reduce_window(const std::vector<Value>& inputs,
                                   const std::vector<Value>& inits, const Window& window,
                                   const RegionBody& body);
  Value gather(const Value& operand, const Value& indices, const GatherDims& dims,
               const std::vector<int64_t>& slice_sizes, const std::vector<int64_t>& result_dims);
  Value scatter(const Value& operand, const Value& indices, const Value& updates,
                const ScatterDims& dims, const RegionBody& combine);
  std::vector<Value> sort(const std::vector<Value>& inputs, int64_t dimension, bool stable,
                          const RegionBody& comparator);

  // Random numbers: returns {new_state, bits}.
  std::pair<Value, Value> rng_bit_generator(const Value& state, const TensorType& bits_type);

  // stablehlo.while: `body` maps the carried values to their next ones as long as `condition` (a
  // 0-d bool of them) holds. The regions see only the carried values: pass what they read
  // through them.
  std::vector<Value> while_loop(const std::vector<Value>& carried, const RegionBody& condition,
                                const RegionBody& body);

  std::vector<Value> custom_call(const std::string& target, const std::vector<Value>& operands,
                                 const std::vector<TensorType>& result_types,
                                 const std::string& backend_config = "",
                                 bool has_side_effect = false);

  // Collectives over replica groups (each group lists replica ids).
  using ReplicaGroups = std::vector<std::vector<int64_t>>;
  Value all_reduce(const Value& x, const ReplicaGroups& groups, const RegionBody& combine);
  Value all_gather(const Value& x, int64_t dimension, const ReplicaGroups& groups);
  Value reduce_scatter(const Value& x, int64_t dimension, const ReplicaGroups& groups,
                       const RegionBody& combine);
  Value all_to_all(const Value& x, int64_t split_dimension, int64_t concat_dimension,
                   const ReplicaGroups& groups);
  Value collective_permute(const Value& x,
                           const std::vector<std::pair<int64_t, int64_t>>& source_target_pairs);

  // Functions from another module (generic-form `func.func` ops, e.g. a JAX kernel lowered to
  // StableHLO), added once per `key` however many calls use them; `call` invokes one by symbol.
  void add_functions(const std::string& key, const std::string& text);
  std::vector<Value> call(const std::string& symbol, const std::vector<Value>& args,
                          const std::vector<TensorType>& result_types);

  // The whole module, ready for Client::compile.
  std::string module_text(int num_replicas = 1, int num_partitions = 1) const;

 private:
  struct Block {
    std::vector<std::string> lines;
    int indent;
  };

  // Appends `name(operands) ({regions}) {attrs} : (operand types) -> results` and returns the
  // results as values.
  std::vector<Value> emit(std::string_view op, const std::vector<Value>& operands,
                          const std::vector<TensorType>& result_types,
                          const std::string& attributes = "",
                          const std::vector<std::string>& regions = {});
  Value emit1(std::string_view op, const std::vector<Value>& operands, const TensorType& type,
              const std::string& attributes = "");
  // Text of a region whose block takes `arg_types`.
  std::string region(const std::vector<TensorType>& arg_types, const RegionBody& body);
  // The scalar types a combiner region of `values` takes: two per value (accumulator, element).
  static std::vector<TensorType> scalar_pairs(const std::vector<Value>& values, bool interleave);
  std::string fresh_name();
  // `x`, hidden from XLA's constant folding when it is computed from constants only (see
  // binary()); cheap for a broadcast scalar, which is hidden before it is broadcast.
  Value opaque_if_constant(const Value& x);

  std::string function_name_;
  std::vector<TensorType> params_;
  std::vector<Value> results_;
  std::vector<Block> blocks_;  // blocks_.front() is the function body; the rest are open regions
  std::vector<std::pair<std::string, std::string>> functions_;  // (key, text) added by add_functions
  std::vector<std::pair<size_t, size_t>> aliases_;              // (parameter, result)
  int next_id_ = 0;
  // Values computed from constants only, and for those that are a broadcast scalar, the scalar.
  std::unordered_set<std::string> constant_;
  std::unordered_map<std::string, Value> broadcast_scalar_;
};

}  // namespace torchtpu::hlo
