// The registry behind register_lowering and register_with_variants (aten/lowering.h), as
// install_lowerings (aten/boxed_kernel.cpp) reads it.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "aten/lowering.h"

namespace torchtpu::aten {

// Every registered name ("aten::add.Tensor", guessed spellings included) and its entry.
const std::unordered_map<std::string, LoweringEntry>& lowering_registry();

// Runs the functions register_derived_lowerings collected (they register more ops).
void run_derivers();

// Gives each registered form the CPU refusals declared for its name (refuse_on_cpu).
void attach_cpu_refusals();

// The ATen op a registered name ("aten::add.Tensor") names, if this PyTorch has it.
std::optional<c10::OperatorHandle> find_op(const std::string& name);

// Names that are no ATen op (a typo loses the lowering silently: the op would run on the CPU), ops
// registered twice (the later registration would replace the other unnoticed) and CPU refusals
// for a name no lowering has, sorted.
std::vector<std::string> registration_problems();

}  // namespace torchtpu::aten
