// Appending numbers to the text keys that name programs in the compile cache. Keys are built on
// every op, so numbers go straight into the key, without temporary strings.
#pragma once

#include <charconv>
#include <cstdint>
#include <string>

namespace torchtpu::graph {

inline void append_number(std::string& key, int64_t n) {
  char digits[24];
  key.append(digits, std::to_chars(digits, digits + sizeof digits, n).ptr);
}

}  // namespace torchtpu::graph
