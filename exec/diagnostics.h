// Warnings from the torch-free layers. The PyTorch binding routes them to Python warnings;
// by default they go to stderr.
#pragma once

#include <functional>
#include <string>

namespace torchtpu::exec {

void warn(const std::string& message);
void set_warning_handler(std::function<void(const std::string&)> handler);

}  // namespace torchtpu::exec
