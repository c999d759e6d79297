#include "aten/scalar_cache.h"

#include <complex>
#include <cstring>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "exec/executor.h"

namespace torchtpu::aten {
namespace {

using Key = std::tuple<int, DType, std::string>;  // device, dtype, the value's bytes

// The most recently used values' buffers. A training step's constants (1, alpha, lr, eps) stay;
// values that change every step (Adam's bias corrections) pass through without accumulating.
class RecentScalars {
 public:
  std::shared_ptr<exec::BufferRef> find(const Key& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    order_.splice(order_.begin(), order_, it->second);
    return it->second->second;
  }
  void insert(const Key& key, std::shared_ptr<exec::BufferRef> ref) {
    order_.emplace_front(key, std::move(ref));
    index_[key] = order_.begin();
    if (order_.size() <= kCapacity) return;
    index_.erase(order_.back().first);
    order_.pop_back();
  }

 private:
  static constexpr size_t kCapacity = 128;
  std::list<std::pair<Key, std::shared_ptr<exec::BufferRef>>> order_;
  std::map<Key, decltype(order_)::iterator> index_;
};

}  // namespace

DType scalar_dtype(const c10::Scalar& s) {
  if (s.isBoolean()) return DType::kBool;
  if (s.isIntegral(false)) return DType::kS64;
  if (s.isComplex()) return DType::kC128;
  return DType::kF64;
}

std::shared_ptr<exec::BufferRef> device_scalar(const c10::Scalar& s, int device) {
  DType dtype = scalar_dtype(s);
  unsigned char bytes[16] = {};
  switch (dtype) {
    case DType::kBool: bytes[0] = s.toBool(); break;
    case DType::kS64: { int64_t v = s.toLong(); std::memcpy(bytes, &v, 8); break; }
    case DType::kC128: { auto v = s.toComplexDouble(); std::memcpy(bytes, &v, 16); break; }
    default: { double v = s.toDouble(); std::memcpy(bytes, &v, 8); break; }
  }
  size_t size = element_size(dtype);
  static std::mutex mu;
  static auto& cache = *new RecentScalars;  // never destroyed: see exec
  std::lock_guard<std::mutex> lock(mu);
  Key key{device, dtype, std::string(reinterpret_cast<char*>(bytes), size)};
  if (auto ref = cache.find(key)) return ref;
  auto ref = std::make_shared<exec::BufferRef>(device, size);
  exec::upload(*ref, bytes, dtype);
  ref->value()->mark_scalar();
  cache.insert(key, ref);
  return ref;
}

}  // namespace torchtpu::aten
