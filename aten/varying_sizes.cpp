#include "aten/varying_sizes.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "exec/padded_view.h"

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

// The sizes of every tensor a call reads and writes, in order.
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

// What each line's calls have looked like: the shapes seen lately and the places (tensor,
// dimension) where a size has changed. A call with new shapes varies, from an earlier call of the
// same structure, in the sizes that differ; once a place has varied at a line it varies in every
// later call there (as Dynamo's automatic dynamic shapes), so that four layers' caches growing at
// one line all run padded, not only the first to reach a new length. A line called with a few
// fixed shapes (one helper used by two layers) pads the places where they differ too: a line
// does not say which tensor is which.
class SeenShapes {
 public:
  void compare(const graph::Origin* origin, const Shapes& now, std::vector<int64_t>& varying) {
    std::lock_guard<std::mutex> lock(mu_);
    if (lines_.size() > kLines) lines_.clear();  // lines keep coming: start over
    Line& line = lines_[origin];
    if (std::find(line.seen.begin(), line.seen.end(), now) == line.seen.end()) {
      for (const Shapes& then : line.seen) mark_differences(then, now, line.places);
      if (line.seen.size() == kShapesPerLine) line.seen.erase(line.seen.begin());
      line.seen.push_back(now);
    }
    for (const auto& [t, d] : line.places)
      if (t < now.size() && d < now[t].size()) add(varying, now[t][d]);
  }

 private:
  using Place = std::pair<size_t, size_t>;
  struct Line {
    std::vector<Shapes> seen;
    std::vector<Place> places;
  };

  static void mark_differences(const Shapes& then, const Shapes& now, std::vector<Place>& places) {
    if (then.size() != now.size()) return;
    for (size_t t = 0; t < now.size(); ++t)
      if (then[t].size() != now[t].size()) return;
    for (size_t t = 0; t < now.size(); ++t)
      for (size_t d = 0; d < now[t].size(); ++d)
        if (then[t][d] != now[t][d] && std::find(places.begin(), places.end(), Place{t, d}) == places.end())
          places.emplace_back(t, d);
  }

  static constexpr size_t kLines = 1 << 16, kShapesPerLine = 8;
  std::mutex mu_;
  std::unordered_map<const graph::Origin*, Line> lines_;  // origins are interned per line and op
};

SeenShapes& seen_shapes() {
  static auto* s = new SeenShapes;  // never destroyed, like the origins it is keyed by
  return *s;
}

constexpr int64_t kSmallestBucket = 16;

// Whether a view holds the marked size `n` split, as a run of its dimensions with a marked one
// among them ([B, H, L, D] holds H·L, marked for a view merging them): a dimension of size n there
// is another, fixed one (D = H·L = 64 at L = 16), which must not vary at every later length.
bool held_split(const std::vector<int64_t>& sizes, int64_t n, const std::vector<int64_t>& marked) {
  auto other_marked = [&](int64_t m) { return m != n && std::binary_search(marked.begin(), marked.end(), m); };
  for (size_t first = 0; first < sizes.size(); ++first) {
    int64_t product = sizes[first];
    bool has_marked = other_marked(sizes[first]);
    for (size_t last = first + 1; last < sizes.size() && product <= n; ++last) {
      product *= sizes[last];
      has_marked |= other_marked(sizes[last]);
      if (product == n && has_marked) return true;
    }
  }
  return false;
}

}  // namespace

namespace {
thread_local std::optional<bool> thread_padding;
}  // namespace

bool padding_enabled() { return thread_padding.value_or(config().enabled); }

std::optional<bool> set_thread_padding(std::optional<bool> enabled) {
  std::optional<bool> previous = thread_padding;
  thread_padding = enabled;
  return previous;
}

int64_t bucket(int64_t n) {
  if (n <= 1) return n;
  const std::vector<int64_t>& listed = config().buckets;
  if (!listed.empty()) {
    auto it = std::lower_bound(listed.begin(), listed.end(), n);
    return it == listed.end() ? n : *it;
  }
  int64_t b = kSmallestBucket;
  while (b < n) b *= 2;
  return b;
}

namespace {

// The varying sizes padded results were last marked with (a ring: the most recent calls').
std::array<std::atomic<int64_t>, 64> recent_varying{};
std::atomic<size_t> recent_next{0};

}  // namespace

bool recently_varied(int64_t n) {
  return std::any_of(recent_varying.begin(), recent_varying.end(), [n](const std::atomic<int64_t>& v) {
    return v.load(std::memory_order_relaxed) == n;
  });
}

std::vector<int64_t> marks(const std::vector<int64_t>& sizes, const std::vector<int64_t>& varying) {
  for (int64_t n : varying)
    if (!recently_varied(n)) recent_varying[recent_next++ % recent_varying.size()].store(n, std::memory_order_relaxed);
  std::vector<int64_t> marked;
  for (size_t first = 0; first < sizes.size(); ++first) {
    int64_t product = 1;
    bool varies = false;
    for (size_t last = first; last < sizes.size(); ++last) {
      product *= sizes[last];
      varies |= std::find(varying.begin(), varying.end(), sizes[last]) != varying.end();
      if (varies) add(marked, product);
    }
  }
  std::sort(marked.begin(), marked.end());
  return marked;
}

std::vector<int64_t> varying_sizes(const graph::Origin* origin, const std::vector<exec::Operand>& inputs,
                                   const Shapes& output_sizes) {
  std::vector<int64_t> varying;
  for (const exec::Operand& o : inputs) {
    const std::vector<int64_t>& marked = o.storage->varying_sizes();
    if (marked.empty()) continue;
    const std::vector<int64_t>& sizes = o.view.sizes;
    auto is_marked = [&](int64_t n) { return std::binary_search(marked.begin(), marked.end(), n); };
    for (int64_t n : marked)
      if (!held_split(sizes, n, marked)) add(varying, n);
    // A view that splits a marked size ([B*L, N] seen as [B, L, N]) varies in the split parts,
    // unless one of them is marked itself (L, kept by the op that wrote it): then the others are
    // fixed sizes (B), which padding would only make larger.
    for (size_t first = 0; first < sizes.size(); ++first) {
      int64_t product = sizes[first];
      for (size_t last = first + 1; last < sizes.size(); ++last) {
        product *= sizes[last];
        if (!is_marked(product) || std::any_of(sizes.begin() + first, sizes.begin() + last + 1, is_marked)) continue;
        for (size_t d = first; d <= last; ++d) add(varying, sizes[d]);
      }
    }
  }
  if (origin && !origin->location.empty()) seen_shapes().compare(origin, shapes_of(inputs, output_sizes), varying);
  std::sort(varying.begin(), varying.end());
  return varying;
}

int64_t box_size(int64_t n, const std::vector<int64_t>& varying) {
  for (auto it = varying.rbegin(); it != varying.rend(); ++it) {  // the longest row that fits
    int64_t d = *it;
    if (d >= n || d < kSmallestBucket || n % d != 0) continue;  // a small size (a batch of 2) is no row length
    int64_t k = n / d;
    bool merged = k >= kSmallestBucket && std::binary_search(varying.begin(), varying.end(), k);
    return (merged ? box_size(k, varying) : k) * bucket(d);
  }
  return bucket(n);
}

std::vector<int64_t> box_of(const std::vector<int64_t>& sizes, const std::vector<int64_t>& varying) {
  std::vector<int64_t> box = sizes;
  for (int64_t& n : box)
    if (std::binary_search(varying.begin(), varying.end(), n)) n = box_size(n, varying);
  return box;
}

namespace {

// Whether sizes[d] is the product of a run of two or more of the view's other dimensions: then it
// varies where they are merged into one ([B·L, D] of a matmul), not here ([8, 64, 512] with
// d_ff = 512 = B·L at L = 64).
bool merges_others(const std::vector<int64_t>& sizes, size_t d) {
  for (size_t i = 0; i < sizes.size(); ++i) {
    int64_t product = 1;
    for (size_t j = i; j < sizes.size() && j != d; ++j) {
      product *= sizes[j];
      if (j > i && product == sizes[d]) return true;
    }
  }
  return false;
}

}  // namespace

exec::Padding padding_of(std::vector<int64_t> box, const std::vector<int64_t>& sizes,
                         const std::function<bool(size_t dim)>& varies, exec::Fill fill) {
  exec::Padding p{std::move(box), fill};
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] <= 1 || !varies(d) || merges_others(sizes, d)) continue;
    // Marks are sizes, so a static size equal to the varying one (d_ff = B·L at L = 64) looks varying
    // too: the first is taken, as where the sizes differ (L = 57), and the program is the same.
    if (p.rows >= 0 && sizes[d] == sizes[p.rows]) continue;
    if (p.rows >= 0) {
      p.rows = -1;
      break;
    }
    p.rows = static_cast<int64_t>(d);
  }
  return p;
}

bool empty_operand(const exec::Operand& o) { return o.view.numel() == 0 || o.storage->nbytes() == 0; }

bool holds_own_type(const exec::Operand& o) { return !o.storage->value() || o.storage->value()->dtype() == o.view.dtype; }

std::vector<int64_t> pad_elementwise(std::vector<exec::Operand>& inputs, std::vector<exec::Operand>& outputs) {
  auto varies = [](const exec::Operand& o) { return o.storage->varies(); };
  if (!padding_enabled() || (std::none_of(inputs.begin(), inputs.end(), varies) &&
                             std::none_of(outputs.begin(), outputs.end(), varies)))
    return {};  // every copy of a static workload leaves here
  if (std::any_of(inputs.begin(), inputs.end(), empty_operand) || std::any_of(outputs.begin(), outputs.end(), empty_operand))
    return {};
  std::vector<int64_t> varying = varying_sizes(nullptr, inputs, {});
  auto pads = [&](const exec::Operand& o) {
    if (o.view.sizes.empty()) return false;
    bool varies = std::any_of(o.view.sizes.begin(), o.view.sizes.end(),
                              [&](int64_t n) { return std::binary_search(varying.begin(), varying.end(), n); });
    return varies || o.storage->varies();
  };
  bool any = false;
  for (auto* operands : {&inputs, &outputs})
    for (const exec::Operand& o : *operands) {
      if (!pads(o)) continue;
      if (!holds_own_type(o)) return {};
      any = true;
    }
  if (!any) return {};
  for (auto* operands : {&inputs, &outputs})
    for (exec::Operand& o : *operands)
      if (pads(o))
        o.padding = padding_of(box_of(o.view.sizes, varying), o.view.sizes, [&](size_t d) {
          return std::binary_search(varying.begin(), varying.end(), o.view.sizes[d]);
        });
  exec::share_storage_order(inputs, outputs, std::numeric_limits<int64_t>::max());  // a copy: every dimension a row
  return marks(outputs.at(0).view.sizes, varying);
}

}  // namespace torchtpu::aten
