// Pinned host memory: page-aligned host blocks, each registered with the device for direct
// transfers where the PJRT plugin can (PJRT_Client_DmaMap: GPU plugins page-lock it). The CPU
// plugin's device memory is host memory, so there the blocks are only aligned and tracked.
#include "aten/pinned_memory.h"

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <exception>
#include <map>
#include <mutex>

#include "exec/runtime_context.h"

namespace torchtpu::aten {
namespace {

constexpr size_t kPage = 4096;

struct Block {
  size_t size;
  bool dma_mapped;
};

// Leaked on purpose: blocks may outlive static destruction (a pinned tensor held at exit).
std::mutex& blocks_mutex() { static auto* m = new std::mutex; return *m; }
std::map<const char*, Block>& blocks() { static auto* b = new std::map<const char*, Block>; return *b; }

void release(void* data) {
  bool mapped = false;
  {
    std::lock_guard<std::mutex> lock(blocks_mutex());
    auto it = blocks().find(static_cast<const char*>(data));
    if (it != blocks().end()) {
      mapped = it->second.dma_mapped;
      blocks().erase(it);
    }
  }
  if (mapped) {
    try {
      exec::client().dma_unmap(data);
    } catch (const std::exception&) {  // a deleter must not throw; the memory is freed regardless
    }
  }
  std::free(data);
}

struct PinnedHostAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
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
};

}  // namespace

c10::Allocator* pinned_host_allocator() {
  static PinnedHostAllocator allocator;
  return &allocator;
}

bool is_pinned_host_address(const void* address) {
  const char* a = static_cast<const char*>(address);
  std::lock_guard<std::mutex> lock(blocks_mutex());
  auto after = blocks().upper_bound(a);
  if (after == blocks().begin()) return false;
  auto block = std::prev(after);
  return a < block->first + block->second.size;
}

}  // namespace torchtpu::aten
