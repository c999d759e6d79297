// The fused inference ops behind nn.MultiheadAttention's and nn.TransformerEncoderLayer's eval fast
// paths, composed of lowered ops (CPU's and CUDA's kernels are hand-written for those devices).
// nn.TransformerEncoder hands a padded batch with a key-padding mask to its layers as a nested
// tensor: here a nested tpu tensor is the rows that are not padding, packed, with their lengths on
// the host; the layer runs on the padded form, and the padding reads back as zeros, as on CPU.
#include <cmath>
#include <limits>

#include <ATen/NestedTensorImpl.h>
#include <ATen/native/nested/NestedTensorUtils.h>
#include <ATen/ops/_native_multi_head_attention.h>
#include <ATen/ops/_nested_tensor_from_mask_left_aligned.h>
#include <ATen/ops/_softmax.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/full.h>
#include <ATen/ops/full_like.h>
#include <ATen/ops/gelu.h>
#include <ATen/ops/layer_norm.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/relu.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/tensor.h>
#include <torch/library.h>

namespace torchtpu::aten {
namespace {

using at::Tensor;
using OptionalTensor = std::optional<Tensor>;

// mask_type 1 is a key-padding mask [B, S] for scores [B, H, L, S]; 0 a [L, S] mask; otherwise the
// mask has the scores' shape. True means masked out.
Tensor mask_as_scores(const Tensor& scores, const Tensor& mask, std::optional<int64_t> mask_type) {
  TORCH_CHECK(mask.scalar_type() == at::kBool, "Mask should be a boolean tensor");
  bool key_padding = mask_type == 1 && scores.dim() == 4 && mask.dim() == 2 && mask.size(0) == scores.size(0) &&
                     mask.size(1) == scores.size(3);
  bool square = mask_type == 0 && scores.dim() == 4 && mask.dim() == 2 && mask.size(0) == scores.size(2) &&
                mask.size(1) == scores.size(3);
  TORCH_CHECK(mask.sizes() == scores.sizes() || key_padding || square,
              "Mask shape should match input. mask: ", mask.sizes(), " input: ", scores.sizes());
  return key_padding ? mask.view({mask.size(0), 1, 1, mask.size(1)}) : mask;
}

// Masked entries get probability 0; a row masked throughout is NaN, as on CPU.
Tensor masked_softmax(const Tensor& self, const Tensor& mask, std::optional<int64_t> dim,
                      std::optional<int64_t> mask_type) {
  Tensor masked = mask_as_scores(self, mask, mask_type);
  int64_t d = at::maybe_wrap_dim(dim.value_or(-1), self.dim());
  return at::_softmax(self.masked_fill(masked, -std::numeric_limits<double>::infinity()), d, false);
}

// [B, L, H * Dh] -> [B, H, L, Dh]
Tensor split_heads(const Tensor& x, int64_t heads) {
  return x.view({x.size(0), x.size(1), heads, x.size(2) / heads}).transpose(1, 2);
}

std::tuple<Tensor, Tensor> multi_head_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                                int64_t embed_dim, int64_t num_head, const Tensor& qkv_weight,
                                                const Tensor& qkv_bias, const Tensor& proj_weight,
                                                const Tensor& proj_bias, const OptionalTensor& mask,
                                                bool need_weights, bool average_attn_weights,
                                                std::optional<int64_t> mask_type) {
  TORCH_CHECK(query.dim() == 3 && key.dim() == 3 && value.dim() == 3,
              "expected 3-D `query`, `key` and `value`, got ", query.dim(), "-D, ", key.dim(), "-D and ",
              value.dim(), "-D tensors");
  TORCH_CHECK(query.size(2) == embed_dim, "passed-in embed_dim ", embed_dim,
              " didn't match last dim of query ", query.size(2));
  TORCH_CHECK(embed_dim % num_head == 0, "D must divide evenly by num_head");
  auto w = qkv_weight.chunk(3);
  auto b = qkv_bias.chunk(3);
  double scale = std::sqrt(static_cast<double>(embed_dim / num_head));
  Tensor q = split_heads(at::linear(query, w[0], b[0]).div(scale), num_head);
  Tensor k = split_heads(at::linear(key, w[1], b[1]), num_head);
  Tensor v = split_heads(at::linear(value, w[2], b[2]), num_head);
  Tensor scores = at::matmul(q, k.transpose(-2, -1));
  Tensor probs = mask ? masked_softmax(scores, mask->to(at::kBool), -1, mask_type) : at::_softmax(scores, -1, false);
  Tensor context = at::matmul(probs, v).transpose(1, 2).reshape({query.size(0), query.size(1), embed_dim});
  Tensor out = at::linear(context, proj_weight, proj_bias);
  if (!need_weights) return {out, Tensor()};
  return {out, average_attn_weights ? probs.sum(1).div(num_head) : probs};
}

// Post-norm (or pre-norm) self-attention and feed-forward blocks, each with its residual.
Tensor encoder_layer(const Tensor& src, int64_t embed_dim, int64_t num_heads, const Tensor& qkv_weight,
                     const Tensor& qkv_bias, const Tensor& proj_weight, const Tensor& proj_bias, bool use_gelu,
                     bool norm_first, double eps, const Tensor& norm_weight_1, const Tensor& norm_bias_1,
                     const Tensor& norm_weight_2, const Tensor& norm_bias_2, const Tensor& ffn_weight_1,
                     const Tensor& ffn_bias_1, const Tensor& ffn_weight_2, const Tensor& ffn_bias_2,
                     const OptionalTensor& mask, std::optional<int64_t> mask_type) {
  auto norm = [&](const Tensor& x, const Tensor& weight, const Tensor& bias) {
    return at::layer_norm(x, {embed_dim}, weight, bias, eps);
  };
  Tensor x = norm_first ? norm(src, norm_weight_1, norm_bias_1) : src;
  x = std::get<0>(at::_native_multi_head_attention(x, x, x, embed_dim, num_heads, qkv_weight, qkv_bias,
                                                   proj_weight, proj_bias, mask, false, true, mask_type))
          .add(src);
  if (!norm_first) x = norm(x, norm_weight_1, norm_bias_1);
  Tensor hidden = at::linear(norm_first ? norm(x, norm_weight_2, norm_bias_2) : x, ffn_weight_1, ffn_bias_1);
  x = at::linear(use_gelu ? at::gelu(hidden) : at::relu(hidden), ffn_weight_2, ffn_bias_2).add(x);
  return norm_first ? x : norm(x, norm_weight_2, norm_bias_2);
}

// Nested tensors of [length_i, D] components, packed without gaps; lengths are host values.
struct Packed {
  Tensor lengths;  // int64 [B] on the host
  int64_t width;   // D

  int64_t longest() const { return lengths.numel() ? lengths.max().item<int64_t>() : 0; }
};

// The positions b * max_length + s (s < length_b) of the packed rows in the padded [B * max_length, D].
Tensor packed_rows(const Tensor& lengths, int64_t max_length) {
  auto len = lengths.accessor<int64_t, 1>();
  std::vector<int64_t> rows;
  for (int64_t b = 0; b < lengths.size(0); ++b)
    for (int64_t s = 0; s < len[b]; ++s) rows.push_back(b * max_length + s);
  return at::tensor(rows, at::kLong);
}

Tensor pack(const Tensor& padded, const Tensor& lengths) {
  Tensor rows = packed_rows(lengths, padded.size(1)).to(padded.device());
  Tensor buffer = padded.reshape({-1, padded.size(2)}).index_select(0, rows).reshape({-1});
  Tensor sizes = at::stack({lengths, at::full_like(lengths, padded.size(2))}, 1);
  return at::native::wrap_buffer(buffer, sizes);
}

Packed packed_layout(const Tensor& nested) {
  const Tensor& sizes = at::native::get_nested_tensor_impl(nested)->get_nested_sizes();
  TORCH_CHECK(sizes.dim() == 2 && sizes.size(1) == 2,
              "nested tpu tensors hold 2-D components ([length, features]); got ", sizes.size(1), "-D ones");
  Tensor widths = sizes.select(1, 1);
  int64_t width = sizes.size(0) ? widths[0].item<int64_t>() : 0;
  TORCH_CHECK(widths.eq(width).all().item<bool>(), "nested tpu tensors need components of one width");
  return {sizes.select(1, 0).contiguous(), width};
}

// [B, length, D], rows past each component's own length filled with `padding`.
Tensor unpack(const Tensor& nested, const Packed& layout, double padding, int64_t length) {
  Tensor buffer = at::native::get_buffer(nested);
  Tensor rows = packed_rows(layout.lengths, length).to(buffer.device());
  int64_t batch = layout.lengths.size(0);
  return at::full({batch * length, layout.width}, padding, buffer.options())
      .index_copy(0, rows, buffer.view({-1, layout.width}))
      .view({batch, length, layout.width});
}

// The first mask.sum(1) rows of each batch element, as CPU (the mask marks rows to keep).
Tensor nested_from_mask(const Tensor& t, const Tensor& mask, bool mask_check) {
  TORCH_CHECK(mask.scalar_type() == at::kBool, "Expected mask to be of type Bool, but got ", mask.scalar_type(),
              " instead.");
  TORCH_CHECK(mask.dim() == 2, "Padding mask should be 2D");
  TORCH_CHECK(t.dim() == 3, "Input should be a 3D tensor, N * L * D");
  TORCH_CHECK(t.size(0) == mask.size(0) && t.size(1) == mask.size(1), "Mask size should match input size");
  if (mask_check)
    TORCH_CHECK(at::_nested_tensor_from_mask_left_aligned(t, mask), "Mask must be left-aligned without gaps");
  return pack(t, mask.sum(1).cpu());  // the one host read, as CPU and CUDA
}

Tensor to_padded(const Tensor& self, double padding, at::OptionalIntArrayRef output_size) {
  Packed layout = packed_layout(self);
  int64_t length = layout.longest();
  if (output_size) {
    TORCH_CHECK(output_size->size() == 3 && (*output_size)[0] == layout.lengths.size(0) &&
                    (*output_size)[2] == layout.width,
                "Length of output_size does not match NestedTensor dims. Broadcasting is not supported.");
    TORCH_CHECK((*output_size)[1] >= length,
                "Value in output_size is less than NestedTensor padded size. Truncation is not supported.");
    length = (*output_size)[1];
  }
  return unpack(self, layout, padding, length);
}

// The packed rows attend only to each other: the layer runs on the padded batch with the padding
// masked out of the keys, and keeps the rows it was given.
Tensor nested_encoder_layer(const Tensor& src, int64_t embed_dim, int64_t num_heads, const Tensor& qkv_weight,
                            const Tensor& qkv_bias, const Tensor& proj_weight, const Tensor& proj_bias,
                            bool use_gelu, bool norm_first, double eps, const Tensor& norm_weight_1,
                            const Tensor& norm_bias_1, const Tensor& norm_weight_2, const Tensor& norm_bias_2,
                            const Tensor& ffn_weight_1, const Tensor& ffn_bias_1, const Tensor& ffn_weight_2,
                            const Tensor& ffn_bias_2, const OptionalTensor& mask, std::optional<int64_t> mask_type) {
  TORCH_CHECK(!mask, "a nested src carries its own padding: no mask can be given with it");
  Packed layout = packed_layout(src);
  int64_t length = layout.longest();
  Tensor padded = unpack(src, layout, 0.0, length);
  Tensor padding = at::arange(length, at::kLong).ge(layout.lengths.unsqueeze(1)).to(padded.device());
  Tensor out = encoder_layer(padded, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias, use_gelu,
                             norm_first, eps, norm_weight_1, norm_bias_1, norm_weight_2, norm_bias_2, ffn_weight_1,
                             ffn_bias_1, ffn_weight_2, ffn_bias_2, padding, 1);
  return pack(out, layout.lengths);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_masked_softmax", masked_softmax);
  m.impl("_native_multi_head_attention", multi_head_attention);
  m.impl("_transformer_encoder_layer_fwd", encoder_layer);
  m.impl("_nested_tensor_from_mask", nested_from_mask);
}

TORCH_LIBRARY_IMPL(aten, NestedTensorPrivateUse1, m) {
  m.impl("to_padded_tensor", to_padded);
  m.impl("_transformer_encoder_layer_fwd", nested_encoder_layer);
}

}  // namespace
}  // namespace torchtpu::aten
