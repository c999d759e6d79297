// The device memory tpu storages hold, per device, and the limit TORCHTPU_MEMORY_LIMIT puts on it.
//
// A storage counts from its allocation to its death, as CUDA's allocator counts (torch.empty
// holds memory before anything is written). The limit bounds these bytes the way a TPU's HBM
// would: an allocation past it raises OutOfDeviceMemory before anything runs, so nothing already
// computed is lost. XLA's temporaries inside a program are not storages and are not counted.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

namespace torchtpu::exec {

// The device cannot hold what an allocation, execution or transfer needs.
class OutOfDeviceMemory : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct DeviceMemory {
  int64_t allocated = 0, peak = 0;                 // bytes held now, and the most since the last reset
  int64_t allocations = 0, peak_allocations = 0;   // storages alive (non-empty ones)
  int64_t allocated_total = 0, freed_total = 0;    // bytes ever allocated / freed
  int64_t num_allocs = 0, num_frees = 0, num_ooms = 0;
  std::optional<int64_t> limit;
  std::string limit_source;  // what set the limit, for error messages
};

// Counts a new storage of `nbytes` on `device`; past the limit it counts nothing and throws
// OutOfDeviceMemory naming the request, the limit and what is in use.
void allocate_device_bytes(int device, int64_t nbytes);
void free_device_bytes(int device, int64_t nbytes);

DeviceMemory device_memory(int device);
void reset_peak_device_memory(int device);
void reset_accumulated_device_memory(int device);

// nullopt removes the limit; `source` says who set it ("torch.tpu.set_per_process_memory_fraction").
void set_device_memory_limit(int device, std::optional<int64_t> bytes, const std::string& source);

// The device's memory size: what the PJRT plugin reports, else the host's physical memory (where
// the CPU plugin's devices keep their buffers).
int64_t device_memory_size(int device);

// TORCHTPU_MEMORY_LIMIT's value: a byte size ("8GB", "512MiB", "1000000") or, for a number up to
// 1, that fraction of `size`. Throws std::invalid_argument for anything else.
int64_t parse_memory_limit(const std::string& text, int64_t size);

}  // namespace torchtpu::exec
