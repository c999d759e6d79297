// Appending numbers to the text keys that name programs in the compile cache. Keys are built on
// every op, so numbers go straight into the key, without temporary strings.
#pragma once

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>

namespace torchtpu::graph {

inline void append_number(std::string& key, int64_t n) {
  char digits[24];
  key.append(digits, std::to_chars(digits, digits + sizeof digits, n).ptr);
}

// Writes a run of pieces into room reserved at the end of a key and gives back what it did not
// use: one size check for a whole view or operand list instead of one per character and number
// (the per-piece appends were most of a key's cost).
class KeyWriter {
 public:
  static constexpr size_t kNumberRoom = 20;  // digits and sign of any int64_t

  // At most `room` characters will be written before the writer goes out of scope.
  KeyWriter(std::string& key, size_t room) : key_(key), start_(key.size()) {
    key_.resize(start_ + room);
    at_ = key_.data() + start_;
  }
  ~KeyWriter() { key_.resize(at_ - key_.data()); }
  KeyWriter(const KeyWriter&) = delete;
  KeyWriter& operator=(const KeyWriter&) = delete;

  KeyWriter& operator<<(char c) {
    *at_++ = c;
    return *this;
  }
  KeyWriter& operator<<(std::string_view s) {
    at_ = std::copy(s.begin(), s.end(), at_);
    return *this;
  }
  KeyWriter& number(int64_t n) {
    at_ = std::to_chars(at_, at_ + kNumberRoom, n).ptr;
    return *this;
  }

 private:
  std::string& key_;
  size_t start_;
  char* at_;
};

}  // namespace torchtpu::graph
