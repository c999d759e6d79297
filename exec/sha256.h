// SHA-256 (FIPS 180-4), for compile-cache keys and entry checksums.
#pragma once

#include <string>
#include <string_view>

namespace torchtpu::exec {

// The 32-byte digest of `data`.
std::string sha256(std::string_view data);
// The same as 64 lowercase hex characters.
std::string sha256_hex(std::string_view data);

}  // namespace torchtpu::exec
