// Tensor views and their DLPack import. Nothing here touches the GPU: a view is only a pointer with
// metadata, so it is built and checked on the CPU.
#include "ssmjit/tensor.h"

#include <string>

#include "ssmjit/error.h"

#if __has_include(<dlpack/dlpack.h>)
#include <dlpack/dlpack.h>
#define SSMJIT_HAVE_DLPACK_H 1
#endif

namespace ssmjit {

namespace {

// DLPack's codes (stable since 0.6); checked against dlpack.h where it is installed.
constexpr int kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3, kDLOpenCL = 4, kDLVulkan = 7, kDLMetal = 8, kDLVPI = 9,
              kDLROCM = 10, kDLROCMHost = 11, kDLExtDev = 12, kDLCUDAManaged = 13, kDLOneAPI = 14, kDLWebGPU = 15,
              kDLHexagon = 16;
constexpr int kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLOpaqueHandle = 3, kDLBfloat = 4, kDLComplex = 5, kDLBool = 6;

#ifdef SSMJIT_HAVE_DLPACK_H
static_assert(kDLCPU == ::kDLCPU && kDLCUDA == ::kDLCUDA && kDLCUDAManaged == ::kDLCUDAManaged, "DLPack device codes");
static_assert(kDLInt == ::kDLInt && kDLFloat == ::kDLFloat && kDLBfloat == ::kDLBfloat, "DLPack dtype codes");
#endif

const char* dlDeviceName(int type) {
  switch (type) {
    case kDLCPU:
      return "kDLCPU";
    case kDLCUDA:
      return "kDLCUDA";
    case kDLCUDAHost:
      return "kDLCUDAHost";
    case kDLOpenCL:
      return "kDLOpenCL";
    case kDLVulkan:
      return "kDLVulkan";
    case kDLMetal:
      return "kDLMetal";
    case kDLVPI:
      return "kDLVPI";
    case kDLROCM:
      return "kDLROCM";
    case kDLROCMHost:
      return "kDLROCMHost";
    case kDLExtDev:
      return "kDLExtDev";
    case kDLCUDAManaged:
      return "kDLCUDAManaged";
    case kDLOneAPI:
      return "kDLOneAPI";
    case kDLWebGPU:
      return "kDLWebGPU";
    case kDLHexagon:
      return "kDLHexagon";
  }
  return "unknown";
}

std::string dlDTypeString(int code, int bits, int lanes) {
  std::string base;
  switch (code) {
    case kDLInt:
      base = "int";
      break;
    case kDLUInt:
      base = "uint";
      break;
    case kDLFloat:
      base = "float";
      break;
    case kDLBfloat:
      base = "bfloat";
      break;
    case kDLComplex:
      base = "complex";
      break;
    case kDLOpaqueHandle:
      base = "opaque";
      break;
    case kDLBool:
      base = "bool";
      break;
    default:
      base = "code" + std::to_string(code) + "_";
      break;
  }
  std::string s = base + std::to_string(bits);
  if (lanes != 1) s += "x" + std::to_string(lanes);
  return s;
}

[[noreturn]] void invalid(const char* argName, const std::string& what) {
  throw Error(Error::Kind::InvalidArgument, std::string(argName) + ": " + what);
}

}  // namespace

TensorView TensorView::contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape, DeviceKind device,
                                  int deviceId) {
  if (shape.size() > static_cast<size_t>(kMaxDims))
    throw Error(Error::Kind::InvalidArgument, "TensorView::contiguous: expected at most " + std::to_string(kMaxDims) +
                                                  " dimensions, got " + std::to_string(shape.size()));
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.ndim = static_cast<int>(shape.size());
  v.device = device;
  v.deviceId = deviceId;
  int d = 0;
  for (int64_t s : shape) {
    if (s < 0)
      throw Error(Error::Kind::InvalidArgument, "TensorView::contiguous: expected sizes >= 0, got " +
                                                    std::to_string(s) + " at dim " + std::to_string(d));
    v.shape[d++] = s;
  }
  int64_t stride = 1;
  for (int i = v.ndim - 1; i >= 0; --i) {
    v.strides[i] = stride;
    // A zero-size dim keeps later strides meaningful (as PyTorch does).
    stride *= v.shape[i] > 0 ? v.shape[i] : 1;
  }
  return v;
}

TensorView TensorView::fromDLPackFields(const DLPackFields& t, const char* argName) {
  if (!argName) argName = "tensor";
  TensorView v;
  switch (t.deviceType) {
    case kDLCUDA:
      v.device = DeviceKind::CUDA;
      break;
    case kDLCPU:
      v.device = DeviceKind::CPU;
      break;
    default:
      invalid(argName, std::string("expected a kDLCUDA or kDLCPU tensor, got device type ") +
                           dlDeviceName(t.deviceType) + " (" + std::to_string(t.deviceType) + ")");
  }
  v.deviceId = t.deviceId;

  bool ok = t.dtypeLanes == 1;
  if (ok) {
    if (t.dtypeCode == kDLFloat && t.dtypeBits == 32)
      v.dtype = DType::F32;
    else if (t.dtypeCode == kDLFloat && t.dtypeBits == 16)
      v.dtype = DType::F16;
    else if (t.dtypeCode == kDLBfloat && t.dtypeBits == 16)
      v.dtype = DType::BF16;
    else if (t.dtypeCode == kDLInt && t.dtypeBits == 32)
      v.dtype = DType::I32;
    else if (t.dtypeCode == kDLInt && t.dtypeBits == 64)
      v.dtype = DType::I64;
    else
      ok = false;
  }
  if (!ok)
    invalid(argName, "expected dtype float32, float16, bfloat16, int32 or int64 (1 lane), got " +
                         dlDTypeString(t.dtypeCode, t.dtypeBits, t.dtypeLanes));

  if (t.ndim < 0 || t.ndim > kMaxDims)
    invalid(argName, "expected 0 to " + std::to_string(kMaxDims) + " dimensions, got " + std::to_string(t.ndim));
  v.ndim = t.ndim;
  if (v.ndim > 0 && !t.shape) invalid(argName, "DLTensor has ndim " + std::to_string(t.ndim) + " but no shape");
  for (int i = 0; i < v.ndim; ++i) {
    if (t.shape[i] < 0)
      invalid(argName, "expected sizes >= 0, got " + std::to_string(t.shape[i]) + " at dim " + std::to_string(i));
    v.shape[i] = t.shape[i];
  }
  if (t.strides) {
    for (int i = 0; i < v.ndim; ++i) v.strides[i] = t.strides[i];
  } else {
    // DLPack: strides == nullptr means compact row-major.
    int64_t stride = 1;
    for (int i = v.ndim - 1; i >= 0; --i) {
      v.strides[i] = stride;
      stride *= v.shape[i] > 0 ? v.shape[i] : 1;
    }
  }

  if (!t.data) {
    // An empty tensor may come without storage; a non-empty one may not.
    if (v.numel() != 0)
      invalid(argName, "DLTensor with " + std::to_string(v.numel()) + " elements has a null data pointer");
    v.data = nullptr;
  } else {
    v.data = static_cast<char*>(t.data) + t.byteOffset;
  }
  return v;
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= shape[i];
  return n;
}

int64_t TensorView::span() const {
  int64_t last = 0;
  for (int i = 0; i < ndim; ++i) {
    if (shape[i] == 0) return 0;
    // Negative strides reach below `data`; only the upward reach counts toward the span.
    int64_t reach = (shape[i] - 1) * strides[i];
    if (reach > 0) last += reach;
  }
  return last + 1;
}

TensorView TensorView::narrow(int axis, int64_t start, int64_t length) const {
  if (!defined()) return *this;
  TensorView v = *this;
  v.data = static_cast<char*>(data) + start * strides[axis] * dtypeBytes(dtype);
  v.shape[axis] = length;
  return v;
}

std::string TensorView::shapeString() const {
  std::string s = "(";
  for (int i = 0; i < ndim; ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  s += ")";
  return s;
}

}  // namespace ssmjit
