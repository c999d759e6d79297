// Ctrl-C while the host waits for something long (a compile): waits poll an interrupt check that
// the Python binding installs (it runs Python's signal handlers), and throw Interrupted when it
// reports one, leaving the awaited work to finish on its own thread.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <stdexcept>

namespace torchtpu::exec {

class Interrupted : public std::runtime_error {
 public:
  Interrupted() : std::runtime_error("interrupted") {}
};

// `check` returns true when the waiting thread should stop waiting (it must be cheap: it runs
// every 100 ms of a wait). No check installed: waits are not interruptible.
void set_interrupt_check(std::function<bool()> check);

// This thread's waits are not interruptible from now on: a background job's (Ctrl-C stops the
// thread that waits for it, and the check must not take the GIL from under that thread).
void never_interrupt_this_thread();

// Waits on `cv` (with `lock` held) until `done()`; throws Interrupted when the check says so.
void wait_interruptibly(std::unique_lock<std::mutex>& lock, std::condition_variable& cv,
                        const std::function<bool()>& done);

}  // namespace torchtpu::exec
