// A PJRT completion event (transfer or execution finished), owned.
#pragma once

#include <functional>
#include <string>

#include "pjrt_c_api.h"

namespace torchtpu::runtime {

class Event {
 public:
  Event() = default;
  Event(const PJRT_Api* api, PJRT_Event* event) : api_(api), event_(event) {}
  Event(Event&& other) noexcept { *this = std::move(other); }
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event();

  bool valid() const { return event_ != nullptr; }
  bool is_ready() const;
  // Blocks until done; throws PjrtError if the work it tracks failed. No-op on an empty Event.
  void await() const;
  // Calls `done` (from a PJRT thread) once ready, with an empty string or the error message.
  void on_ready(std::function<void(const std::string& error)> done) const;

 private:
  const PJRT_Api* api_ = nullptr;
  PJRT_Event* event_ = nullptr;
};

}  // namespace torchtpu::runtime
