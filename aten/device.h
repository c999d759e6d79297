// Device-level entry points of the PyTorch binding.
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/Device.h>

namespace torchtpu::aten {

// Number of tpu devices; 0 when no PJRT plugin can be loaded.
c10::DeviceIndex device_count();  // starts the runtime
bool is_available();              // does not start it
c10::DeviceIndex current_device();
// Sets this thread's current device; an invalid index raises naming the valid range.
void set_current_device(c10::DeviceIndex index);
c10::Allocator* tpu_allocator();

// Installs the allocator and the PrivateUse1 hooks; called once at import.
void register_device();

}  // namespace torchtpu::aten
