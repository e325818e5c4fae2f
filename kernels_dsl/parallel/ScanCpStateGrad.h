// The gradient of the state entering a context-parallel part of the Mamba-1 scan, its contract
// with its caller (runtime/parallel/ScanCpStateGrad.h): the transpose of scan_cp_correct. The
// state S_in entering the part's first sequence (of length len in row 0) reaches its output at
// token t as sum_n C[g(d), n, t] exp(A[d, n] cum[d, t]) S_in[d, n] (times the gate) and its end
// state as exp(A[d, n] cum[d, len - 1]) S_in[d, n], so its gradient is
//   out[d, n] = sum_{t < len} gate[d, t] dout[d, t] C[g(d), n, t] exp(A[d, n] cum[d, t])
//               + dfinal[slot, d, n] exp(A[d, n] cum[d, len - 1]),
// cum and the gate as in scan_cp_correct; the last term with has_dfinal and slot = fidx[0]
// (slot 0 without has_fidx) in [0, S). Two kernels, over the chunks of scan_cp_dt_sums:
//   scan_cp_state_grad      part[k, d, n] = the sum over chunk k's tokens (0 past len), cum
//                           seeded with sums' chunks before k. Grid (cdiv(D, meta:BLOCK_D),
//                           cdiv(N, meta:BLOCK_N), K): a program's BLOCK_N states summed in
//                           registers, tiles in turn, each tile's tokens by its reduction. A
//                           program stops where the shares have underflowed (IncomingShare.h).
//   scan_cp_state_grad_sum  out[d, n] = sum over k in order of part[k, d, n] + the final-state
//                           term, with cum[d, len - 1] = sum over k of sums[k, d]. Grid
//                           (cdiv(D, meta:BLOCK_D), cdiv(N, meta:BLOCK_N)).
// C as in scan_cp_correct. Strides are in elements.
#pragma once

#include "kernels_dsl/Signature.h"

namespace ssmjit::kernels {

namespace cpstategrad {
using namespace dsl::decl;
inline constexpr TensorArg kTensors[] = {
    {"delta", F, {"d", "t"}},       {"dbias", F, {"d"}},     {"A", F, {"d", "n"}},
    {"C", F, {"g", "n", "t", "d"}}, {"z", F, {"d", "t"}},    {"dout", F, {"d", "t"}},
    {"cu", I, {""}, nullptr, M},    {"sums", F, {"k", "d"}}, {"part", F, {"k", "d", "n"}}};
// D: masks against it keep their vector width; the rest are loop bounds and a divisor.
inline constexpr SizeArg kSizes[] = {{"D", Div}, {"L", Count}, {"N", Count}, {"group", Count}, {"chunk", Count}};
inline constexpr const char* kFlags[] = {"has_dbias", "softplus", "has_z", "has_cu"};

inline constexpr TensorArg kSumTensors[] = {{"A", F, {"d", "n"}},          {"sums", F, {"k", "d"}},
                                            {"part", F, {"k", "d", "n"}},  {"dfinal", F, {"s", "d", "n"}},
                                            {"fidx", I, {""}, nullptr, M}, {"out", F, {"d", "n"}}};
inline constexpr SizeArg kSumSizes[] = {{"D", Div}, {"N", Count}, {"K", Count}, {"S", Count}};
inline constexpr const char* kSumFlags[] = {"has_dfinal", "has_fidx"};
}  // namespace cpstategrad

inline constexpr dsl::Signature kScanCpStateGrad{
    "scan_cp_state_grad", cpstategrad::kTensors, cpstategrad::kSizes, {}, cpstategrad::kFlags};
inline constexpr dsl::Signature kScanCpStateGradSum{
    "scan_cp_state_grad_sum", cpstategrad::kSumTensors, cpstategrad::kSumSizes, {}, cpstategrad::kSumFlags};

}  // namespace ssmjit::kernels
