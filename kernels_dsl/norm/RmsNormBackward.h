// The RMSNorm backward kernels' contract with gated_rms_norm_backward: argument names and meaning.
//   rms_norm_bwd         program (pid0, pid1) takes row tiles pid0, pid0 + row_programs, ... of
//                        BLOCK_T rows, in group pid1 (group_size channels from pid1 * group_size).
//                        Grid (row_programs, D / group_size).
//   rms_norm_bwd_reduce  dweight[d] = sum_p ws[p, d], p in [0, partials) in order. Grid
//                        (cdiv(D, BLOCK_D)).
// Per row and group, in fp32, with s = silu(z) and s' = dsilu/dz (s = 1 and no dz without has_z):
//   h = norm_before_gate ? x : x * s;  rstd = rsqrt(mean(h^2) + eps);  n = h * rstd;
//   gn = dout * (norm_before_gate ? s : 1);  dn = gn * weight;
//   dh = rstd * (dn - n * mean(dn * n));
//   dx = norm_before_gate ? dh : dh * s;
//   dz = norm_before_gate ? dout * n * weight * s' : dh * x * s';
//   ws[pid0, channel] = sum over the program's rows of gn * n   (dweight's partial sums).
// Every program writes its whole row of ws (zeros for rows it has none of), so the reduction's sum
// has a fixed order whatever the scheduling: dweight is deterministic. Strides are in elements;
// the channel strides of the row tensors are 1 (the op checks them).
#pragma once

#include "kernels_dsl/Signature.h"

namespace ssmjit::kernels {

namespace norm_bwd {
using dsl::SizeArg;
using dsl::TensorArg;
constexpr auto F = dsl::PtrClass::Float;
constexpr auto Bound = dsl::SizeUse::Bound;
constexpr auto Count = dsl::SizeUse::Count;
inline constexpr TensorArg ws{"ws", F, {"p", "d"}};
inline constexpr TensorArg kTensors[] = {{"x", F, {"t", "d"}},
                                         {"z", F, {"t", "d"}},
                                         {"weight", F, {"d"}, "w"},
                                         {"dout", F, {"t", "d"}, "dy"},
                                         {"dx", F, {"t", "d"}},
                                         {"dz", F, {"t", "d"}},
                                         ws};
// T: rows; group_size: channels a group (it shapes the code); row_programs: programs along rows.
inline constexpr SizeArg kSizes[] = {{"T", Count}, {"group_size", Bound}, {"row_programs", Count}};
inline constexpr const char* kScalars[] = {"eps"};
inline constexpr const char* kFlags[] = {"has_z", "norm_before_gate"};

inline constexpr TensorArg kReduceTensors[] = {ws, {"dweight", F, {"d"}, "dw"}};
inline constexpr SizeArg kReduceSizes[] = {{"D", Count}, {"partials", Count}};
}  // namespace norm_bwd

inline constexpr dsl::Signature kRmsNormBwd{"rms_norm_bwd", norm_bwd::kTensors, norm_bwd::kSizes, norm_bwd::kScalars,
                                            norm_bwd::kFlags};
inline constexpr dsl::Signature kRmsNormBwdReduce{
    "rms_norm_bwd_reduce", norm_bwd::kReduceTensors, norm_bwd::kReduceSizes, {}, {}};

}  // namespace ssmjit::kernels
