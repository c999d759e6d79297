// SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), for compile-cache keys, entry checksums and
// entry authentication.
#pragma once

#include <string>
#include <string_view>

namespace torchtpu::exec {

// The 32-byte digest of `data`.
std::string sha256(std::string_view data);
// The same as 64 lowercase hex characters.
std::string sha256_hex(std::string_view data);
// Lowercase hex of `bytes`.
std::string hex(std::string_view bytes);
// The HMAC-SHA256 of `message` under `key`, as 64 hex characters.
std::string hmac_sha256_hex(std::string_view key, std::string_view message);

}  // namespace torchtpu::exec
