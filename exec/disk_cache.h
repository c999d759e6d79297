// One directory of compiled executables, safe to share between processes and hosts.
//
// An entry is a file named by its key with a header (format, key, payload size, SHA-256 of the
// payload, an HMAC of those under the cache key or "-"). Writes go to a temporary file that is
// renamed into place, so readers see a whole entry or none and concurrent writers of one key are
// harmless. An entry that fails its checks (truncated, corrupt, another key's) is deleted and
// reported as missing: the caller recompiles.
//
// Entries are native code the process will run, so a directory others can write is a way in:
// a private directory (the local tier) is created 0700 with 0600 entries, and refuses entries that
// are not the user's or that others can write; with an authentication key (TORCHTPU_CACHE_KEY),
// an entry whose HMAC does not verify is never loaded. A size bound evicts the least recently
// used entries (a hit refreshes an entry's modification time), which concurrent processes may do
// at once: a reader keeps an entry it opened, and a reader that finds none recompiles.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>

namespace torchtpu::exec {

struct DiskCacheOptions {
  bool private_to_user = false;
  std::string auth_key;    // empty: entries are checksummed but not authenticated
  int64_t max_bytes = 0;   // 0: unbounded
  uid_t owner = geteuid();  // whom a private directory's entries must belong to
};

class DiskCache {
 public:
  explicit DiskCache(std::string dir, DiskCacheOptions options = {})
      : dir_(std::move(dir)), options_(std::move(options)) {}

  const std::string& dir() const { return dir_; }
  // The payload stored under `key` (hex digest), or nullopt.
  std::optional<std::string> load(const std::string& key);
  // Whether an entry is stored under `key` (unchecked: load() checks it).
  bool contains(const std::string& key);
  // False, with one warning per directory, when the directory cannot be written.
  bool store(const std::string& key, const std::string& payload);
  // Removes every entry.
  void clear() const;

 private:
  std::string path_of(const std::string& key) const;
  // Creates the directory (0700 when private); false, with a warning, when it cannot be made or is
  // unsafe to use. The answer is remembered until forget_directory().
  bool usable_directory();
  void forget_directory();
  void warn_unwritable();
  // Why the opened entry `fd` must not be loaded from a private directory, or "".
  std::string untrusted(int fd) const;
  void evict_least_recently_used() const;

  std::string dir_;
  DiskCacheOptions options_;
  std::mutex mu_;  // guards the flags below
  bool checked_directory_ = false, directory_ok_ = false;
  bool warned_unwritable_ = false;
};

}  // namespace torchtpu::exec
