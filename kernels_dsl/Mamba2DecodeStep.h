// The Mamba-2 decode-step kernel's contract with its op (ssmjit::mamba2_decode_step): argument
// names and meaning. One kernel replays the accepted cached drafts into the conv and SSM states
// (commit) and verifies the new drafts from the corrected state (flags replay / verify).
// Grid: (cdiv(P, meta:BLOCK_P), H, batch). A program owns the SSM state rows of its head's P
// block and their x conv channels. The B and C conv channels and dt are shared by a row's
// programs: the row's first program (0, 0, b) runs their conv over the replayed and the new
// tokens once, into the row's scratch (post-conv B, C and raw dt per token), commits the B/C
// conv state, caches the drafts' B/C and dt, and sets the row's flag; the others wait for the
// flag (the first program has the lowest block id of the row, so it is running or done). The
// row's last program to finish (counter) clears the flag for the next launch.
#pragma once

namespace ssmjit::kernels {

inline constexpr const char* kDecodeStepKernel = "mamba2_decode_step";

// Pointers (data): conv_state ssm_state xbc_cache dt_cache conv_w conv_b A D dt_bias xbc dt z y ws.
// Pointers (metadata): state_idx accepted cached arrivals err.
// Sizes: batch nslots (dynamic); H P N G L (bound; L = drafts of this step, 0 with replay only);
// Lc (cache depth, bound: the first program's token tiles cover Lc + L). Floats: dt_min dt_max. The conv width W is meta:width.
// Layout as the kernel indexes them (channels ch in xBC order: x h*P+p | B H*P+g*N+n | C ...):
//   conv_state[slot, ch, k]  ssm_state[slot, h, p, n]  xbc_cache[slot, t, ch]  dt_cache[slot, t, h]
//   conv_w[ch, k]  conv_b[ch]  A/D/dt_bias[h]  xbc[b, t, ch]  dt[b, t, h]  z/y[b, t, h, p]
//   ws[slot, t, j] (j < 2GN: post-conv B|C; 2GN + h: raw dt; channel stride 1)
//   state_idx[b]  accepted[b]  cached[slot]  arrivals[slot, 0] counter, [slot, 1] flag (contiguous
//   int32; flag 1: the row's scratch is ready, 2: the row is skipped)  err: int64[4]
inline constexpr const char* kDecodeStepArgNames[] = {
    "conv_state", "ssm_state", "xbc_cache", "dt_cache", "conv_w", "conv_b", "A", "D", "dt_bias",
    "xbc", "dt", "z", "y", "ws", "state_idx", "accepted", "cached", "arrivals", "err",
    "batch", "nslots", "H", "P", "N", "G", "L", "Lc", "dt_min", "dt_max",
    "s_cs_slot", "s_cs_c", "s_cs_k",
    "s_ss_slot", "s_ss_h", "s_ss_p", "s_ss_n",
    "s_xc_slot", "s_xc_t", "s_xc_c",
    "s_dc_slot", "s_dc_t", "s_dc_h",
    "s_w_c", "s_w_k", "s_cb_c", "s_A_h", "s_D_h", "s_dtb_h",
    "s_xbc_b", "s_xbc_t", "s_xbc_c",
    "s_dt_b", "s_dt_t", "s_dt_h",
    "s_z_b", "s_z_t", "s_z_h", "s_z_p",
    "s_y_b", "s_y_t", "s_y_h", "s_y_p",
    "s_ws_slot", "s_ws_t",
    "s_idx_b", "s_acc_b", "s_cached",
    "has_conv_bias", "has_D", "has_z", "has_dt_bias", "dt_softplus", "has_clamp", "has_state_idx",
    "replay", "verify"};
inline constexpr int kDecodeStepNumArgs = sizeof(kDecodeStepArgNames) / sizeof(kDecodeStepArgNames[0]);

// Device status codes (err[0]; err[1] = row b, err[2] = value, err[3] = bound).
inline constexpr long long kErrDecodeSlot = 20;      // state_indices[b] outside [0, S)
inline constexpr long long kErrDecodeAccepted = 21;  // num_accepted[b] outside [0, cached_tokens[slot]]

}  // namespace ssmjit::kernels
