// Cold start: a new process with a warm persistent cache loads, on background threads, the
// executables the same command used the last time it ran, in the order it first needed them, so
// that the caller finds each one deserialized (or being deserialized) when it gets there.
//
// The workload's manifest is the list of persistent keys a process used, in first-use order (at
// most kMaxKeys: the start-up is what matters). It is named by the command line and the working
// directory, which is what "the same command run again" means, and written when the process exits.
// TORCHTPU_CACHE_PREFETCH=0 turns prefetching off.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace torchtpu::exec {

// The file that holds the manifest of the running command in cache directory `dir`, for the
// compile environment `fingerprint` (another plugin or option set is another workload).
std::string workload_manifest_path(const std::string& dir, const std::string& fingerprint);
// The keys in `path` (none when it is missing or unreadable).
std::vector<std::string> read_manifest(const std::string& path);
// Replaces `path` atomically; false when it cannot be written (prefetching is an optimization: the
// caller does not warn).
bool write_manifest(const std::string& path, const std::vector<std::string>& keys);

// The keys one process used, in first-use order, at most kMaxKeys.
class UsedKeys {
 public:
  static constexpr size_t kMaxKeys = 1024;
  void note(const std::string& key) {
    std::lock_guard<std::mutex> lock(mu_);
    if (order_.size() < kMaxKeys && seen_.insert(key).second) order_.push_back(key);
  }
  std::vector<std::string> keys() {
    std::lock_guard<std::mutex> lock(mu_);
    return order_;
  }

 private:
  std::mutex mu_;
  std::vector<std::string> order_;
  std::unordered_set<std::string> seen_;
};

// Loads keys in order on background threads. A template so tests can load plain values.
template <typename Ptr>
class Prefetcher {
 public:
  using Load = std::function<Ptr(const std::string& key)>;  // null when the key does not load

  ~Prefetcher() { stop(); }

  void start(std::vector<std::string> keys, Load load, int threads) {
    std::lock_guard<std::mutex> lock(mu_);
    pid_ = getpid();
    order_ = std::move(keys);
    load_ = std::move(load);
    for (const std::string& key : order_) slots_.emplace(key, Slot{});
    for (int i = 0; i < threads && !order_.empty(); ++i) workers_.emplace_back([this] { work(); });
  }

  // The prefetched value for `key`, waiting while a worker loads it; null when it is not among the
  // keys, did not load, or no worker got to it yet (the caller then loads it itself, and the
  // workers skip it).
  Ptr take(const std::string& key) {
    if (forked()) return nullptr;
    std::unique_lock<std::mutex> lock(mu_);
    auto it = slots_.find(key);
    if (it == slots_.end()) return nullptr;
    if (it->second.state == State::kLoading) {
      loaded_.wait(lock, [&] { return it->second.state != State::kLoading; });
    }
    Ptr value = std::move(it->second.value);
    if (it->second.state == State::kQueued) taken_early_++;
    slots_.erase(it);
    return value;
  }

  // Workers finish the load in hand and stop (at exit: nothing may deserialize under a plugin
  // being destroyed).
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    if (forked()) {  // the workers are the parent's threads: nothing to join (and none may be)
      new std::vector<std::thread>(std::move(workers_));
      return;
    }
    for (std::thread& t : workers_) t.join();
    workers_.clear();
  }

  // The process that started the workers (0 before start).
  pid_t started_by() const { return pid_; }

  // How many keys were asked for before a worker reached them.
  size_t taken_early() {
    std::lock_guard<std::mutex> lock(mu_);
    return taken_early_;
  }

 private:
  enum class State { kQueued, kLoading, kDone };
  struct Slot {
    State state = State::kQueued;
    Ptr value = nullptr;
  };

  void work() {
    for (;;) {
      std::unique_lock<std::mutex> lock(mu_);
      while (next_ < order_.size() && !queued(order_[next_])) ++next_;
      if (stopping_ || next_ == order_.size()) return;
      std::string key = order_[next_++];
      slots_[key].state = State::kLoading;
      lock.unlock();
      Ptr value = nullptr;
      try {
        value = load_(key);
      } catch (...) {
        // the caller loads it again and sees the error there
      }
      lock.lock();
      auto it = slots_.find(key);
      if (it != slots_.end()) it->second = Slot{State::kDone, std::move(value)};
      loaded_.notify_all();
    }
  }
  bool forked() const { return pid_ != 0 && pid_ != getpid(); }
  bool queued(const std::string& key) const {  // with mu_ held
    auto it = slots_.find(key);
    return it != slots_.end() && it->second.state == State::kQueued;
  }

  std::mutex mu_;
  std::condition_variable loaded_;
  std::vector<std::string> order_;
  size_t next_ = 0;
  std::unordered_map<std::string, Slot> slots_;
  Load load_;
  std::vector<std::thread> workers_;
  bool stopping_ = false;
  size_t taken_early_ = 0;
  pid_t pid_ = 0;
};

}  // namespace torchtpu::exec
