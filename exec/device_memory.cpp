#include "exec/device_memory.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <mutex>

#include "exec/byte_size.h"
#include "exec/runtime_context.h"

namespace torchtpu::exec {
namespace {

constexpr int kMaxDevices = 64;
constexpr int64_t kNoLimit = -1, kUnread = -2;

struct Ledger {
  std::atomic<int64_t> allocated{0}, peak{0}, allocations{0}, peak_allocations{0};
  std::atomic<int64_t> allocated_total{0}, freed_total{0}, num_allocs{0}, num_frees{0}, num_ooms{0};
  std::atomic<int64_t> limit{kUnread};
  std::mutex limit_mu;  // guards the first read of the limit and `limit_source`
  std::string limit_source;
};

Ledger& ledger(int device) {
  static Ledger ledgers[kMaxDevices];
  return ledgers[device >= 0 && device < kMaxDevices ? device : 0];
}

void raise_max(std::atomic<int64_t>& max, int64_t value) {
  int64_t prev = max;
  while (value > prev && !max.compare_exchange_weak(prev, value)) {}
}

// The limit in bytes, or kNoLimit; TORCHTPU_MEMORY_LIMIT is read when the device's memory is first
// allocated or inspected.
int64_t limit_of(int device, Ledger& l) {
  int64_t limit = l.limit.load(std::memory_order_acquire);
  if (limit != kUnread) return limit;
  std::lock_guard<std::mutex> lock(l.limit_mu);
  if (l.limit.load() != kUnread) return l.limit.load();
  const char* text = std::getenv("TORCHTPU_MEMORY_LIMIT");
  limit = text && *text ? parse_memory_limit(text, device_memory_size(device)) : kNoLimit;
  l.limit_source = text && *text ? std::string("TORCHTPU_MEMORY_LIMIT=") + text : "";
  l.limit.store(limit, std::memory_order_release);
  return limit;
}

[[noreturn]] void out_of_memory(int device, Ledger& l, int64_t request, int64_t in_use, int64_t limit) {
  l.num_ooms++;
  std::string source;
  {
    std::lock_guard<std::mutex> lock(l.limit_mu);
    source = l.limit_source;
  }
  throw OutOfDeviceMemory("tpu:" + std::to_string(device) + " out of memory: tried to allocate " +
                          format_bytes(request) + "; tensors hold " + format_bytes(in_use) + " in " +
                          std::to_string(l.allocations.load()) + " storages and the limit is " +
                          format_bytes(limit) + " (" + source + ")");
}

}  // namespace

void allocate_device_bytes(int device, int64_t nbytes) {
  if (nbytes == 0) return;
  Ledger& l = ledger(device);
  int64_t limit = limit_of(device, l);
  int64_t now = l.allocated.load();
  do {
    if (limit != kNoLimit && now + nbytes > limit) out_of_memory(device, l, nbytes, now, limit);
  } while (!l.allocated.compare_exchange_weak(now, now + nbytes));
  raise_max(l.peak, now + nbytes);
  raise_max(l.peak_allocations, ++l.allocations);
  l.allocated_total += nbytes;
  l.num_allocs++;
}

void free_device_bytes(int device, int64_t nbytes) {
  if (nbytes == 0) return;
  Ledger& l = ledger(device);
  l.allocated -= nbytes;
  l.allocations--;
  l.freed_total += nbytes;
  l.num_frees++;
}

DeviceMemory device_memory(int device) {
  Ledger& l = ledger(device);
  DeviceMemory m{l.allocated, l.peak, l.allocations, l.peak_allocations, l.allocated_total,
                 l.freed_total, l.num_allocs, l.num_frees, l.num_ooms, std::nullopt, ""};
  int64_t limit = limit_of(device, l);
  if (limit != kNoLimit) {
    m.limit = limit;
    std::lock_guard<std::mutex> lock(l.limit_mu);
    m.limit_source = l.limit_source;
  }
  return m;
}

void reset_peak_device_memory(int device) {
  Ledger& l = ledger(device);
  l.peak = l.allocated.load();
  l.peak_allocations = l.allocations.load();
}

void reset_accumulated_device_memory(int device) {
  Ledger& l = ledger(device);
  l.allocated_total = 0, l.freed_total = 0, l.num_allocs = 0, l.num_frees = 0, l.num_ooms = 0;
}

void set_device_memory_limit(int device, std::optional<int64_t> bytes, const std::string& source) {
  Ledger& l = ledger(device);
  std::lock_guard<std::mutex> lock(l.limit_mu);
  l.limit_source = bytes ? source : "";
  l.limit = bytes ? *bytes : kNoLimit;
}

int64_t device_memory_size(int device) {
  if (auto stats = exec::device(device).memory_stats(); stats && stats->bytes_limit) return *stats->bytes_limit;
  return static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
}

int64_t parse_memory_limit(const std::string& text, int64_t size) {
  char* end = nullptr;
  double number = std::strtod(text.c_str(), &end);
  bool plain_number = end != text.c_str() && *end == '\0';
  if (plain_number && number > 0 && number <= 1) return static_cast<int64_t>(number * static_cast<double>(size));
  if (auto bytes = parse_byte_size(text)) return *bytes;
  throw std::invalid_argument("TORCHTPU_MEMORY_LIMIT='" + text +
                              "' is neither a byte size (8GB, 512MiB, 1000000) nor a fraction of the device's "
                              "memory (0.5)");
}

}  // namespace torchtpu::exec
