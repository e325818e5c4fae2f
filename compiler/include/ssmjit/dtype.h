// The one storage-dtype enum of ssmjit, shared by every layer: tensor views (runtime), bindings
// in a specialisation (compiler) and the kernels' argument classes (kernels_dsl). Math is always
// fp32 for float types and the index type for integers. The values are part of disk-cache keys.
#pragma once
#include <iterator>
#include <string>

#include "ssmjit/enum_name.h"
#include "ssmjit/error.h"

namespace ssmjit {

enum class DType : int { F32 = 0, F16 = 1, BF16 = 2, I32 = 3, I64 = 4 };

inline const char* dtypeName(DType t) {
  return enumName<DType::I64>(t, {"float32", "float16", "bfloat16", "int32", "int64"});
}

// Bytes an element. Throws Error(Internal) for a value outside the enum.
inline int dtypeBytes(DType t) {
  static constexpr int kBytes[] = {4, 2, 2, 4, 8};
  static_assert(std::size(kBytes) == static_cast<size_t>(DType::I64) + 1, "one size per DType");
  const auto i = static_cast<size_t>(t);
  if (i < std::size(kBytes)) return kBytes[i];
  throw Error(Error::Kind::Internal, "dtypeBytes: unknown DType " + std::to_string(static_cast<int>(t)));
}

}  // namespace ssmjit
