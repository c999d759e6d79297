// Byte counts as people write and read them: "8GB", "512MiB", "1000000"; "62.50 MiB".
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace torchtpu::exec {

// A whole number of bytes with an optional unit (B, KB, MB, GB, TB in powers of 1000; KiB, MiB,
// GiB, TiB in powers of 1024; case-insensitive), or nullopt when `text` is not one.
std::optional<int64_t> parse_byte_size(const std::string& text);

// "512 B", "4.00 KiB", "62.50 MiB", "1.50 GiB".
std::string format_bytes(int64_t bytes);

}  // namespace torchtpu::exec
