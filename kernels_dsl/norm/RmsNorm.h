// The RMSNorm kernel's contract with its ops (rms_norm, gated_rms_norm): argument names and
// meaning. One kernel serves both:
//   rms_norm   one program normalises rows [pid0 * BLOCK_T, + BLOCK_T) of group pid1 (group_size
//              channels from pid1 * group_size). Grid (cdiv(T, BLOCK_T), D / group_size).
// Per row and group, in fp32:
//   r = x (+ residual);  residual_out = r (with has_residual_out);
//   norm_before_gate off: g = r * silu(z) (with has_z), else g = r;
//   out = g * rsqrt(sum(g^2) / group_size + eps) * weight (* silu(z) with has_z and
//   norm_before_gate).
// Each program reads its whole tile before it writes, each element in the thread that writes the
// element's place in every output. In place, out_is_x writes out through x's pointer and strides
// and residual_out_is_residual residual_out through residual's (then out / residual_out are
// absent): the pointers are __restrict__, so one tensor is never reached through two of them.
// Strides are in elements; the channel strides are 1 (the op checks them) so that accesses are
// vectors. A group is meta:chunks tiles of meta:BLOCK_G channels (a power of two), held in
// registers between the sum and the scaling: one read and one write of each element.
#pragma once

#include "kernels_dsl/Signature.h"

namespace ssmjit::kernels {

namespace norm {
using dsl::SizeArg;
using dsl::TensorArg;
constexpr auto F = dsl::PtrClass::Float;
inline constexpr TensorArg kTensors[] = {
    {"x", F, {"t", "d"}}, {"residual", F, {"t", "d"}, "res"}, {"residual_out", F, {"t", "d"}, "res_out"},
    {"z", F, {"t", "d"}}, {"weight", F, {"d"}, "w"},          {"out", F, {"t", "d"}}};
// T: rows (only compared against: every row count shares one kernel); group_size: channels a
// group (it shapes the code).
inline constexpr SizeArg kSizes[] = {{"T", dsl::SizeUse::Count}, {"group_size", dsl::SizeUse::Bound}};
inline constexpr const char* kScalars[] = {"eps"};
inline constexpr const char* kFlags[] = {"has_residual",     "has_residual_out", "has_z",
                                         "norm_before_gate", "out_is_x",         "residual_out_is_residual"};
}  // namespace norm

inline constexpr dsl::Signature kRmsNorm{"rms_norm", norm::kTensors, norm::kSizes, norm::kScalars, norm::kFlags};

}  // namespace ssmjit::kernels
