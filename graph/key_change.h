// What a recompile names: the difference between two structural keys of "the same" op or window
// (graph::Window's key: "<length>:<node key><wiring>..." per node, node keys "op|attribute|...").
#pragma once

#include <string>

namespace torchtpu::graph {

// The first op whose key differs and, within it, the first differing attribute or operand
// geometry, as a sentence.
std::string describe_change(const std::string& before, const std::string& after);

}  // namespace torchtpu::graph
