// The Mamba-1 scan's decay over a context-parallel part, its contract with its caller
// (runtime/parallel/ScanCpDecay.h):
//   scan_cp_decay   out[d, n] = exp(A[d, n] sum_t dt'[d, t]) over the part's tokens t < L (one
//                   sequence in row 0), dt' = delta (+ dbias[d]), softplus'd with the flag, as the
//                   selective scan computes it: the factor by which the part scales the state it
//                   is handed. Grid (D).
// Strides are in elements.
#pragma once

#include "kernels_dsl/Signature.h"

namespace ssmjit::kernels {

namespace cpdecay {
using namespace dsl::decl;
inline constexpr TensorArg kTensors[] = {
    {"delta", F, {"d", "t"}}, {"dbias", F, {"d"}}, {"A", F, {"d", "n"}}, {"out", F, {"d", "n"}}};
// L and N are loop bounds only: parts of any length and state size share a kernel.
inline constexpr SizeArg kSizes[] = {{"L", Count}, {"N", Count}};
inline constexpr const char* kFlags[] = {"has_dbias", "softplus"};
}  // namespace cpdecay

inline constexpr dsl::Signature kScanCpDecay{"scan_cp_decay", cpdecay::kTensors, cpdecay::kSizes, {}, cpdecay::kFlags};

}  // namespace ssmjit::kernels
