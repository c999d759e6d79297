// The contents of one tensor storage: a flat device buffer that is swapped, never mutated.
//
// XLA buffers are immutable, so a write to any part of a storage produces a whole new flat buffer
// and swaps it in here; every tensor aliasing the storage sees the change.
#pragma once

#include <cstddef>
#include <memory>

#include "exec/metrics.h"
#include "runtime/buffer.h"

namespace torchtpu::exec {

class BufferRef {
 public:
  BufferRef(int device, size_t nbytes) : device_(device), nbytes_(nbytes) {}
  BufferRef(const BufferRef&) = delete;
  BufferRef& operator=(const BufferRef&) = delete;
  ~BufferRef() { reset(0); }

  int device() const { return device_; }
  size_t nbytes() const { return nbytes_; }

  // The flat 1-D buffer, or null when the storage was never written (it then reads as zeros).
  const std::shared_ptr<runtime::Buffer>& buffer() const { return buffer_; }
  // Element type of the flat buffer: the dtype of the tensor that last wrote the storage.
  DType buffer_dtype() const { return buffer_dtype_; }

  void swap(std::shared_ptr<runtime::Buffer> buffer, DType dtype) {
    if (!buffer_) track_device_bytes(device_, static_cast<int64_t>(nbytes_));
    buffer_ = std::move(buffer);
    buffer_dtype_ = dtype;
  }
  // Resizing drops the old contents; the caller re-materializes what it keeps.
  void reset(size_t nbytes) {
    if (buffer_) track_device_bytes(device_, -static_cast<int64_t>(nbytes_));
    nbytes_ = nbytes;
    buffer_.reset();
  }

 private:
  int device_;
  size_t nbytes_;
  std::shared_ptr<runtime::Buffer> buffer_;
  DType buffer_dtype_ = DType::kU8;
};

}  // namespace torchtpu::exec
