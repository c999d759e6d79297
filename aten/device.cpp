// The tpu device for PyTorch: allocator, device guard and PrivateUse1 hooks.
//
// A tpu storage's DataPtr points at (and owns) an exec::BufferRef; its address is the storage's
// data_ptr() identity and is never dereferenced on the host.
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/Allocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Float8_e4m3fn.h>
#include <torch/library.h>

#include <atomic>
#include <chrono>

#include "aten/device.h"
#include "aten/generator.h"
#include "aten/origin.h"
#include "aten/pinned_memory.h"
#include "aten/tensor_operand.h"
#include "exec/device_memory.h"
#include "exec/executor.h"
#include "exec/metrics.h"
#include "exec/runtime_context.h"
#include "hlo/float8.h"

namespace torchtpu::aten {
namespace {

thread_local c10::DeviceIndex current = 0;

void delete_buffer_ref(void* ctx) { delete static_cast<exec::BufferRef*>(ctx); }

// A storage past the device's memory limit is torch.OutOfMemoryError naming the user's line.
c10::DataPtr make_data_ptr(int device, size_t nbytes) {
  try {
    auto* ref = new exec::BufferRef(device, nbytes);
    return {ref, ref, &delete_buffer_ref, c10::Device(c10::DeviceType::PrivateUse1, device)};
  } catch (const exec::OutOfDeviceMemory& e) {
    std::string at = origin_of("allocation")->location;
    TORCH_CHECK_WITH(OutOfMemoryError, false, e.what(), at.empty() ? "" : "; the allocation is at " + at,
                     ". Free tensors that are no longer needed (del) or use smaller batches.");
  }
}

c10::DeviceIndex or_current(c10::DeviceIndex d) { return d < 0 ? current : d; }

// A DeviceAllocator so that torch.accelerator's memory API works. Storages return their PJRT
// buffers when they die, so reserved == allocated.
struct TpuAllocator final : c10::DeviceAllocator {
  c10::DataPtr allocate(size_t nbytes) override { return make_data_ptr(current, nbytes); }
  void copy_data(void*, const void*, std::size_t) const override {
    TORCH_CHECK(false, "tpu storages cannot be copied byte-wise on the host; use Tensor.copy_()");
  }
  bool initialized() override { return true; }
  // No cache of free blocks: running pending work releases what only pending programs held.
  void emptyCache(c10::MempoolId_t) override {
    for (c10::DeviceIndex d = 0; d < device_count(); ++d) synchronize_device(d, "empty_cache");
  }
  void recordStream(const c10::DataPtr&, c10::Stream) override {}  // one ordered stream per device
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    exec::DeviceMemory m = exec::device_memory(or_current(device));
    c10::CachingDeviceAllocator::DeviceStats stats;
    constexpr auto all = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    for (auto* bytes : {&stats.allocated_bytes, &stats.reserved_bytes, &stats.active_bytes, &stats.requested_bytes})
      (*bytes)[all] = {m.allocated, m.peak, m.allocated_total, m.freed_total};
    stats.allocation[all] = {m.allocations, m.peak_allocations, m.num_allocs, m.num_frees};
    stats.num_ooms = m.num_ooms;
    return stats;
  }
  void resetAccumulatedStats(c10::DeviceIndex device) override {
    exec::reset_accumulated_device_memory(or_current(device));
  }
  void resetPeakStats(c10::DeviceIndex device) override { exec::reset_peak_device_memory(or_current(device)); }
  // (free, total) bytes: under the memory limit where one is set, else the device's memory.
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    int index = or_current(device);
    exec::DeviceMemory m = exec::device_memory(index);
    if (m.limit) return {static_cast<size_t>(std::max<int64_t>(*m.limit - m.allocated, 0)), static_cast<size_t>(*m.limit)};
    auto stats = exec::device(index).memory_stats();
    int64_t total = exec::device_memory_size(index);
    int64_t used = stats ? stats->bytes_in_use : m.allocated;
    return {static_cast<size_t>(std::max<int64_t>(total - used, 0)), static_cast<size_t>(total)};
  }
};

// A recorded event: everything issued to `device` before it. Timing events wait for that work when
// recorded, so their timestamps mean something.
struct TpuEvent {
  c10::DeviceIndex device;
  std::chrono::steady_clock::time_point at;
  bool timed;
};

TpuAllocator allocator;

void check_index(c10::DeviceIndex index) {
  TORCH_CHECK(index >= 0 && index < device_count(), "invalid tpu device index ", int(index),
              ": there are ", int(device_count()), " tpu device(s)");
}

// The tpu dtype holding a PyTorch dtype; std::nullopt for those tpu tensors cannot hold.
std::optional<DType> tpu_dtype(c10::ScalarType t) {
  switch (t) {
    case c10::kBool: return DType::kBool;
    case c10::kChar: return DType::kS8;
    case c10::kShort: return DType::kS16;
    case c10::kInt: return DType::kS32;
    case c10::kLong: return DType::kS64;
    case c10::kByte: return DType::kU8;
    case c10::kUInt32: return DType::kU32;
    case c10::kUInt64: return DType::kU64;
    case c10::kHalf: return DType::kF16;
    case c10::kBFloat16: return DType::kBF16;
    case c10::kFloat: return DType::kF32;
    case c10::kDouble: return DType::kF64;
    case c10::kComplexFloat: return DType::kC64;
    case c10::kComplexDouble: return DType::kC128;
    case c10::kComplexHalf: return DType::kC32;
    case c10::kUInt16: return DType::kU16;
    case c10::kFloat8_e4m3fn: return DType::kF8E4M3FN;
    case c10::kFloat8_e5m2: return DType::kF8E5M2;
    default: return std::nullopt;
  }
}

std::atomic<int> sync_debug{0};  // torch.tpu.set_sync_debug_mode

// Conversions to float8_e4m3fn as the linked PyTorch's own: c10::Float8_e4m3fn saturates a value
// beyond ±448 (an infinity too) to ±448 since PyTorch #178817, after 2.11, which gave NaN. Asking
// the header's conversion follows whichever release this is built against.
[[maybe_unused]] const bool float8_e4m3fn_saturation = [] {
  bool saturates = !c10::Float8_e4m3fn(1000.0f).isnan();
  hlo::set_float8_e4m3fn_saturates(saturates);
  return saturates;
}();

struct TpuGuardImpl final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return c10::DeviceType::PrivateUse1; }
  c10::Device exchangeDevice(c10::Device d) const override {
    c10::Device old = getDevice();
    setDevice(d);
    return old;
  }
  c10::Device getDevice() const override { return {c10::DeviceType::PrivateUse1, current}; }
  void setDevice(c10::Device d) const override { set_current_device(d.index()); }
  void uncheckedSetDevice(c10::Device d) const noexcept override { current = d.index(); }
  c10::Stream getStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::DEFAULT, c10::Device(d.type(), or_current(d.index())));
  }
  c10::Stream exchangeStream(c10::Stream s) const override { return s; }
  c10::DeviceIndex deviceCount() const noexcept override { return device_count(); }
  void synchronizeDevice(c10::DeviceIndex index) const override { synchronize_device(index, "synchronize"); }

  // One ordered stream per device (PJRT orders a device's work by data dependencies): every stream
  // is that stream, and an event is a point in it.
  c10::Stream getDefaultStream(c10::Device d) const override { return getStream(d); }
  c10::Stream getNewStream(c10::Device d, int) const override { return getStream(d); }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool) const override { return getStream(d); }
  bool queryStream(const c10::Stream& s) const override {
    synchronizeStream(s);
    return true;
  }
  void synchronizeStream(const c10::Stream& s) const override { synchronizeDevice(s.device_index()); }
  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex, const c10::EventFlag flag) const override {
    bool timed = flag == c10::EventFlag::BACKEND_DEFAULT;
    if (timed) synchronizeStream(stream);
    delete static_cast<TpuEvent*>(*event);
    *event = new TpuEvent{stream.device_index(), std::chrono::steady_clock::now(), timed};
  }
  void block(void*, const c10::Stream&) const override {}  // the same stream: already ordered
  bool queryEvent(void* event) const override {
    synchronizeEvent(event);
    return true;
  }
  void synchronizeEvent(void* event) const override {
    if (event) synchronizeDevice(static_cast<TpuEvent*>(event)->device);
  }
  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override { delete static_cast<TpuEvent*>(event); }
  // torch.accelerator.get_device_capability: the dtypes a tpu tensor can hold.
  c10::DeviceCapability getDeviceCapability(c10::Device) const override {
    c10::DeviceCapability capability;
#define TORCHTPU_HOLDS(_, name) \
    capability.capability_data.supported_scalar_types.has_##name = tpu_dtype(c10::ScalarType::name).has_value();
    AT_FORALL_SCALAR_TYPES_WITH_COMPLEX_AND_QINTS(TORCHTPU_HOLDS)
#undef TORCHTPU_HOLDS
    return capability;
  }
  double elapsedTime(void* start, void* end, const c10::DeviceIndex) const override {
    auto* a = static_cast<TpuEvent*>(start);
    auto* b = static_cast<TpuEvent*>(end);
    TORCH_CHECK(a && b && a->timed && b->timed, "elapsed_time needs two events recorded with enable_timing=True");
    return std::chrono::duration<double, std::milli>(b->at - a->at).count();
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, TpuGuardImpl);

// tensor.record_stream(s) keeps CUDA's caching allocator from reusing the memory before s's work is
// done. A tpu storage's PJRT buffer outlives the work that reads it, and every stream is the
// device's one stream: nothing to record.
void record_stream(at::Tensor&, c10::Stream) {}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) { m.impl("record_stream", record_stream); }

struct TpuHooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return is_available(); }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  c10::DeviceIndex deviceCount() const override { return device_count(); }
  void setCurrentDevice(c10::DeviceIndex d) const override { set_current_device(d); }
  c10::DeviceIndex getCurrentDevice() const override { return current; }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex d) const override {
    c10::DeviceIndex old = current;
    set_current_device(d);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex d) const override {
    return exchangeDevice(d);
  }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex d) const override {
    return default_generator(d < 0 ? current : d);
  }
  at::Generator getNewGenerator(c10::DeviceIndex d) const override {
    return new_generator(d < 0 ? current : d);
  }
  c10::Allocator* getPinnedMemoryAllocator() const override { return pinned_host_allocator(); }
  bool isPinnedPtr(const void* data) const override { return is_pinned_host_address(data); }
  at::Device getDeviceFromPtr(void*) const override {
    return {c10::DeviceType::PrivateUse1, current};
  }
  // FSDP2 frees parameters with untyped_storage().resize_(0) and re-grows them later.
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    auto& ref = *static_cast<exec::BufferRef*>(storage.data_ptr().get_context());
    c10::DataPtr fresh = make_data_ptr(ref.device(), newsize);
    auto& fresh_ref = *static_cast<exec::BufferRef*>(fresh.get_context());
    size_t keep = std::min(ref.nbytes(), newsize);
    if (keep > 0 && ref.value()) {
      std::vector<char> bytes(ref.nbytes());
      download_to_host(ref, bytes.data(), "storage resize");
      bytes.resize(newsize, 0);
      // Keep the element type the storage's users read it as (an out= grown by an op, resize_).
      DType dtype = ref.value()->dtype();
      exec::upload(fresh_ref, bytes.data(), newsize % element_size(dtype) == 0 ? dtype : DType::kU8);
    }
    const_cast<c10::Storage&>(storage).set_data_ptr_noswap(std::move(fresh));
    const_cast<c10::Storage&>(storage).set_nbytes(newsize);
  }
};

}  // namespace

c10::DeviceIndex device_count() {
  exec::refuse_if_forked();  // "0 devices" would hide why
  try {
    return static_cast<c10::DeviceIndex>(exec::client().devices().size());
  } catch (const std::exception&) {
    return 0;  // no plugin: is_available() is False, and the first op says why
  }
}

bool is_available() {
  // Before the runtime starts, a usable plugin on disk is the answer: asking for devices would
  // load and initialize it (seconds on a GPU or TPU), which an availability probe must not do.
  return exec::client_started() ? device_count() > 0 : exec::plugin_present();
}

c10::DeviceIndex current_device() { return current; }

void set_current_device(c10::DeviceIndex index) {
  check_index(index);
  current = index;
}

c10::Allocator* tpu_allocator() { return &allocator; }

void set_sync_debug_mode(int mode) {
  TORCH_CHECK(mode >= 0 && mode <= 2, "invalid value of debug_mode, expected one of 0, 1, 2 (got ", mode, ")");
  sync_debug = mode;
}
int sync_debug_mode() { return sync_debug; }

void warn_or_error_on_sync(const std::string& reason) {
  if (sync_debug == 0) return;
  TORCH_CHECK(sync_debug != 2, "called a synchronizing tpu operation (", reason, ")");
  TORCH_WARN("called a synchronizing tpu operation (", reason, ")");
}

void register_device() {
  c10::SetAllocator(c10::DeviceType::PrivateUse1, &allocator);
  static TpuHooks hooks;
  at::RegisterPrivateUse1HooksInterface(&hooks);
}

// ---- the tensor bridge ----

DType to_dtype(c10::ScalarType t) {
  std::optional<DType> dtype = tpu_dtype(t);
  TORCH_CHECK_TYPE(dtype, "tpu tensors do not support dtype ", t);
  return *dtype;
}

exec::BufferRef& buffer_ref(const at::Tensor& t) {
  const c10::DataPtr& data = t.storage().data_ptr();
  if (void* owner = data.get_context()) return *static_cast<exec::BufferRef*>(owner);
  // A storage PyTorch made around a tpu storage's address (at::from_blob: pickling a tpu tensor
  // does this) has no owner of ours; the address is the owning storage's BufferRef.
  TORCH_CHECK(exec::BufferRef::lives_at(data.get()), "a tpu tensor's storage at ", data.get(),
              " was not allocated by torchtpu (or was freed); tpu storages cannot wrap other memory");
  return *static_cast<exec::BufferRef*>(data.get());
}

exec::Operand operand(const at::Tensor& t) {
  return {&buffer_ref(t),
          {to_dtype(t.scalar_type()), t.sizes().vec(), t.strides().vec(), t.storage_offset()}};
}

void check_tpu(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.device().type() == c10::DeviceType::PrivateUse1, "expected ", what,
              " on the tpu device, got a tensor on ", t.device());
}

}  // namespace torchtpu::aten
