#include "runtime/buffer.h"

#include <stdexcept>
#include <string>

#include "runtime/error.h"
#include "runtime/pjrt_args.h"

namespace torchtpu::runtime {
namespace {

struct TypePair {
  DType dtype;
  PJRT_Buffer_Type pjrt;
};
constexpr TypePair kTypes[] = {
    {DType::kBool, PJRT_Buffer_Type_PRED}, {DType::kS8, PJRT_Buffer_Type_S8},
    {DType::kS16, PJRT_Buffer_Type_S16},   {DType::kS32, PJRT_Buffer_Type_S32},
    {DType::kS64, PJRT_Buffer_Type_S64},   {DType::kU8, PJRT_Buffer_Type_U8},
    {DType::kU32, PJRT_Buffer_Type_U32},   {DType::kU64, PJRT_Buffer_Type_U64},
    {DType::kF16, PJRT_Buffer_Type_F16},   {DType::kBF16, PJRT_Buffer_Type_BF16},
    {DType::kF32, PJRT_Buffer_Type_F32},   {DType::kF64, PJRT_Buffer_Type_F64},
    {DType::kC64, PJRT_Buffer_Type_C64},   {DType::kC128, PJRT_Buffer_Type_C128},
    {DType::kC32, PJRT_Buffer_Type_U32},  // float16 pairs in 32-bit words; from_pjrt finds kU32 first
    {DType::kU16, PJRT_Buffer_Type_U16},   {DType::kF8E4M3FN, PJRT_Buffer_Type_F8E4M3FN},
    {DType::kF8E5M2, PJRT_Buffer_Type_F8E5M2},
};

}  // namespace

PJRT_Buffer_Type to_pjrt(DType t) { return kTypes[static_cast<size_t>(t)].pjrt; }

DType from_pjrt(PJRT_Buffer_Type t) {
  for (const TypePair& p : kTypes)
    if (p.pjrt == t) return p.dtype;
  throw std::runtime_error("PJRT buffer type " + std::to_string(t) + " is not supported");
}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    this->~Buffer();
    api_ = other.api_;
    buffer_ = other.buffer_;
    other.buffer_ = nullptr;
  }
  return *this;
}

Buffer::~Buffer() {
  if (!buffer_) return;
  PJRT_ARGS(PJRT_Buffer_Destroy_Args, args);
  args.buffer = buffer_;
  api_->PJRT_Buffer_Destroy(&args);
  buffer_ = nullptr;
}

DType Buffer::dtype() const {
  PJRT_ARGS(PJRT_Buffer_ElementType_Args, args);
  args.buffer = buffer_;
  check(api_, api_->PJRT_Buffer_ElementType(&args), "PJRT_Buffer_ElementType");
  return from_pjrt(args.type);
}

std::vector<int64_t> Buffer::dims() const {
  PJRT_ARGS(PJRT_Buffer_Dimensions_Args, args);
  args.buffer = buffer_;
  check(api_, api_->PJRT_Buffer_Dimensions(&args), "PJRT_Buffer_Dimensions");
  return std::vector<int64_t>(args.dims, args.dims + args.num_dims);
}

int64_t Buffer::element_count() const {
  int64_t n = 1;
  for (int64_t d : dims()) n *= d;
  return n;
}

size_t Buffer::on_device_size() const {
  PJRT_ARGS(PJRT_Buffer_OnDeviceSizeInBytes_Args, args);
  args.buffer = buffer_;
  check(api_, api_->PJRT_Buffer_OnDeviceSizeInBytes(&args), "PJRT_Buffer_OnDeviceSizeInBytes");
  return args.on_device_size_in_bytes;
}

PJRT_Device* Buffer::device() const {
  PJRT_ARGS(PJRT_Buffer_Device_Args, args);
  args.buffer = buffer_;
  check(api_, api_->PJRT_Buffer_Device(&args), "PJRT_Buffer_Device");
  return args.device;
}

Event Buffer::copy_to_host_async(void* dst, size_t size) const {
  if (size != byte_size())
    throw std::invalid_argument("copy_to_host: destination has " + std::to_string(size) +
                                " bytes, the buffer holds " + std::to_string(byte_size()));
  // Ask for dense row-major data explicitly: without a host layout PJRT copies in the device's own
  // layout, which is tiled on TPUs.
  size_t rank = dims().size();
  std::vector<int64_t> minor_to_major(rank);
  for (size_t i = 0; i < rank; ++i) minor_to_major[i] = static_cast<int64_t>(rank - 1 - i);
  PJRT_ARGS(PJRT_Buffer_MemoryLayout_Tiled, tiled);
  tiled.minor_to_major = minor_to_major.data();
  tiled.minor_to_major_size = rank;
  PJRT_ARGS(PJRT_Buffer_MemoryLayout, layout);
  layout.tiled = tiled;
  layout.type = PJRT_Buffer_MemoryLayout_Type_Tiled;

  PJRT_ARGS(PJRT_Buffer_ToHostBuffer_Args, args);
  args.src = buffer_;
  args.host_layout = &layout;
  args.dst = dst;
  args.dst_size = size;
  check(api_, api_->PJRT_Buffer_ToHostBuffer(&args), "PJRT_Buffer_ToHostBuffer");
  return Event(api_, args.event);
}

Event Buffer::ready_event() const {
  PJRT_ARGS(PJRT_Buffer_ReadyEvent_Args, args);
  args.buffer = buffer_;
  check(api_, api_->PJRT_Buffer_ReadyEvent(&args), "PJRT_Buffer_ReadyEvent");
  return Event(api_, args.event);
}

}  // namespace torchtpu::runtime
