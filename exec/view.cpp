#include "exec/view.h"

#include <algorithm>

#include "graph/key_text.h"

namespace torchtpu::exec {

int64_t View::numel() const {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

bool View::is_contiguous() const {
  int64_t expected = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    if (sizes[i] != 1 && strides[i] != expected) return false;
    expected *= sizes[i];
  }
  return true;
}

std::vector<int64_t> View::storage_order() const {
  std::vector<int64_t> order(sizes.size());
  for (size_t d = 0; d < order.size(); ++d) order[d] = static_cast<int64_t>(d);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    if ((sizes[a] == 1) != (sizes[b] == 1)) return sizes[b] == 1;
    return sizes[a] != 1 && strides[a] > strides[b];
  });
  return order;
}

bool View::is_dense() const {
  int64_t expected = 1;
  std::vector<int64_t> order = storage_order();
  for (size_t i = order.size(); i-- > 0;) {
    int64_t d = order[i];
    if (sizes[d] != 1 && strides[d] != expected) return false;
    expected *= sizes[d];
  }
  return true;
}

size_t View::key_room() const {
  constexpr size_t kNumber = graph::KeyWriter::kNumberRoom;
  return dtype_name(dtype).size() + 3 + sizes.size() * (2 * kNumber + 2) + kNumber;
}

void View::append_key(std::string& key, bool with_offset) const {
  graph::KeyWriter w(key, key_room());
  w << dtype_name(dtype) << '[';
  for (size_t i = 0; i < sizes.size(); ++i) {
    w.number(sizes[i]) << ':';
    w.number(strides[i]) << ',';
  }
  w << '+';
  if (with_offset) w.number(offset);
  else w << '?';
  w << ']';
}

}  // namespace torchtpu::exec
