// The embedding kernel's contract with its op (ssmjit::embedding, ssmjit/ops.h):
//   embedding   out[t, :] = table[ids[t], :]; an id outside [0, V) writes zeros to row t and
//               reports kErrEmbedId. Grid (T, cdiv(D, BLOCK_D)): tokens on x, which has no
//               65535 limit (a long packed prefill).
// Strides are in elements.
#pragma once

#include "kernels_dsl/Signature.h"

namespace ssmjit::kernels {

namespace embed {
using namespace dsl::decl;
inline constexpr TensorArg kTensors[] = {{"ids", I, {"t"}, nullptr, M},
                                         {"table", F, {"v", "d"}},
                                         {"out", F, {"t", "d"}},
                                         {"err", I, {}, nullptr, M}};
// D: masks against it keep their vector width; V: only compared against.
inline constexpr SizeArg kSizes[] = {{"D", Div}, {"V", Count}};
}  // namespace embed

inline constexpr dsl::Signature kEmbedding{"embedding", embed::kTensors, embed::kSizes};

// Device status code (err[0]; err[1..3]: token t, ids[t], V).
inline constexpr long long kErrEmbedId = 50;

}  // namespace ssmjit::kernels
