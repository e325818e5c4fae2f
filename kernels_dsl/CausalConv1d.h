// The causal-conv1d kernels' contract with their ops: argument names and meaning. Three kernels:
//   causal_conv1d_fwd          out = act(bias + conv(x)) over dense rows or one packed row.
//                              Grid (cdiv(D, BLOCK_D), cdiv(L, BLOCK_T * meta:tiles), rows).
//   causal_conv1d_final_state  per sequence: check its cu_seqlens entries, write its final conv
//                              state. Grid (cdiv(D, BLOCK_D), nseq). Launched after the forward
//                              (its writes may overwrite the slots the forward reads).
//   causal_conv1d_update       decode: L tokens per sequence against its conv state.
//                              Grid (cdiv(D, BLOCK_D), batch).
// Strides are in elements; kernels index x[b, t, d] by (s_x_b, s_x_t, s_x_d) whatever the
// memory order; meta:channel_last picks the tile orientation (time or channels fastest).
#pragma once

namespace ssmjit::kernels {

inline constexpr const char* kConvFwdKernel = "causal_conv1d_fwd";
inline constexpr const char* kConvFinalStateKernel = "causal_conv1d_final_state";
inline constexpr const char* kConvUpdateKernel = "causal_conv1d_update";

// causal_conv1d_fwd. Pointers (data): x weight bias out init; (metadata) cu pos init_idx err.
// The width W is meta:width (it shapes the code). Sizes: D (bound), L (row length), nseq, nslots (init slots), search_steps (>= log2(nseq) + 1,
// the binary search over cu). Flags: has_bias silu has_cu has_pos has_init has_init_idx.
//   x/out[b, t, d]  weight[d, k]  bias[d]  init[slot, d, k]  cu[i]  pos[t]  init_idx[i]
inline constexpr const char* kConvFwdArgNames[] = {
    "x", "weight", "bias", "out", "init", "cu", "pos", "init_idx", "err",
    "D", "L", "nseq", "nslots", "search_steps",
    "s_x_b", "s_x_t", "s_x_d", "s_w_d", "s_w_k", "s_bias_d",
    "s_out_b", "s_out_t", "s_out_d", "s_init_slot", "s_init_d", "s_init_k",
    "s_cu", "s_pos_t", "s_init_idx",
    "has_bias", "silu", "has_cu", "has_pos", "has_init", "has_init_idx"};
inline constexpr int kConvFwdNumArgs = sizeof(kConvFwdArgNames) / sizeof(kConvFwdArgNames[0]);

// causal_conv1d_final_state. Pointers: x init final (data); cu init_idx final_idx err (metadata).
// Sizes: D (bound), L, nseq, nslots_init, nslots_final. Flags: has_cu has_init has_init_idx
// has_final has_final_idx (without has_final the kernel only checks cu and the initial slots).
inline constexpr const char* kConvFinalStateArgNames[] = {
    "x", "init", "final", "cu", "init_idx", "final_idx", "err",
    "D", "L", "nseq", "nslots_init", "nslots_final",
    "s_x_b", "s_x_t", "s_x_d", "s_init_slot", "s_init_d", "s_init_k",
    "s_final_slot", "s_final_d", "s_final_k", "s_cu", "s_init_idx", "s_final_idx",
    "has_cu", "has_init", "has_init_idx", "has_final", "has_final_idx"};
inline constexpr int kConvFinalStateNumArgs =
    sizeof(kConvFinalStateArgNames) / sizeof(kConvFinalStateArgNames[0]);

// causal_conv1d_update. Pointers: state x weight bias out (data); state_idx err (metadata).
// Sizes: D and L (bound), batch, nslots. Flags: has_bias silu has_state_idx commit.
//   state[slot, d, k]  x/out[b, t, d]  weight[d, k]  bias[d]  state_idx[b]
inline constexpr const char* kConvUpdateArgNames[] = {
    "state", "x", "weight", "bias", "out", "state_idx", "err",
    "D", "L", "batch", "nslots",
    "s_state_slot", "s_state_d", "s_state_k", "s_x_b", "s_x_t", "s_x_d", "s_w_d", "s_w_k",
    "s_bias_d", "s_out_b", "s_out_t", "s_out_d", "s_idx_b",
    "has_bias", "silu", "has_state_idx", "commit"};
inline constexpr int kConvUpdateNumArgs = sizeof(kConvUpdateArgNames) / sizeof(kConvUpdateArgNames[0]);

// Device status codes (err[0]; err[1..3] as listed).
inline constexpr long long kErrConvUpdateSlot = 10;   // row b, state_indices[b], slots
inline constexpr long long kErrConvCuSeqlens = 11;    // sequence i, cu[i], cu[i + 1]
inline constexpr long long kErrConvInitSlot = 12;     // sequence i, initial_state_indices[i], slots
inline constexpr long long kErrConvFinalSlot = 13;    // sequence i, final_state_indices[i], slots

}  // namespace ssmjit::kernels
