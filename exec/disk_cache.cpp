#include "exec/disk_cache.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <sstream>
#include <vector>

#include "exec/diagnostics.h"
#include "exec/sha256.h"

namespace torchtpu::exec {
namespace {

namespace fs = std::filesystem;

constexpr const char* kFormatName = "torchtpu-executable ";
constexpr const char* kMagic = "torchtpu-executable 2";
constexpr const char* kSuffix = ".xlaexe";
constexpr const char* kTempPrefix = ".tmp-";

// What the HMAC covers: the key, and through the checksum the payload.
std::string authenticated_part(const std::string& key, const std::string& size, const std::string& checksum) {
  return key + "\n" + size + "\n" + checksum;
}

std::string header(const std::string& key, const std::string& payload, const std::string& auth_key) {
  std::string size = std::to_string(payload.size()), checksum = sha256_hex(payload);
  std::string tag = auth_key.empty() ? "-" : hmac_sha256_hex(auth_key, authenticated_part(key, size, checksum));
  return std::string(kMagic) + "\n" + key + "\n" + size + "\n" + checksum + "\n" + tag + "\n";
}

// A failed check: `damaged` entries are deleted, others (unauthenticated) only refused. An entry
// an older torchtpu wrote is deleted without a warning: upgrading is not damage.
struct Problem {
  std::string what;
  bool damaged = true;
  bool expected = false;
};

// The payload of a well-formed, authentic entry for `key`, else what is wrong with it.
std::optional<std::string> parse(const std::string& key, const std::string& file, const std::string& auth_key,
                                 Problem& problem) {
  std::istringstream in(file);
  std::string magic, stored_key, size, checksum, tag;
  if (!std::getline(in, magic) || magic != kMagic)
    return problem = {"unknown format", true, magic.rfind(kFormatName, 0) == 0}, std::nullopt;
  if (!std::getline(in, stored_key) || stored_key != key) return problem = {"wrong key"}, std::nullopt;
  if (!std::getline(in, size) || !std::getline(in, checksum) || !std::getline(in, tag))
    return problem = {"truncated header"}, std::nullopt;
  size_t start = static_cast<size_t>(in.tellg());
  std::string payload = file.substr(start);
  if (std::to_string(payload.size()) != size)
    return problem = {"truncated (" + std::to_string(payload.size()) + " of " + size + " bytes)"}, std::nullopt;
  if (sha256_hex(payload) != checksum) return problem = {"checksum mismatch"}, std::nullopt;
  if (!auth_key.empty() && tag != hmac_sha256_hex(auth_key, authenticated_part(key, size, checksum)))
    return problem = {"it fails authentication with TORCHTPU_CACHE_KEY", false}, std::nullopt;
  return payload;
}

std::optional<std::string> read_all(int fd) {
  std::string out;
  char buffer[1 << 16];
  for (ssize_t n; (n = ::read(fd, buffer, sizeof(buffer))) != 0;) {
    if (n < 0) return std::nullopt;
    out.append(buffer, static_cast<size_t>(n));
  }
  return out;
}

bool write_all(int fd, const std::string& data) {
  for (size_t done = 0; done < data.size();) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n <= 0) return false;  // a full disk or ulimit -f (Python ignores SIGXFSZ) ends here
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

std::string DiskCache::path_of(const std::string& key) const { return dir_ + "/" + key + kSuffix; }

void DiskCache::warn_unwritable() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!warned_unwritable_) warn("compile cache directory " + dir_ + " is not writable (or full); entries are not saved there");
  warned_unwritable_ = true;
}

void DiskCache::forget_directory() {
  std::lock_guard<std::mutex> lock(mu_);
  checked_directory_ = false;
}

bool DiskCache::usable_directory() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (checked_directory_) return directory_ok_;
  }
  std::error_code ec;
  fs::create_directories(fs::path(dir_).parent_path(), ec);
  ::mkdir(dir_.c_str(), options_.private_to_user ? 0700 : 0755);  // when it exists already, checked below
  struct stat st {};
  if (::stat(dir_.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    warn_unwritable();
    return false;  // not remembered: the directory may appear later
  }
  std::string problem;
  if (options_.private_to_user && st.st_uid != options_.owner)
    problem = "belongs to uid " + std::to_string(st.st_uid);
  else if (options_.private_to_user && (st.st_mode & (S_IWGRP | S_IWOTH)))
    problem = "is writable by other users";
  if (!problem.empty())
    warn("compile cache directory " + dir_ + " " + problem +
         "; it is not used (cached executables are code this process would run). Make it private (chmod 700) "
         "or choose another TORCHTPU_CACHE_DIR");
  std::lock_guard<std::mutex> lock(mu_);
  checked_directory_ = true;
  directory_ok_ = problem.empty();
  return directory_ok_;
}

std::string DiskCache::untrusted(int fd) const {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return "it cannot be inspected";
  if (!options_.private_to_user) return "";
  if (st.st_uid != options_.owner) return "it belongs to uid " + std::to_string(st.st_uid);
  if (st.st_mode & (S_IWGRP | S_IWOTH)) return "other users can write it";
  return "";
}

std::optional<std::string> DiskCache::load(const std::string& key) {
  if (options_.private_to_user && !usable_directory()) return std::nullopt;
  int fd = ::open(path_of(key).c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string refusal = untrusted(fd);
  std::optional<std::string> file = refusal.empty() ? read_all(fd) : std::nullopt;
  if (file) ::futimens(fd, nullptr);  // a hit: most recently used (may fail on others' entries: harmless)
  ::close(fd);
  if (!refusal.empty()) {
    warn("compile cache entry " + path_of(key) + " is not loaded: " + refusal + "; recompiling");
    return std::nullopt;
  }
  if (!file) return std::nullopt;
  Problem problem;
  std::optional<std::string> payload = parse(key, *file, options_.auth_key, problem);
  if (!payload && problem.damaged) {
    if (!problem.expected)
      warn("compile cache entry " + path_of(key) + " is damaged (" + problem.what + "); dropped, recompiling");
    std::error_code ignored;
    fs::remove(path_of(key), ignored);
  } else if (!payload) {
    warn("compile cache entry " + path_of(key) + " is not loaded: " + problem.what + "; recompiling");
  }
  return payload;
}

bool DiskCache::contains(const std::string& key) {
  if (options_.private_to_user && !usable_directory()) return false;
  std::error_code ignored;
  return fs::exists(path_of(key), ignored);
}

bool DiskCache::store(const std::string& key, const std::string& payload) {
  static std::atomic<uint64_t> counter{0};
  std::string tmp = dir_ + "/" + kTempPrefix + std::to_string(getpid()) + "-" + std::to_string(counter++) + "-" + key;
  auto create = [&] {
    return ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, options_.private_to_user ? 0600 : 0644);
  };
  if (!usable_directory()) return false;
  int fd = create();
  if (fd < 0 && errno == ENOENT) {  // the directory vanished: make it again
    forget_directory();
    fd = usable_directory() ? create() : -1;
  }
  bool written = fd >= 0 && write_all(fd, header(key, payload, options_.auth_key) + payload);
  if (fd >= 0) ::close(fd);
  std::error_code ec;
  if (!written) {
    fs::remove(tmp, ec);
    warn_unwritable();
    return false;
  }
  fs::rename(tmp, path_of(key), ec);  // atomic: readers see all of an entry or none
  if (ec) fs::remove(tmp, ec);
  if (options_.max_bytes > 0) evict_least_recently_used();
  return !ec;
}

// Deletes the least recently used entries until the directory holds at most 90 % of the bound
// (so that not every store scans and deletes), and temporary files a killed writer left behind.
void DiskCache::evict_least_recently_used() const {
  struct Entry {
    fs::path path;
    fs::file_time_type used;
    int64_t bytes;
  };
  std::vector<Entry> entries;
  int64_t total = 0;
  std::error_code ec;
  auto stale = fs::file_time_type::clock::now() - std::chrono::hours(1);
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    std::error_code gone;  // another process may delete files while we look
    Entry entry{e.path(), e.last_write_time(gone), static_cast<int64_t>(e.file_size(gone))};
    if (gone) continue;
    bool temporary = entry.path.filename().string().rfind(kTempPrefix, 0) == 0;
    if (temporary && entry.used < stale) fs::remove(entry.path, gone);
    if (temporary || entry.path.extension() != kSuffix) continue;
    total += entry.bytes;
    entries.push_back(std::move(entry));
  }
  if (total <= options_.max_bytes) return;
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.used < b.used; });
  for (const Entry& entry : entries) {
    if (total <= options_.max_bytes * 9 / 10) break;
    std::error_code gone;
    fs::remove(entry.path, gone);
    total -= entry.bytes;
  }
}

void DiskCache::clear() const {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir_, ec))
    if (e.path().extension() == kSuffix) fs::remove(e.path(), ec);
}

}  // namespace torchtpu::exec
