// The one storage-dtype enum of ssmjit, shared by every layer: tensor views (runtime), bindings
// in a specialisation (compiler) and the kernels' argument classes (kernels_dsl). Math is always
// fp32 for float types and the index type for integers. The values are part of disk-cache keys.
#pragma once
#include <string>

#include "ssmjit/error.h"

namespace ssmjit {

enum class DType : int { F32 = 0, F16 = 1, BF16 = 2, I32 = 3, I64 = 4 };

inline const char* dtypeName(DType t) {
  switch (t) {
    case DType::F32:
      return "float32";
    case DType::F16:
      return "float16";
    case DType::BF16:
      return "bfloat16";
    case DType::I32:
      return "int32";
    case DType::I64:
      return "int64";
  }
  return "unknown";
}

// Bytes an element. Throws Error(Internal) for a value outside the enum.
inline int dtypeBytes(DType t) {
  switch (t) {
    case DType::F32:
      return 4;
    case DType::F16:
      return 2;
    case DType::BF16:
      return 2;
    case DType::I32:
      return 4;
    case DType::I64:
      return 8;
  }
  throw Error(Error::Kind::Internal, "dtypeBytes: unknown DType " + std::to_string(static_cast<int>(t)));
}

}  // namespace ssmjit
