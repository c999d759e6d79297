// How the emitter converts to float8_e4m3fn (no infinities, largest finite value 448).
#pragma once

namespace torchtpu::hlo {

// XLA's convert turns a value that rounds beyond ±448 (an infinity included) into NaN; with
// saturation on, Builder::convert gives ±448 instead (NaN stays NaN). PyTorch's own conversion
// saturates from the release that changed it (PyTorch #178817, after 2.11); the PyTorch extension
// sets this once, at load, to match the torch it is built against. Off by default.
void set_float8_e4m3fn_saturates(bool on);
bool float8_e4m3fn_saturates();

}  // namespace torchtpu::hlo
