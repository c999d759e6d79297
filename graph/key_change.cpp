#include "graph/key_change.h"

#include <algorithm>
#include <cctype>
#include <vector>

namespace torchtpu::graph {
namespace {

// The node keys of a window key ("<len>:<node key><wiring>..." per node, see graph/window.cpp).
std::vector<std::string> node_keys(const std::string& key) {
  std::vector<std::string> nodes;
  size_t at = 0;
  while (at < key.size() && std::isdigit(static_cast<unsigned char>(key[at]))) {
    size_t colon = key.find(':', at);
    size_t length = std::stoul(key.substr(at, colon - at));
    nodes.push_back(key.substr(colon + 1, length));
    at = key.find('>', colon + 1 + length);
    if (at == std::string::npos) break;
    ++at;
  }
  return nodes;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i)
    if (i == s.size() || s[i] == sep) {
      parts.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  return parts;
}

}  // namespace

std::string describe_change(const std::string& before, const std::string& after) {
  std::vector<std::string> a = node_keys(before), b = node_keys(after);
  for (size_t n = 0; n < std::max(a.size(), b.size()); ++n) {
    std::string where = b.size() > 1 ? "op #" + std::to_string(n) + " of the window: " : "";
    if (n >= a.size() || n >= b.size()) return "the window now has " + std::to_string(b.size()) + " ops, not " + std::to_string(a.size());
    if (a[n] == b[n]) continue;
    std::vector<std::string> pa = split(a[n], '|'), pb = split(b[n], '|');
    if (pa[0] != pb[0]) return where + pa[0] + " became " + pb[0];
    for (size_t i = 1; i < std::min(pa.size(), pb.size()); ++i)
      if (pa[i] != pb[i]) return where + pb[0] + " '" + pa[i] + "' became '" + pb[i] + "'";
    return where + pb[0] + " changed";
  }
  return "the same ops, wired differently";
}

}  // namespace torchtpu::graph
