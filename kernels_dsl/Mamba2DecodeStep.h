// The Mamba-2 decode-step kernel's contract with its op (ssmjit::mamba2_decode_step): argument
// names and meaning. One kernel replays the accepted cached drafts into the conv and SSM states
// (commit) and verifies the new drafts from the corrected state (flags replay / verify).
// Grid: (cdiv(P, meta:BLOCK_P), H / hpp, batch). A program owns the SSM state rows of the P
// block of hpp heads (hpp divides H / G, at most 8, chosen at launch) and their x conv channels;
// it runs the B and C conv of their group itself. What a row's programs share (the B/C conv state
// columns, the cached B/C and dt drafts, the count) is written by the last of them to arrive
// (counter arrivals[slot]), after all have read it.
#pragma once

#include <cstdint>

namespace ssmjit::kernels {

inline constexpr const char* kDecodeStepKernel = "mamba2_decode_step";
// The most heads one program runs (hpp; their dt rows are staged together).
inline constexpr int64_t kMaxHeadsPerProgram = 8;
// Calls with at least this many (sequence, head) pairs get the large-batch tiles (see chooseMeta):
// about 8 a streaming multiprocessor of an H100.
inline constexpr int64_t kDecodeLargeBatchHeads = 1024;

// Pointers (data): conv_state ssm_state xbc_cache dt_cache conv_w conv_b A D dt_bias xbc dt z y.
// Pointers (metadata): state_idx accepted cached arrivals err.
// Sizes: batch nslots hpp (dynamic); H P N G L (bound; L = drafts of this step, 0 with replay
// only); Lc (cache depth, bound: the staged token tiles cover Lc + L). Floats: dt_min dt_max. The
// conv width W is meta:width.
// Layout as the kernel indexes them (channels ch in xBC order: x h*P+p | B H*P+g*N+n | C ...):
//   conv_state[slot, ch, k]  ssm_state[slot, h, p, n]  xbc_cache[slot, t, ch]  dt_cache[slot, t, h]
//   conv_w[ch, k]  conv_b[ch]  A/D/dt_bias[h]  xbc[b, t, ch]  dt[b, t, h]  z/y[b, t, h, p]
//   state_idx[b]  accepted[b]  cached[slot]  arrivals[slot] (int32 counter)  err: int64[4]
inline constexpr const char* kDecodeStepArgNames[] = {
    "conv_state", "ssm_state", "xbc_cache", "dt_cache", "conv_w", "conv_b", "A", "D", "dt_bias",
    "xbc", "dt", "z", "y", "state_idx", "accepted", "cached", "arrivals", "err",
    "batch", "nslots", "H", "P", "N", "G", "L", "Lc", "hpp", "dt_min", "dt_max",
    "s_cs_slot", "s_cs_c", "s_cs_k",
    "s_ss_slot", "s_ss_h", "s_ss_p", "s_ss_n",
    "s_xc_slot", "s_xc_t", "s_xc_c",
    "s_dc_slot", "s_dc_t", "s_dc_h",
    "s_w_c", "s_w_k", "s_cb_c", "s_A_h", "s_D_h", "s_dtb_h",
    "s_xbc_b", "s_xbc_t", "s_xbc_c",
    "s_dt_b", "s_dt_t", "s_dt_h",
    "s_z_b", "s_z_t", "s_z_h", "s_z_p",
    "s_y_b", "s_y_t", "s_y_h", "s_y_p",
    "s_idx_b", "s_acc_b", "s_cached",
    "has_conv_bias", "has_D", "has_z", "has_dt_bias", "dt_softplus", "has_clamp", "has_state_idx",
    "replay", "verify"};
inline constexpr int kDecodeStepNumArgs = sizeof(kDecodeStepArgNames) / sizeof(kDecodeStepArgNames[0]);

// Device status codes (err[0]; err[1] = row b, err[2] = value, err[3] = bound).
inline constexpr long long kErrDecodeSlot = 20;      // state_indices[b] outside [0, S)
inline constexpr long long kErrDecodeAccepted = 21;  // num_accepted[b] outside [0, cached_tokens[slot]]

}  // namespace ssmjit::kernels
