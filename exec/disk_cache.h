// One directory of compiled executables, safe to share between processes and hosts.
//
// An entry is a file named by its key with a header (format, key, payload size, SHA-256 of the
// payload). Writes go to a temporary file that is renamed into place, so readers see a whole
// entry or none and concurrent writers of one key are harmless. An entry that fails its checks
// (truncated, corrupt, another key's) is deleted and reported as missing: the caller recompiles.
#pragma once

#include <optional>
#include <string>

namespace torchtpu::exec {

class DiskCache {
 public:
  explicit DiskCache(std::string dir) : dir_(std::move(dir)) {}

  const std::string& dir() const { return dir_; }
  // The payload stored under `key` (hex digest), or nullopt.
  std::optional<std::string> load(const std::string& key) const;
  // False, with one warning per directory, when the directory cannot be written.
  bool store(const std::string& key, const std::string& payload);
  // Removes every entry.
  void clear() const;

 private:
  std::string path_of(const std::string& key) const;
  std::string dir_;
  bool warned_unwritable_ = false;
};

}  // namespace torchtpu::exec
