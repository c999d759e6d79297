#include "exec/interrupt.h"

#include <chrono>

namespace torchtpu::exec {
namespace {

std::mutex check_mu;
std::function<bool()>& check() {
  static auto* c = new std::function<bool()>;
  return *c;
}

thread_local bool uninterruptible = false;

bool interrupted() {
  if (uninterruptible) return false;
  std::function<bool()> c;
  {
    std::lock_guard<std::mutex> lock(check_mu);
    c = check();
  }
  return c && c();
}

}  // namespace

void set_interrupt_check(std::function<bool()> c) {
  std::lock_guard<std::mutex> lock(check_mu);
  check() = std::move(c);
}

void never_interrupt_this_thread() { uninterruptible = true; }

void wait_interruptibly(std::unique_lock<std::mutex>& lock, std::condition_variable& cv,
                        const std::function<bool()>& done) {
  while (!cv.wait_for(lock, std::chrono::milliseconds(100), done)) {
    lock.unlock();  // the check may take the GIL: never while holding the caller's lock
    bool stop = interrupted();
    lock.lock();
    if (stop && !done()) throw Interrupted();
  }
}

}  // namespace torchtpu::exec
