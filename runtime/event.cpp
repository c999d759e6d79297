#include "runtime/event.h"

#include <memory>
#include <string>

#include "runtime/error.h"
#include "runtime/pjrt_args.h"

namespace torchtpu::runtime {

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    this->~Event();
    api_ = other.api_;
    event_ = other.event_;
    other.event_ = nullptr;
  }
  return *this;
}

Event::~Event() {
  if (!event_) return;
  PJRT_ARGS(PJRT_Event_Destroy_Args, args);
  args.event = event_;
  api_->PJRT_Event_Destroy(&args);
  event_ = nullptr;
}

bool Event::is_ready() const {
  if (!event_) return true;
  PJRT_ARGS(PJRT_Event_IsReady_Args, args);
  args.event = event_;
  check(api_, api_->PJRT_Event_IsReady(&args), "PJRT_Event_IsReady");
  return args.is_ready;
}

void Event::await() const {
  if (!event_) return;
  PJRT_ARGS(PJRT_Event_Await_Args, args);
  args.event = event_;
  check(api_, api_->PJRT_Event_Await(&args), "PJRT_Event_Await");
}

void Event::on_ready(std::function<void(const std::string&)> done) const {
  if (!event_) {
    done("");
    return;
  }
  struct Context {
    const PJRT_Api* api;
    std::function<void(const std::string&)> done;
  };
  PJRT_ARGS(PJRT_Event_OnReady_Args, args);
  args.event = event_;
  args.user_arg = new Context{api_, std::move(done)};
  args.callback = [](PJRT_Error* error, void* user_arg) {
    std::unique_ptr<Context> ctx(static_cast<Context*>(user_arg));
    std::string message;
    try {
      check(ctx->api, error, "asynchronous PJRT work");
    } catch (const PjrtError& e) {
      message = e.what();
    }
    ctx->done(message);
  };
  PJRT_Error* error = api_->PJRT_Event_OnReady(&args);
  if (error) delete static_cast<Context*>(args.user_arg);
  check(api_, error, "PJRT_Event_OnReady");
}

}  // namespace torchtpu::runtime
