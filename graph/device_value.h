// What a storage holds at one moment: a flat device buffer that exists, or one that a pending
// (not yet executed) op will produce.
//
// Storages swap values, never mutate them (XLA buffers are immutable). A value is *held* while some
// storage holds it; when a pending window executes, only held values become program outputs: the
// others were intermediates nobody can read any more.
#pragma once

#include <atomic>
#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "runtime/buffer.h"
#include "runtime/dtype.h"

namespace torchtpu::graph {

struct Node;

// A condition a program computed on the device, such as "every index is in range", whose outcome
// the host learns when it next waits for data. Values computed from the checked op's results
// carry it, so that once it has failed, reading them (or computing from them) raises its message.
struct DeviceCheck {
  enum State { kUnknown, kPassed, kFailed };
  DeviceCheck(std::string message, bool index_error) : message(std::move(message)), index_error(index_error) {}
  const std::string message;
  const bool index_error;  // the class CPU raises for it: IndexError, else RuntimeError
  std::atomic<int> state{kUnknown};
};
using CheckPtr = std::shared_ptr<DeviceCheck>;

class DeviceValue {
 public:
  DeviceValue(int device, DType dtype, int64_t length) : device_(device), dtype_(dtype), length_(length) {}
  DeviceValue(const DeviceValue&) = delete;
  DeviceValue& operator=(const DeviceValue&) = delete;

  int device() const { return device_; }
  DType dtype() const { return dtype_; }    // element type of the flat buffer
  int64_t length() const { return length_; }  // elements in the flat buffer

  // Materialized: it has a buffer, or one is arriving (see arrive_later) and no pending op makes it.
  bool is_materialized() const { return arrival_.valid() || buffer_ != nullptr; }
  // Waits for an arriving buffer (rethrowing the failure of the work that was to make it).
  const std::shared_ptr<runtime::Buffer>& buffer() const {
    if (arrival_.valid()) arrival_.get();
    return buffer_;
  }
  void materialize(std::shared_ptr<runtime::Buffer> buffer) {
    buffer_ = std::move(buffer);
    producer_ = nullptr;
  }
  // A value whose buffer another thread makes (a compiled graph's first run, while its program
  // compiles): it calls deliver() and then makes `arrival` ready. Readers wait in buffer() only.
  void arrive_later(std::shared_future<void> arrival) {
    arrival_ = std::move(arrival);
    producer_ = nullptr;
  }
  void deliver(std::shared_ptr<runtime::Buffer> buffer) { buffer_ = std::move(buffer); }

  // While pending: the node that produces this value and which of its outputs it is.
  Node* producer() const { return producer_; }
  size_t output_index() const { return output_index_; }
  void set_producer(Node* node, size_t index) {
    producer_ = node;
    output_index_ = index;
  }

  // A device copy of a Scalar from the value-keyed cache (aten/scalar_cache.h): two arguments that
  // happen to hold equal values share it, so programs take each use as a parameter of its own --
  // their wiring, hence their cache key, must not depend on the values (Adam's bias correction
  // equals 1 - beta1 at its first step).
  void mark_scalar() { scalar_ = true; }
  bool is_scalar() const { return scalar_; }

  // Storages holding this value (maintained by the storage).
  void hold() { holders_++; }
  void release() { holders_--; }
  bool is_held() const { return holders_ > 0; }

  // The checks this value depends on that had not passed when it was made.
  const std::vector<CheckPtr>& checks() const { return checks_; }
  // A new value's checks: those of the inputs it is made from (distinct, none passed).
  void inherit(std::vector<CheckPtr> checks) { checks_ = std::move(checks); }
  void depend_on(const CheckPtr& check) {
    for (const CheckPtr& c : checks_)
      if (c == check) return;
    checks_.push_back(check);
  }

 private:
  int device_;
  DType dtype_;
  int64_t length_;
  std::shared_ptr<runtime::Buffer> buffer_;
  std::shared_future<void> arrival_;  // set once, before other threads see the value
  Node* producer_ = nullptr;
  size_t output_index_ = 0;
  std::atomic<int> holders_{0};
  bool scalar_ = false;
  std::vector<CheckPtr> checks_;
};

using ValuePtr = std::shared_ptr<DeviceValue>;

}  // namespace torchtpu::graph
