// Fused RNN cells: the gate arithmetic nn.LSTM / nn.GRU (and their Cell forms) run on a
// PrivateUse1 device, where PyTorch calls _thnn_fused_{lstm,gru}_cell — ops that have only a CUDA
// kernel, so they can never take the CPU fallback. Gate order and workspace layout follow CUDA's.
#include "aten/lowering.h"
#include "aten/ops/math.h"

namespace torchtpu::aten {
namespace {

// Column block `i` of `n` equal blocks of a [N, n*H] matrix.
Value block(hlo::Builder& b, const Value& x, int64_t i, int64_t n) {
  int64_t h = x.type.dims[1] / n;
  return b.slice(x, {0, i * h}, {x.type.dims[0], (i + 1) * h}, {1, 1});
}

Value plus_bias(LoweringContext& c, const Value& gates, size_t bias) {
  if (!c.has(bias)) return gates;
  return gates + c.b.broadcast_in_dim(c.input(bias), gates.type.dims, {1});
}

Value sigmoid(hlo::Builder& b, const Value& x) { return b.unary(UnaryOp::kLogistic, x); }
Value tanh(hlo::Builder& b, const Value& x) { return b.unary(UnaryOp::kTanh, x); }

// d sigmoid(x) / dx from y = sigmoid(x), and d tanh(x) / dx from y = tanh(x).
Value sigmoid_slope(Math& m, const Value& y) { return m.mul(y, m.sub(m.k(1, y), y)); }
Value tanh_slope(Math& m, const Value& y) { return m.sub(m.k(1, y), m.square(y)); }

// A gradient PyTorch may leave undefined (an unused output): zeros then.
Value grad_or_zero(LoweringContext& c, size_t i, const Value& like) { return c.has(i) ? c.input(i) : c.full(0, like); }

// (input_gates, hidden_gates, cx, input_bias?, hidden_bias?) -> (hy, cy, workspace = [i, f, g, o])
Values lstm_cell(LoweringContext& c) {
  Value gates = plus_bias(c, plus_bias(c, c.input(0) + c.input(1), 3), 4);
  Value i = sigmoid(c.b, block(c.b, gates, 0, 4)), f = sigmoid(c.b, block(c.b, gates, 1, 4));
  Value g = tanh(c.b, block(c.b, gates, 2, 4)), o = sigmoid(c.b, block(c.b, gates, 3, 4));
  Value cy = f * c.input(2) + i * g;
  Value hy = o * tanh(c.b, cy);
  return {hy, cy, c.b.concatenate({i, f, g, o}, 1)};
}

// (grad_hy?, grad_cy?, cx, cy, workspace, has_bias) -> (grad_gates, grad_cx, grad_bias)
Values lstm_cell_backward(LoweringContext& c) {
  Math m{c.b};
  Value cx = c.input(2), cy = c.input(3), ws = c.input(4);
  Value i = block(c.b, ws, 0, 4), f = block(c.b, ws, 1, 4), g = block(c.b, ws, 2, 4), o = block(c.b, ws, 3, 4);
  Value grad_hy = grad_or_zero(c, 0, cx), grad_cy = grad_or_zero(c, 1, cx);
  Value tanh_cy = tanh(c.b, cy);
  Value grad_o = grad_hy * tanh_cy * sigmoid_slope(m, o);
  Value grad_c = grad_hy * o * tanh_slope(m, tanh_cy) + grad_cy;
  Value grad_i = grad_c * g * sigmoid_slope(m, i);
  Value grad_f = grad_c * cx * sigmoid_slope(m, f);
  Value grad_g = grad_c * i * tanh_slope(m, g);
  Value grad_gates = c.b.concatenate({grad_i, grad_f, grad_g, grad_o}, 1);
  return {grad_gates, grad_c * f, m.sum(grad_gates, {0})};
}

// (input_gates, hidden_gates, hx, input_bias?, hidden_bias?) -> (hy, workspace = [r, z, n, hn, hx])
Values gru_cell(LoweringContext& c) {
  Value in = plus_bias(c, c.input(0), 3), hid = plus_bias(c, c.input(1), 4), hx = c.input(2);
  Value r = sigmoid(c.b, block(c.b, in, 0, 3) + block(c.b, hid, 0, 3));
  Value z = sigmoid(c.b, block(c.b, in, 1, 3) + block(c.b, hid, 1, 3));
  Value hn = block(c.b, hid, 2, 3);
  Value n = tanh(c.b, block(c.b, in, 2, 3) + r * hn);
  Value hy = n + z * (hx - n);
  return {hy, c.b.concatenate({r, z, n, hn, hx}, 1)};
}

// (grad_hy, workspace, has_bias) -> (grad_input_gates, grad_hidden_gates, grad_hx,
//                                    grad_input_bias, grad_hidden_bias)
Values gru_cell_backward(LoweringContext& c) {
  Math m{c.b};
  Value go = c.input(0), ws = c.input(1);
  Value r = block(c.b, ws, 0, 5), z = block(c.b, ws, 1, 5), n = block(c.b, ws, 2, 5);
  Value hn = block(c.b, ws, 3, 5), hx = block(c.b, ws, 4, 5);
  Value grad_z = go * (hx - n) * sigmoid_slope(m, z);
  Value grad_n = go * (m.k(1, z) - z) * tanh_slope(m, n);
  Value grad_r = grad_n * hn * sigmoid_slope(m, r);
  Value grad_in = c.b.concatenate({grad_r, grad_z, grad_n}, 1);
  Value grad_hid = c.b.concatenate({grad_r, grad_z, grad_n * r}, 1);
  return {grad_in, grad_hid, go * z, m.sum(grad_in, {0}), m.sum(grad_hid, {0})};
}

// A fused cell's sizes, as CUDA checks them (input_gates, hidden_gates, state, input_bias?,
// hidden_bias?): the lowering would otherwise get shapes it cannot combine.
void check_cell(const char* op, const std::vector<c10::IValue>& a, int64_t gates) {
  const at::Tensor &in = a[0].toTensor(), &hidden = a[1].toTensor(), &state = a[2].toTensor();
  TORCH_CHECK(state.dim() == 2 && in.dim() == 2 && in.sizes() == hidden.sizes() && in.size(0) == state.size(0) &&
                  in.size(1) == gates * state.size(1),
              op, ": expected input_gates and hidden_gates of size [B, ", gates, " * H] for a state of size [B, H], got ",
              in.sizes(), ", ", hidden.sizes(), " and ", state.sizes());
  for (size_t i : {3, 4})
    if (a[i].isTensor() && a[i].toTensor().defined())
      TORCH_CHECK(a[i].toTensor().sizes() == c10::IntArrayRef{gates * state.size(1)}, op, ": expected biases of size [",
                  gates * state.size(1), "], got ", a[i].toTensor().sizes());
}

// Shapes from the arguments: PyTorch has no meta kernels for the GRU pair, and its LSTM one
// fails when the biases are None (nn.LSTM(bias=False)).
std::vector<c10::IValue> lstm_cell_meta(const c10::FunctionSchema&, const std::vector<c10::IValue>& a) {
  check_cell("_thnn_fused_lstm_cell", a, 4);
  const at::Tensor& cx = a[2].toTensor();
  return {cx.new_empty(cx.sizes()), cx.new_empty(cx.sizes()), cx.new_empty({cx.size(0), 4 * cx.size(1)})};
}

std::vector<c10::IValue> lstm_cell_backward_meta(const c10::FunctionSchema&, const std::vector<c10::IValue>& a) {
  const at::Tensor& cx = a[2].toTensor();
  int64_t n = cx.size(0), h = cx.size(1);
  at::Tensor grad_bias = a[5].toBool() ? cx.new_empty({4 * h}) : at::Tensor();
  return {cx.new_empty({n, 4 * h}), cx.new_empty(cx.sizes()), grad_bias};
}

std::vector<c10::IValue> gru_cell_meta(const c10::FunctionSchema&, const std::vector<c10::IValue>& a) {
  check_cell("_thnn_fused_gru_cell", a, 3);
  const at::Tensor& hx = a[2].toTensor();
  return {hx.new_empty(hx.sizes()), hx.new_empty({hx.size(0), 5 * hx.size(1)})};
}

std::vector<c10::IValue> gru_cell_backward_meta(const c10::FunctionSchema&, const std::vector<c10::IValue>& a) {
  const at::Tensor& go = a[0].toTensor();
  int64_t n = go.size(0), h = go.size(1);
  return {go.new_empty({n, 3 * h}), go.new_empty({n, 3 * h}), go.new_empty(go.sizes()), go.new_empty({3 * h}),
          go.new_empty({3 * h})};
}

}  // namespace

TORCHTPU_LOWERINGS(rnn) {
  register_lowering({"_thnn_fused_lstm_cell"}, lstm_cell, with_meta(lstm_cell_meta));
  register_lowering({"_thnn_fused_lstm_cell_backward_impl"}, lstm_cell_backward, with_meta(lstm_cell_backward_meta));
  register_lowering({"_thnn_fused_gru_cell"}, gru_cell, with_meta(gru_cell_meta));
  register_lowering({"_thnn_fused_gru_cell_backward"}, gru_cell_backward, with_meta(gru_cell_backward_meta));
}

}  // namespace torchtpu::aten
