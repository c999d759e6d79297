// Where an op came from: the ATen op and the innermost Python frame outside torch and torchtpu
// (the user's line), kept with each op record so a failure surfacing later can name it.
#pragma once

#include <memory>
#include <string>

#include "graph/node.h"

namespace torchtpu::aten {

std::shared_ptr<const graph::Origin> origin_of(const std::string& op);

// Why the host is waiting for device data, from the Python stack: "print" (tensor printing),
// "control flow" (a tensor used as a condition), else `kind` ("item", "cpu").
std::string sync_reason(const char* kind);

}  // namespace torchtpu::aten
