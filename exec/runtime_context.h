// The one process-wide runtime context: the PJRT plugin and client every tpu tensor lives on.
#pragma once

#include "runtime/client.h"

namespace torchtpu::exec {

// The client, created on first use from the discovered plugin. Throws std::runtime_error naming
// what was searched when no plugin can be found; a later call tries again.
runtime::Client& client();

// Throws std::runtime_error in a process forked from one whose client had started (the child has
// none of the client's threads: using it would hang). client() and the executor's entry points
// call it.
void refuse_if_forked();

// Whether client() has created the client (its plugin is loaded and initialized).
bool client_started();

// Whether a usable plugin can be found (a file check: nothing is loaded or initialized), so that
// `torch.tpu.is_available()` answers without starting the runtime, as CUDA's does.
bool plugin_present();

// Addressable device `index`, with an error that names the valid range.
const runtime::Device& device(int index);

}  // namespace torchtpu::exec
