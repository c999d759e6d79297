#include "aten/scalar_cache.h"

#include <complex>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "exec/executor.h"

namespace torchtpu::aten {
namespace {

constexpr size_t kMaxEntries = 4096;  // beyond this, values are not repeating: start over

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
  using Key = std::tuple<int, DType, std::string>;
  static std::mutex mu;
  static auto& cache = *new std::map<Key, std::shared_ptr<exec::BufferRef>>;  // never destroyed: see exec
  std::lock_guard<std::mutex> lock(mu);
  Key key{device, dtype, std::string(reinterpret_cast<char*>(bytes), size)};
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  if (cache.size() >= kMaxEntries) cache.clear();
  auto ref = std::make_shared<exec::BufferRef>(device, size);
  exec::upload(*ref, bytes, dtype);
  cache.emplace(key, ref);
  return ref;
}

}  // namespace torchtpu::aten
