// Device-level entry points of the PyTorch binding.
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/Device.h>

#include <string>

namespace torchtpu::aten {

// Number of tpu devices; 0 when no PJRT plugin can be loaded.
c10::DeviceIndex device_count();  // starts the runtime
bool is_available();              // does not start it
c10::DeviceIndex current_device();
// Sets this thread's current device; an invalid index raises naming the valid range.
void set_current_device(c10::DeviceIndex index);
c10::Allocator* tpu_allocator();

// torch.tpu.set_sync_debug_mode, as CUDA's: 0 lets host reads (item, cpu, print, a data-dependent
// size) wait for the device silently, 1 warns, 2 raises. `reason` names the read.
void set_sync_debug_mode(int mode);
int sync_debug_mode();
void warn_or_error_on_sync(const std::string& reason);

// Installs the allocator and the PrivateUse1 hooks; called once at import.
void register_device();

}  // namespace torchtpu::aten
