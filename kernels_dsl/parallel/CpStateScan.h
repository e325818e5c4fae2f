// The context-parallel state scan's contract with its caller (runtime/parallel/CpStateScan.h):
//   cp_state_scan   each rank q < ranks left a summary row summaries[q, :] = [a | b (H, PN)]
//                   (a: the decay over its part, b: its end state from a zero start, fp32); the
//                   state entering the next rank is out[h, e] = s_ranks with s_0 = 0 and
//                   s_{q+1} = a[q, h, e] s_q + b[q, h, e], in fp32 in rank order. a is (H) (a
//                   head's decay, the SSD's) or, with meta:decay_per_element, (H, PN) (the
//                   Mamba-1 scan's, one a state). Grid (cdiv(PN, BLOCK), H).
// Strides are in elements.
#pragma once

#include "kernels_dsl/Signature.h"

namespace ssmjit::kernels {

namespace cpscan {
using namespace dsl::decl;
inline constexpr TensorArg kTensors[] = {{"summaries", F, {"q", "e"}}, {"out", F, {"e"}}};
// PN: masks against it keep their vector width; H and ranks are only offsets and a loop bound.
inline constexpr SizeArg kSizes[] = {{"H", Count}, {"PN", Div}, {"ranks", Count}};
}  // namespace cpscan

inline constexpr dsl::Signature kCpStateScan{"cp_state_scan", cpscan::kTensors, cpscan::kSizes};

}  // namespace ssmjit::kernels
