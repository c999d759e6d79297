// A host tensor copied to tpu stored padded, without the varying sizes at a line that make eager
// mode pad one: the OpInfo harness's padded mode (torchtpu.testing.opinfo --padded) runs PyTorch's
// samples on such inputs.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

namespace torchtpu::aten {

// A new contiguous tensor on the current tpu device with `host`'s values, whose storage holds the
// box of its sizes (aten/varying_sizes.h, box_of) with the sizes in `varying` marked as varying,
// as a tensor an op wrote padded is. Sizes 0 and 1 never vary; with none left, a plain copy.
at::Tensor to_tpu_padded(const at::Tensor& host, std::vector<int64_t> varying);

}  // namespace torchtpu::aten
