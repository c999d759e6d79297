#include "aten/varying_sizes.h"

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unordered_map>

namespace torchtpu::aten {
namespace {

struct Config {
  bool enabled = true;
  std::vector<int64_t> buckets;  // empty: powers of two
};

const Config& config() {
  static const Config c = [] {
    Config c;
    const char* v = std::getenv("TORCHTPU_BUCKETS");
    if (!v || !*v) return c;
    std::string s = v;
    if (s == "off" || s == "0") {
      c.enabled = false;
      return c;
    }
    std::stringstream in(s);
    for (std::string item; std::getline(in, item, ',');) {
      try {
        c.buckets.push_back(std::stoll(item));
      } catch (const std::exception&) {
        throw std::invalid_argument("TORCHTPU_BUCKETS=" + s + ": use off, or sizes separated by commas (64,128,256)");
      }
    }
    std::sort(c.buckets.begin(), c.buckets.end());
    return c;
  }();
  return c;
}

// The sizes of every tensor a line's first call read and wrote, in order.
using Shapes = std::vector<std::vector<int64_t>>;

Shapes shapes_of(const std::vector<exec::Operand>& inputs, const Shapes& outputs) {
  Shapes s;
  s.reserve(inputs.size() + outputs.size());
  for (const exec::Operand& o : inputs) s.push_back(o.view.sizes);
  s.insert(s.end(), outputs.begin(), outputs.end());
  return s;
}

void add(std::vector<int64_t>& sizes, int64_t n) {
  if (n > 1 && std::find(sizes.begin(), sizes.end(), n) == sizes.end()) sizes.push_back(n);
}

// What the first call at each line looked like; a later call's sizes that differ vary.
class FirstCalls {
 public:
  void compare(const graph::Origin* origin, const Shapes& now, std::vector<int64_t>& varying) {
    std::lock_guard<std::mutex> lock(mu_);
    auto [it, first] = first_.emplace(origin, now);
    if (first) {
      if (first_.size() > kCapacity) first_.clear();  // lines keep coming: start over
      return;
    }
    const Shapes& then = it->second;
    if (then.size() != now.size()) return;
    for (size_t t = 0; t < now.size(); ++t) {
      if (then[t].size() != now[t].size()) return;
      for (size_t d = 0; d < now[t].size(); ++d)
        if (then[t][d] != now[t][d]) add(varying, now[t][d]);
    }
  }

 private:
  static constexpr size_t kCapacity = 1 << 16;
  std::mutex mu_;
  std::unordered_map<const graph::Origin*, Shapes> first_;  // origins are interned per line and op
};

FirstCalls& first_calls() {
  static auto* f = new FirstCalls;  // never destroyed, like the origins it is keyed by
  return *f;
}

}  // namespace

bool padding_enabled() { return config().enabled; }

int64_t bucket(int64_t n) {
  if (n <= 1) return n;
  const std::vector<int64_t>& listed = config().buckets;
  if (!listed.empty()) {
    auto it = std::lower_bound(listed.begin(), listed.end(), n);
    return it == listed.end() ? n : *it;
  }
  int64_t b = 8;
  while (b < n) b *= 2;
  return b;
}

std::vector<int64_t> varying_sizes(const graph::Origin* origin, const std::vector<exec::Operand>& inputs,
                                   const Shapes& output_sizes) {
  std::vector<int64_t> varying;
  for (const exec::Operand& o : inputs)
    if (o.storage->padded())
      for (int64_t n : o.storage->varying_sizes()) add(varying, n);
  if (origin && !origin->location.empty()) first_calls().compare(origin, shapes_of(inputs, output_sizes), varying);
  std::sort(varying.begin(), varying.end());
  return varying;
}

}  // namespace torchtpu::aten
