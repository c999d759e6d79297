// Pinned host memory: page-aligned host blocks, each registered with the device for direct
// transfers where the PJRT plugin can (PJRT_Client_DmaMap: GPU plugins page-lock it). The CPU
// plugin's device memory is host memory, so there the blocks are only aligned and tracked.
#include "aten/pinned_memory.h"

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <iterator>
#include <exception>
#include <map>
#include <mutex>
#include <vector>

#include <ATen/core/CachingHostAllocator.h>

#include "exec/runtime_context.h"

namespace torchtpu::aten {
namespace {

constexpr size_t kPage = 4096;

struct Block {
  size_t size;
  bool dma_mapped;
  int reads_in_flight = 0;  // asynchronous transfers still reading the block
  bool released = false;    // its tensor's storage is gone; freed once no transfer reads it
};

// Leaked on purpose: blocks may outlive static destruction (a pinned tensor held at exit).
std::mutex& blocks_mutex() { static auto* m = new std::mutex; return *m; }
std::map<const char*, Block>& blocks() { static auto* b = new std::map<const char*, Block>; return *b; }
// Blocks whose last transfer finished after their storage was released: freed by the next
// allocation or release on a user thread, not on the PJRT thread that reports the transfer.
std::vector<void*>& unread() { static auto* v = new std::vector<void*>; return *v; }

void free_block(void* data, bool mapped) {
  if (mapped) {
    try {
      exec::client().dma_unmap(data);
    } catch (const std::exception&) {  // a deleter must not throw; the memory is freed regardless
    }
  }
  std::free(data);
}

// Frees the blocks the last transfers left behind; takes and drops blocks_mutex().
void free_unread() {
  std::vector<std::pair<void*, bool>> done;
  {
    std::lock_guard<std::mutex> lock(blocks_mutex());
    for (void* data : unread()) {
      auto it = blocks().find(static_cast<const char*>(data));
      done.emplace_back(data, it->second.dma_mapped);
      blocks().erase(it);
    }
    unread().clear();
  }
  for (auto [data, mapped] : done) free_block(data, mapped);
}

void release(void* data) {
  free_unread();
  bool mapped = false;
  {
    std::lock_guard<std::mutex> lock(blocks_mutex());
    auto it = blocks().find(static_cast<const char*>(data));
    if (it != blocks().end()) {
      if (it->second.reads_in_flight > 0) {  // a transfer still reads it: freed when it is done
        it->second.released = true;
        return;
      }
      mapped = it->second.dma_mapped;
      blocks().erase(it);
    }
  }
  free_block(data, mapped);
}

// The block containing `address`; blocks_mutex() held.
std::map<const char*, Block>::iterator block_of(const void* address) {
  const char* a = static_cast<const char*>(address);
  auto after = blocks().upper_bound(a);
  if (after == blocks().begin()) return blocks().end();
  auto block = std::prev(after);
  return a < block->first + block->second.size ? block : blocks().end();
}

// Also the device's host allocator for torch.accelerator (empty_host_cache, host_memory_stats):
// without one registered, torch.accelerator.empty_host_cache() crashed once the device was in use
// (vLLM calls it at shutdown). It holds no cache, so there is nothing to empty or count.
struct PinnedHostAllocator final : at::HostAllocator {
  c10::DataPtr allocate(size_t nbytes) override {
    free_unread();
    size_t size = (std::max<size_t>(nbytes, 1) + kPage - 1) / kPage * kPage;
    void* data = std::aligned_alloc(kPage, size);
    TORCH_CHECK_WITH(OutOfMemoryError, data, "pinned host memory: could not allocate ", nbytes, " bytes");
    bool mapped = exec::client().dma_map(data, size);
    {
      std::lock_guard<std::mutex> lock(blocks_mutex());
      blocks()[static_cast<const char*>(data)] = {size, mapped};
    }
    return {data, data, &release, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
  // Transfers hold their blocks themselves (hold_pinned_block), not through stream events.
  bool record_event(void*, void*, c10::Stream) override { return false; }
  void empty_cache() override { free_unread(); }
  at::HostStats get_stats() override { return {}; }
  void reset_accumulated_stats() override {}
  void reset_peak_stats() override {}
};

}  // namespace

c10::Allocator* pinned_host_allocator() {
  static PinnedHostAllocator allocator;
  return &allocator;
}

namespace {
const bool registered_host_allocator = [] {
  at::setHostAllocator(c10::DeviceType::PrivateUse1, static_cast<PinnedHostAllocator*>(pinned_host_allocator()));
  return true;
}();
}  // namespace

bool is_pinned_host_address(const void* address) {
  std::lock_guard<std::mutex> lock(blocks_mutex());
  return block_of(address) != blocks().end();
}

std::function<void()> hold_pinned_block(const void* address) {
  const char* start;
  {
    std::lock_guard<std::mutex> lock(blocks_mutex());
    auto block = block_of(address);
    TORCH_CHECK(block != blocks().end(), "hold_pinned_block: not a pinned host address");
    block->second.reads_in_flight++;
    start = block->first;
  }
  return [start] {
    std::lock_guard<std::mutex> lock(blocks_mutex());
    Block& block = blocks().at(start);
    if (--block.reads_in_flight == 0 && block.released) unread().push_back(const_cast<char*>(start));
  };
}

}  // namespace torchtpu::aten
