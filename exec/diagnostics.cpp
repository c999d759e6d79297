#include "exec/diagnostics.h"

#include <iostream>
#include <mutex>

namespace torchtpu::exec {
namespace {

std::mutex& handler_mutex() {
  static std::mutex mu;
  return mu;
}

std::function<void(const std::string&)>& handler() {
  static auto* h = new std::function<void(const std::string&)>(
      [](const std::string& m) { std::cerr << "torchtpu warning: " << m << std::endl; });
  return *h;
}

}  // namespace

void warn(const std::string& message) {
  std::function<void(const std::string&)> h;
  {
    std::lock_guard<std::mutex> lock(handler_mutex());
    h = handler();
  }
  h(message);
}

void set_warning_handler(std::function<void(const std::string&)> h) {
  std::lock_guard<std::mutex> lock(handler_mutex());
  handler() = std::move(h);
}

}  // namespace torchtpu::exec
