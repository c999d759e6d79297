// What loss lowerings share: PyTorch's `reduction` argument and applying it.
#pragma once

#include <vector>

#include "aten/ops/math.h"

namespace torchtpu::aten {

enum Reduction { kNone = 0, kMean = 1, kSum = 2 };

// The per-element (or per-sample) losses reduced as `reduction` says.
inline Value reduce_loss(Math& m, const Value& losses, int64_t reduction) {
  if (reduction == kNone) return losses;
  std::vector<int64_t> all(losses.type.rank());
  for (int64_t d = 0; d < losses.type.rank(); ++d) all[d] = d;
  return reduction == kMean ? m.mean(losses, all) : m.sum(losses, all);
}

}  // namespace torchtpu::aten
