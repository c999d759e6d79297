// The compile cache's memory tier: a bounded map of loaded executables, least recently used first
// out. Besides its capacity it keeps the process's memory mappings (a few per loaded XLA CPU
// executable, see memory_maps.h) below 3/4 of the kernel's limit, checked every kMapsCheckEvery
// insertions: past it, the older half goes. A template so tests can hold plain values.
#pragma once

#include <cstddef>
#include <functional>
#include <list>
#include <string>
#include <unordered_map>
#include <utility>

#include "exec/memory_maps.h"

namespace torchtpu::exec {

template <typename Ptr>
class MemoryTier {
 public:
  static constexpr size_t kMapsCheckEvery = 64;

  explicit MemoryTier(size_t capacity, std::function<MemoryMaps()> maps = memory_maps)
      : capacity_(capacity), maps_(std::move(maps)) {}

  Ptr find(const std::string& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    order_.splice(order_.begin(), order_, it->second);
    return it->second->second;
  }
  void insert(const std::string& key, Ptr value) {
    if (find(key)) return;
    order_.emplace_front(key, std::move(value));
    index_[key] = order_.begin();
    if (order_.size() > capacity_) evict_to(capacity_);
    if (++inserted_ % kMapsCheckEvery == 0) {
      MemoryMaps maps = maps_();
      if (maps.limit && maps.in_use > maps.limit / 4 * 3) evict_to(order_.size() / 2);
    }
  }
  // Puts `value` in place of what `key` holds (a promoted program for its quick one).
  void replace(const std::string& key, Ptr value) {
    if (auto it = index_.find(key); it != index_.end()) {
      order_.erase(it->second);
      index_.erase(it);
    }
    insert(key, std::move(value));
  }
  bool contains(const std::string& key) const { return index_.count(key) > 0; }
  size_t size() const { return order_.size(); }
  void clear() {
    order_.clear();
    index_.clear();
  }

 private:
  void evict_to(size_t size) {
    while (order_.size() > size) {
      index_.erase(order_.back().first);
      order_.pop_back();
    }
  }

  size_t capacity_;
  std::function<MemoryMaps()> maps_;
  size_t inserted_ = 0;
  std::list<std::pair<std::string, Ptr>> order_;
  std::unordered_map<std::string, typename std::list<std::pair<std::string, Ptr>>::iterator> index_;
};

}  // namespace torchtpu::exec
