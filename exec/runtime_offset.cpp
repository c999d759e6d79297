#include "exec/runtime_offset.h"

#include <mutex>
#include <unordered_map>
#include <utility>

#include "exec/view_program.h"

namespace torchtpu::exec {
namespace {

// Elements from the view's first to its last, inclusive (strides are non-negative).
int64_t extent(const View& view) {
  int64_t last = 0;
  for (size_t d = 0; d < view.sizes.size(); ++d) last += (view.sizes[d] - 1) * view.strides[d];
  return last + 1;
}

View at_zero(const View& view) {
  View v = view;
  v.offset = 0;
  return v;
}

bool qualifies(const Operand& o) {
  if (o.padding || o.view.numel() == 0) return false;
  for (int64_t s : o.view.strides)
    if (s < 0) return false;
  const graph::ValuePtr& value = o.storage->value();
  DType stored = value ? value->dtype() : o.view.dtype;
  int64_t length = value ? value->length() : static_cast<int64_t>(o.storage->nbytes() / element_size(stored));
  // a view of its storage's element type, smaller than the storage (a whole one has no offset)
  return stored == o.view.dtype && extent(o.view) < length;
}

struct OffsetsSeen {
  struct Seen {
    int64_t first;
    bool varies;
  };
  struct Hash {
    size_t operator()(const std::pair<const graph::Origin*, size_t>& k) const {
      return std::hash<const void*>()(k.first) * 31 + k.second;
    }
  };
  std::mutex mu;
  // Origins are interned per line and op (aten/origin.h), so they name the op at its line.
  std::unordered_map<std::pair<const graph::Origin*, size_t>, Seen, Hash> seen;
};

OffsetsSeen& offsets_seen() {
  static auto* s = new OffsetsSeen;  // never destroyed: see executor.cpp
  return *s;
}

}  // namespace

bool offset_varies(const OpCall& call, size_t k, const Operand& o, bool beside_padding) {
  if (!call.origin || !qualifies(o)) return false;
  if (beside_padding) return true;
  OffsetsSeen& s = offsets_seen();
  std::lock_guard<std::mutex> lock(s.mu);
  auto [it, added] = s.seen.try_emplace({call.origin.get(), k}, OffsetsSeen::Seen{o.view.offset, false});
  if (!added && it->second.first != o.view.offset) it->second.varies = true;
  return it->second.varies;
}

hlo::Value read_at_offset(hlo::Builder& b, const hlo::Value& flat, const hlo::Value& offset, const View& view) {
  hlo::Value part = b.dynamic_slice(flat, {offset}, {extent(view)});
  return read_view(b, part, at_zero(view));
}

hlo::Value write_at_offset(hlo::Builder& b, const hlo::Value& flat, const hlo::Value& offset, const View& view,
                           const hlo::Value& value) {
  hlo::Value part = b.dynamic_slice(flat, {offset}, {extent(view)});
  return b.dynamic_update_slice(flat, write_view(b, part, at_zero(view), value), {offset});
}

}  // namespace torchtpu::exec
