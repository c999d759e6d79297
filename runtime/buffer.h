// A device buffer (immutable contents, as in XLA), owned.
#pragma once

#include <cstdint>
#include <vector>

#include "pjrt_c_api.h"
#include "runtime/dtype.h"
#include "runtime/event.h"

namespace torchtpu::runtime {

PJRT_Buffer_Type to_pjrt(DType t);
DType from_pjrt(PJRT_Buffer_Type t);  // throws for types torchtpu does not model

class Buffer {
 public:
  Buffer() = default;
  Buffer(const PJRT_Api* api, PJRT_Buffer* buffer) : api_(api), buffer_(buffer) {}
  Buffer(Buffer&& other) noexcept { *this = std::move(other); }
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer();

  bool valid() const { return buffer_ != nullptr; }
  DType dtype() const;
  std::vector<int64_t> dims() const;
  int64_t element_count() const;
  size_t byte_size() const { return element_count() * element_size(dtype()); }  // dense host size
  size_t on_device_size() const;
  PJRT_Device* device() const;

  // Starts a copy into `dst` (row-major, dense, `size` bytes); dst must stay alive until the
  // returned event is ready.
  Event copy_to_host_async(void* dst, size_t size) const;
  void copy_to_host(void* dst, size_t size) const { copy_to_host_async(dst, size).await(); }
  // Ready when the value has been computed (execution or transfer that produces it finished).
  Event ready_event() const;

  PJRT_Buffer* raw() const { return buffer_; }

 private:
  const PJRT_Api* api_ = nullptr;
  PJRT_Buffer* buffer_ = nullptr;
};

}  // namespace torchtpu::runtime
