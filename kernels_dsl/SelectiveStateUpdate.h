// The selective-state-update kernel's contract with its op: argument names and their meaning.
// One kernel covers Mamba-1 (H = 1, P = D, A per element, dt per channel) and Mamba-2 (A and dt
// per head: flag per_head), one token or L tokens. Grid: (cdiv(P, meta:BLOCK_P), H, batch).
#pragma once

namespace ssmjit::kernels {

inline constexpr const char* kSsuKernel = "selective_state_update";

// Every argument of the generic kernel, in the order the op passes values (ArgSchema).
// Pointers (data): state x dt A B C D z dt_bias out.  Pointers (metadata, never specialised on
// alignment): state_idx dst_idx err.
// Sizes: batch nslots (dynamic); H P N G L (bound by the op).  Floats: dt_min dt_max.
// Strides are in elements; the op binds those equal to 0 or 1 and leaves the rest dynamic with a
// "div:" class. Flags (0/1, always bound): has_D has_z has_dt_bias dt_softplus has_clamp
// has_state_idx per_head; state_write (0 final, 1 none, 2 per token, into dst_idx[b, t]).
// Layout of the tensors as the kernel indexes them (Mamba-1: H = 1):
//   state[slot, h, p, n]  x/z/out[b, t, h, p]  dt[b, t, h, p] (per_head: p stride unused)
//   A[h, p, n] (per_head: A[h])  B/C[b, t, g, n] with g = h / (H / G)  D/dt_bias[h, p]
//   state_idx[b]  dst_idx[b, t]  err: int64[4] device status record (see DeviceStatus)
inline constexpr const char* kSsuArgNames[] = {
    "state", "x", "dt", "A", "B", "C", "D", "z", "dt_bias", "out", "state_idx", "dst_idx", "err",
    "batch", "nslots", "H", "P", "N", "G", "L", "dt_min", "dt_max",
    "s_state_slot", "s_state_h", "s_state_p", "s_state_n",
    "s_x_b", "s_x_l", "s_x_h", "s_x_p",
    "s_dt_b", "s_dt_l", "s_dt_h", "s_dt_p",
    "s_A_h", "s_A_p", "s_A_n",
    "s_B_b", "s_B_l", "s_B_g", "s_B_n",
    "s_C_b", "s_C_l", "s_C_g", "s_C_n",
    "s_D_h", "s_D_p",
    "s_z_b", "s_z_l", "s_z_h", "s_z_p",
    "s_dtb_h", "s_dtb_p",
    "s_out_b", "s_out_l", "s_out_h", "s_out_p",
    "s_idx_b", "s_dst_b", "s_dst_l",
    "has_D", "has_z", "has_dt_bias", "dt_softplus", "has_clamp", "has_state_idx", "per_head",
    "state_write"};
inline constexpr int kSsuNumArgs = sizeof(kSsuArgNames) / sizeof(kSsuArgNames[0]);

// Device status record codes written through `err` (first error wins):
// err[0] = code, err[1] = row b, err[2] = offending value, err[3] = bound.
inline constexpr long long kErrSlotOutOfRange = 1;
inline constexpr long long kErrDstSlotOutOfRange = 2;

}  // namespace ssmjit::kernels
