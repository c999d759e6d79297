#include "aten/generator.h"

#include <ATen/core/GeneratorForPrivateuseone.h>
#include <ATen/ops/empty.h>
#include <c10/core/GeneratorImpl.h>

#include <cstring>
#include <mutex>
#include <vector>

#include "aten/device.h"

namespace torchtpu::aten {
namespace {

// SplitMix64: turns (seed, offset) into well-separated keys.
uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

constexpr uint64_t kDefaultSeed = 67280421310721ull;  // PyTorch's default_rng_seed_val

}  // namespace

TpuGenerator::TpuGenerator(c10::DeviceIndex device)
    : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, device),
                         c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      seed_(kDefaultSeed) {}

void TpuGenerator::set_current_seed(uint64_t seed) {
  seed_ = seed;
  offset_ = 0;
}

uint64_t TpuGenerator::seed() {
  uint64_t s = c10::detail::getNonDeterministicRandom();
  set_current_seed(s);
  return s;
}

void TpuGenerator::set_state(const c10::TensorImpl& new_state) {
  TORCH_CHECK(new_state.numel() == 16 && new_state.dtype() == caffe2::TypeMeta::Make<uint8_t>(),
              "tpu RNG state must be a uint8 tensor of 16 bytes, got ", new_state.numel(), " elements");
  const auto* bytes = static_cast<const uint8_t*>(new_state.data());
  std::memcpy(&seed_, bytes, 8);
  std::memcpy(&offset_, bytes + 8, 8);
}

c10::intrusive_ptr<c10::TensorImpl> TpuGenerator::get_state() const {
  at::Tensor state = at::empty({16}, at::TensorOptions().dtype(at::kByte));
  std::memcpy(state.data_ptr(), &seed_, 8);
  std::memcpy(static_cast<uint8_t*>(state.data_ptr()) + 8, &offset_, 8);
  return state.getIntrusivePtr();
}

std::array<uint64_t, 2> TpuGenerator::next_state() {
  std::lock_guard<std::mutex> lock(mutex_);
  return {mix(seed_ ^ mix(offset_++)), 0};
}

TpuGenerator* TpuGenerator::clone_impl() const {
  auto* copy = new TpuGenerator(device().index());
  copy->seed_ = seed_;
  copy->offset_ = offset_;
  return copy;
}

const at::Generator& default_generator(c10::DeviceIndex device) {
  static std::once_flag once;
  static auto& generators = *new std::vector<at::Generator>;
  std::call_once(once, [] {
    for (c10::DeviceIndex d = 0; d < std::max<c10::DeviceIndex>(device_count(), 1); ++d)
      generators.push_back(at::make_generator<TpuGenerator>(d));
  });
  TORCH_CHECK(device >= 0 && device < static_cast<c10::DeviceIndex>(generators.size()),
              "invalid tpu device index ", int(device));
  return generators[device];
}

at::Generator new_generator(c10::DeviceIndex device) { return at::make_generator<TpuGenerator>(device); }

}  // namespace torchtpu::aten
