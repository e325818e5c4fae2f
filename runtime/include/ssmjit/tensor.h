// Tensor views: a pointer with dtype, shape and strides (in elements). Views never own memory.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>

// DLPack declares DLTensor as a typedef of an anonymous struct, so it cannot be forward-declared;
// the (header-only, ABI-stable since 0.6) dlpack.h is part of this header's interface.
#include <dlpack/dlpack.h>

namespace ssmjit {

enum class DType : int { F32 = 0, F16 = 1, BF16 = 2, I32 = 3, I64 = 4 };
const char* dtypeName(DType t);
int dtypeBytes(DType t);

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
  static TensorView fromDLPack(const DLTensor& t, const char* argName = "tensor");

  bool defined() const { return data != nullptr; }
  int64_t numel() const;
  int64_t size(int d) const { return shape[d < 0 ? d + ndim : d]; }
  int64_t stride(int d) const { return strides[d < 0 ? d + ndim : d]; }
  // Largest element offset reachable + 1 (for 64-bit indexing decisions and bounds).
  int64_t span() const;
  std::string shapeString() const;  // "(2, 80, 64)"
};

}  // namespace ssmjit
