#include "exec/prefetch.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "exec/sha256.h"

namespace torchtpu::exec {
namespace fs = std::filesystem;

namespace {

// argv of this process, NUL-separated (Linux); empty elsewhere.
std::string command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

bool is_key(const std::string& line) {
  return line.size() == 64 && line.find_first_not_of("0123456789abcdef") == std::string::npos;
}

// Every command line gets a manifest: keep the kMaxManifests most recently written.
void forget_oldest_manifests(const fs::path& dir) {
  constexpr size_t kMaxManifests = 256;
  std::vector<std::pair<fs::file_time_type, fs::path>> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::error_code gone;
    files.emplace_back(e.last_write_time(gone), e.path());
  }
  if (files.size() <= kMaxManifests) return;
  std::sort(files.begin(), files.end());
  for (size_t i = 0; i + kMaxManifests < files.size(); ++i) fs::remove(files[i].second, ec);
}

}  // namespace

std::string workload_manifest_path(const std::string& dir, const std::string& fingerprint) {
  std::error_code ignored;
  std::string cwd = fs::current_path(ignored).string();
  return dir + "/workloads/" + sha256_hex(cwd + '\0' + command_line() + '\0' + fingerprint);
}

std::vector<std::string> read_manifest(const std::string& path) {
  std::vector<std::string> keys;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line) && keys.size() < UsedKeys::kMaxKeys;)
    if (is_key(line)) keys.push_back(line);  // a damaged line names nothing
  return keys;
}

bool write_manifest(const std::string& path, const std::vector<std::string>& keys) {
  std::error_code ec;
  fs::path target(path);
  // Private to the user, as the cache's executables are: a manifest names what a command ran.
  if (fs::create_directories(target.parent_path(), ec)) fs::permissions(target.parent_path(), fs::perms::owner_all, ec);
  std::string tmp = path + ".tmp-" + std::to_string(getpid());
  bool complete;
  {
    std::ofstream out(tmp, std::ios::trunc);
    fs::permissions(tmp, fs::perms::owner_read | fs::perms::owner_write, ec);
    for (const std::string& key : keys) out << key << '\n';
    complete = static_cast<bool>(out.flush());
  }
  if (!complete) {  // a full disk: leave nothing behind
    fs::remove(tmp, ec);
    return false;
  }
  fs::rename(tmp, target, ec);  // readers see the old list or the new one
  bool written = !ec;
  if (!written) fs::remove(tmp, ec);
  forget_oldest_manifests(target.parent_path());
  return written;
}

}  // namespace torchtpu::exec
