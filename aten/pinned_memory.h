// Pinned host memory for tpu transfers: what Tensor.pin_memory() and DataLoader(pin_memory=True)
// allocate, and what Tensor.is_pinned() recognizes.
#pragma once

#include <c10/core/Allocator.h>

#include <functional>

namespace torchtpu::aten {

c10::Allocator* pinned_host_allocator();
// Whether `address` lies inside a block pinned_host_allocator() handed out and has not freed.
bool is_pinned_host_address(const void* address);
// Keeps the pinned block containing `address` allocated (not freed, not reused) until the
// returned function is called, even if its tensor is released first: an asynchronous transfer
// reads the block until then. `address` must be pinned.
std::function<void()> hold_pinned_block(const void* address);

}  // namespace torchtpu::aten
