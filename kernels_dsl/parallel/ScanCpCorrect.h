// The Mamba-1 scan's correction of a context-parallel part, its contract with its caller
// (runtime/parallel/ScanCpCorrect.h): the part scanned its first sequence from a zero state, and
// the state S_in entering it is known only after the ranks' exchange. The scan is linear in its
// state, so S_in adds to that sequence's outputs, token t < len (its length in row 0):
//   scan_cp_correct  out[d, t] += gate[d, t] sum_n C[g(d), n, t] exp(A[d, n] cum[d, t]) S_in[d, n],
//                    cum[d, t] = sum_{s <= t} dt'[d, s], dt' = delta (+ dbias[d]), softplus'd with
//                    the flag, as the selective scan computes it; gate = silu(z) with z, else 1.
//                    C is time-varying (its d stride 0, g(d) = d / group) or constant (its g and t
//                    strides 0). And to its end state, with has_final and slot = fidx[0]
//                    (slot 0 without has_fidx) in [0, S):
//                    final[slot, d, n] += exp(A[d, n] cum[d, len - 1]) S_in[d, n].
//                    sums (K, D): scan_cp_dt_sums' sums of dt' over the chunks of `chunk`
//                    tokens (a multiple of meta:BLOCK_T). Grid (cdiv(D, meta:BLOCK_D), K =
//                    cdiv(L, chunk)): a program a block of channels and a chunk, its cum seeded
//                    with the chunks' sums before it; meta:BLOCK_N states unrolled at a time. A
//                    program stops where the shares have underflowed (IncomingShare.h), given a
//                    finite S_in.
// Strides are in elements.
#pragma once

#include "kernels_dsl/Signature.h"

namespace ssmjit::kernels {

namespace cpcorrect {
using namespace dsl::decl;
inline constexpr TensorArg kTensors[] = {
    {"delta", F, {"d", "t"}},       {"dbias", F, {"d"}},         {"A", F, {"d", "n"}},
    {"C", F, {"g", "n", "t", "d"}}, {"z", F, {"d", "t"}},        {"out", F, {"d", "t"}},
    {"incoming", F, {"d", "n"}},    {"cu", I, {""}, nullptr, M}, {"final", F, {"s", "d", "n"}},
    {"fidx", I, {""}, nullptr, M},  {"sums", F, {"k", "d"}}};
// D: masks against it keep their vector width; the rest are loop bounds and a divisor.
inline constexpr SizeArg kSizes[] = {{"D", Div},       {"L", Count}, {"N", Count},
                                     {"group", Count}, {"S", Count}, {"chunk", Count}};
inline constexpr const char* kFlags[] = {"has_dbias", "softplus", "has_z", "has_cu", "has_final", "has_fidx"};
}  // namespace cpcorrect

inline constexpr dsl::Signature kScanCpCorrect{
    "scan_cp_correct", cpcorrect::kTensors, cpcorrect::kSizes, {}, cpcorrect::kFlags};

}  // namespace ssmjit::kernels
