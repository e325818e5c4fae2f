// Tensor views: a pointer with dtype, shape and strides (in elements). Views never own memory.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>

#include "ssmjit/dtype.h"

namespace ssmjit {

enum class DeviceKind : int { CPU = 0, CUDA = 1 };

struct TensorView {
  static constexpr int kMaxDims = 6;
  void* data = nullptr;
  DType dtype = DType::F32;
  int ndim = 0;
  int64_t shape[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};  // in elements, may be 0 (broadcast)
  DeviceKind device = DeviceKind::CUDA;
  int deviceId = 0;

  // Contiguous (row-major) view of `shape`.
  static TensorView contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                               DeviceKind device = DeviceKind::CUDA, int deviceId = 0);
  // Zero-copy view of a DLPack tensor (kDLCUDA or kDLCPU; float32/16, bfloat16, int32/64).
  // Throws ssmjit::Error naming `argName` for anything else.
  // A template over the DLTensor type because DLPack declares DLTensor as a typedef of an
  // anonymous struct (it cannot be forward-declared) and dlpack.h is not everywhere: this header
  // then needs no dlpack.h, and any DLPack from 0.6 on (same field names) works.
  template <class DLTensorT>
  static TensorView fromDLPack(const DLTensorT& t, const char* argName = "tensor") {
    DLPackFields f;
    f.data = t.data;
    f.deviceType = static_cast<int>(t.device.device_type);
    f.deviceId = t.device.device_id;
    f.ndim = t.ndim;
    f.dtypeCode = t.dtype.code;
    f.dtypeBits = t.dtype.bits;
    f.dtypeLanes = t.dtype.lanes;
    f.shape = t.shape;
    f.strides = t.strides;
    f.byteOffset = t.byte_offset;
    return fromDLPackFields(f, argName);
  }
  // The DLTensor fields fromDLPack reads, with DLPack's numeric codes (kDLCPU = 1, kDLCUDA = 2;
  // kDLInt = 0, kDLFloat = 2, kDLBfloat = 4).
  struct DLPackFields {
    void* data = nullptr;
    int deviceType = 0;
    int deviceId = 0;
    int ndim = 0;
    int dtypeCode = 0;
    int dtypeBits = 0;
    int dtypeLanes = 1;
    const int64_t* shape = nullptr;
    const int64_t* strides = nullptr;  // nullptr: compact row-major
    uint64_t byteOffset = 0;
  };
  static TensorView fromDLPackFields(const DLPackFields& f, const char* argName = "tensor");

  bool defined() const { return data != nullptr; }
  int64_t numel() const;
  int64_t size(int d) const { return shape[d < 0 ? d + ndim : d]; }
  int64_t stride(int d) const { return strides[d < 0 ? d + ndim : d]; }
  // Largest element offset reachable + 1 (for 64-bit indexing decisions and bounds).
  int64_t span() const;
  // The view of indices [start, start + length) along `axis` (same strides; no data moves). An
  // undefined view stays undefined. Expects 0 <= start, start + length <= size(axis).
  TensorView narrow(int axis, int64_t start, int64_t length) const;
  std::string shapeString() const;  // "(2, 80, 64)"
};

}  // namespace ssmjit
