#include "exec/disk_cache.h"

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "exec/diagnostics.h"
#include "exec/sha256.h"

namespace torchtpu::exec {
namespace {

constexpr const char* kMagic = "torchtpu-executable 1";
constexpr const char* kSuffix = ".xlaexe";

std::string header(const std::string& key, const std::string& payload) {
  return std::string(kMagic) + "\n" + key + "\n" + std::to_string(payload.size()) + "\n" + sha256_hex(payload) + "\n";
}

// The payload of a well-formed entry for `key`, else a description of what is wrong.
std::optional<std::string> parse(const std::string& key, const std::string& file, std::string& problem) {
  std::istringstream in(file);
  std::string magic, stored_key, size, checksum;
  if (!std::getline(in, magic) || magic != kMagic) return problem = "unknown format", std::nullopt;
  if (!std::getline(in, stored_key) || stored_key != key) return problem = "wrong key", std::nullopt;
  if (!std::getline(in, size) || !std::getline(in, checksum)) return problem = "truncated header", std::nullopt;
  size_t start = static_cast<size_t>(in.tellg());
  std::string payload = file.substr(start);
  if (std::to_string(payload.size()) != size)
    return problem = "truncated (" + std::to_string(payload.size()) + " of " + size + " bytes)", std::nullopt;
  if (sha256_hex(payload) != checksum) return problem = "checksum mismatch", std::nullopt;
  return payload;
}

}  // namespace

std::string DiskCache::path_of(const std::string& key) const { return dir_ + "/" + key + kSuffix; }

std::optional<std::string> DiskCache::load(const std::string& key) const {
  std::ifstream f(path_of(key), std::ios::binary);
  if (!f) return std::nullopt;
  std::string file((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::string problem;
  std::optional<std::string> payload = parse(key, file, problem);
  if (!payload) {
    warn("compile cache entry " + path_of(key) + " is damaged (" + problem + "); dropped, recompiling");
    std::error_code ignored;
    std::filesystem::remove(path_of(key), ignored);
  }
  return payload;
}

bool DiskCache::store(const std::string& key, const std::string& payload) {
  static std::atomic<uint64_t> counter{0};
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  std::string tmp = dir_ + "/.tmp-" + std::to_string(getpid()) + "-" + std::to_string(counter++) + "-" + key;
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (f) f << header(key, payload) << payload;
    if (!f) {
      std::filesystem::remove(tmp, ec);
      if (!warned_unwritable_) warn("compile cache directory " + dir_ + " is not writable; entries are not saved there");
      warned_unwritable_ = true;
      return false;
    }
  }
  std::filesystem::rename(tmp, path_of(key), ec);  // atomic: readers see all of an entry or none
  if (ec) std::filesystem::remove(tmp, ec);
  return !ec;
}

void DiskCache::clear() const {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir_, ec))
    if (e.path().extension() == kSuffix) std::filesystem::remove(e.path(), ec);
}

}  // namespace torchtpu::exec
