// The tpu random-number generator: a (seed, offset) pair. Each random op consumes one offset and
// derives an independent rng_bit_generator key from both, so results are reproducible under
// torch.manual_seed and do not depend on how many numbers earlier ops drew.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>

#include <array>

namespace torchtpu::aten {

class TpuGenerator : public c10::GeneratorImpl {
 public:
  explicit TpuGenerator(c10::DeviceIndex device);

  void set_current_seed(uint64_t seed) override;
  void set_offset(uint64_t offset) override { offset_ = offset; }
  uint64_t get_offset() const override { return offset_; }
  uint64_t current_seed() const override { return seed_; }
  uint64_t seed() override;
  // State: 16 bytes (seed, offset) in a CPU uint8 tensor, as torch.tpu.get_rng_state() returns.
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;
  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }

  // The rng_bit_generator state for the next random op (and advances the offset).
  std::array<uint64_t, 2> next_state();

 private:
  TpuGenerator* clone_impl() const override;
  uint64_t seed_;
  uint64_t offset_ = 0;
};

// The default generator of a tpu device (what torch.manual_seed seeds).
const at::Generator& default_generator(c10::DeviceIndex device);
at::Generator new_generator(c10::DeviceIndex device);

}  // namespace torchtpu::aten
