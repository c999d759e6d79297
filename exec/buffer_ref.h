// The contents of one tensor storage: a flat device value that is swapped, never mutated.
//
// XLA buffers are immutable, so a write to any part of a storage produces a whole new flat value
// and swaps it in here; every tensor aliasing the storage sees the change. The value may still be
// pending (fused and lazy modes): the storage then holds what a recorded op will produce.
//
// A padded value is longer than the storage's bytes (its capacity, exec/padded_view.h), and what
// lies past them is zeros: every write that makes a value longer (a padded result written whole,
// a padded upload) zeroes it, and every other write keeps it. Padded reads rely on that.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "exec/device_memory.h"
#include "exec/metrics.h"
#include "graph/device_value.h"

namespace torchtpu::exec {

class BufferRef {
 public:
  // Counts against the device's memory from here on; throws OutOfDeviceMemory past its limit.
  BufferRef(int device, size_t nbytes) : device_(device), nbytes_(nbytes) {
    allocate_device_bytes(device, static_cast<int64_t>(nbytes));
  }
  BufferRef(const BufferRef&) = delete;
  BufferRef& operator=(const BufferRef&) = delete;
  ~BufferRef() {
    tag_ = 0;
    record_padding_bytes(-padding_bytes());
    free_device_bytes(device_, static_cast<int64_t>(nbytes_));
    if (value_) value_->release();
  }

  int device() const { return device_; }
  size_t nbytes() const { return nbytes_; }

  // Whether `address` is a live BufferRef: PyTorch wraps a storage's address in storages of its
  // own (at::from_blob, as its pickling does), which carry the address but not the owner.
  static bool lives_at(const void* address) {
    return address && static_cast<const BufferRef*>(address)->tag_ == kTag;
  }

  // The current contents, or null when the storage was never written (it then reads as zeros).
  const graph::ValuePtr& value() const { return value_; }

  void swap(graph::ValuePtr value) {
    int64_t before = padding_bytes();
    if (value_) value_->release();
    value->hold();
    value_ = std::move(value);
    varying_sizes_.clear();  // the writer of a padded value marks it after the swap
    varying_strides_.clear();
    record_padding_bytes(padding_bytes() - before);
  }

  // The sizes of the padded tensor that vary between calls (set by the op that wrote it, which
  // may have needed no room beyond its bytes), so that the ops reading it run padded too.
  const std::vector<int64_t>& varying_sizes() const { return varying_sizes_; }
  bool varies() const { return !varying_sizes_.empty(); }
  void set_varying_sizes(std::vector<int64_t> sizes) { varying_sizes_ = std::move(sizes); }
  // The strides its varying dimensions had where a padded op wrote it (empty where not known): a
  // view with several dimensions of one marked size varies only in those with one of these strides.
  const std::vector<int64_t>& varying_strides() const { return varying_strides_; }
  void set_varying(std::vector<int64_t> sizes, std::vector<int64_t> strides) {
    varying_sizes_ = std::move(sizes);
    varying_strides_ = std::move(strides);
  }

 private:
  int64_t padding_bytes() const {
    if (!value_) return 0;
    int64_t held = static_cast<int64_t>(value_->length() * element_size(value_->dtype()));
    return held > static_cast<int64_t>(nbytes_) ? held - static_cast<int64_t>(nbytes_) : 0;
  }

  static constexpr uint64_t kTag = 0x7470752d62756672;  // "tpu-bufr"
  uint64_t tag_ = kTag;
  int device_;
  size_t nbytes_;
  graph::ValuePtr value_;
  std::vector<int64_t> varying_sizes_, varying_strides_;
};

}  // namespace torchtpu::exec
