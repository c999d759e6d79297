#include "exec/view.h"

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

void View::append_key(std::string& key) const {
  key += dtype_name(dtype);
  key += '[';
  for (size_t i = 0; i < sizes.size(); ++i) {
    graph::append_number(key, sizes[i]);
    key += ':';
    graph::append_number(key, strides[i]);
    key += ',';
  }
  key += '+';
  graph::append_number(key, offset);
  key += ']';
}

}  // namespace torchtpu::exec
