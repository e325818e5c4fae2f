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
inline constexpr const char* kConvBwdKernel = "causal_conv1d_bwd";
inline constexpr const char* kConvBwdReduceKernel = "causal_conv1d_bwd_reduce";
inline constexpr const char* kConvBwdStatesKernel = "causal_conv1d_bwd_states";

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

// Backward (three launches, in this order):
//   causal_conv1d_bwd          dx over dense rows or one packed row, and each program's partial
//                              dweight / dbias sums into ws. Grid (cdiv(D, BLOCK_D), nchunks, rows);
//                              a program covers `tiles` (a runtime size) tiles of BLOCK_T tokens.
//   causal_conv1d_bwd_states   per sequence: check cu / slots; dinit; dx += dfinal. Grid
//                              (cdiv(D, BLOCK_D), nseq). After the dx kernel (it adds to dx).
//   causal_conv1d_bwd_reduce   dweight, dbias = the partials summed in a fixed order.
//                              Grid (cdiv(D, BLOCK_D), W + has_dbias): column j of dweight, j = W
//                              dbias.
// ws[p, j, d] (float32, p = row * nchunks + chunk, j < W: dweight column j, j = W: dbias) holds
// the partial sums: (rows * nchunks) * (W + 1) * D floats.
inline constexpr const char* kConvBwdArgNames[] = {
    "x", "weight", "bias", "dout", "dx", "init", "ws", "cu", "pos", "init_idx", "err",
    "D", "L", "nseq", "nslots", "search_steps", "tiles", "nchunks",
    "s_x_b", "s_x_t", "s_x_d", "s_w_d", "s_w_k", "s_bias_d", "s_dy_b", "s_dy_t", "s_dy_d",
    "s_dx_b", "s_dx_t", "s_dx_d", "s_init_slot", "s_init_d", "s_init_k",
    "s_cu", "s_pos_t", "s_init_idx",
    "has_bias", "silu", "has_cu", "has_pos", "has_init", "has_init_idx"};
inline constexpr int kConvBwdNumArgs = sizeof(kConvBwdArgNames) / sizeof(kConvBwdArgNames[0]);

// causal_conv1d_bwd_reduce. partials = rows * nchunks.
inline constexpr const char* kConvBwdReduceArgNames[] = {
    "ws", "dweight", "dbias", "D", "partials", "s_dw_d", "s_dw_k", "s_db_d", "has_dbias"};
inline constexpr int kConvBwdReduceNumArgs =
    sizeof(kConvBwdReduceArgNames) / sizeof(kConvBwdReduceArgNames[0]);

// causal_conv1d_bwd_states. dinit[slot] is written for each sequence with an initial slot (when
// has_dinit); dfinal[slot] (final_idx, or i) is added to dx / dinit (when has_dfinal).
inline constexpr const char* kConvBwdStatesArgNames[] = {
    "x", "weight", "bias", "dout", "dx", "init", "dinit", "dfinal", "cu", "init_idx", "final_idx", "err",
    "D", "L", "nseq", "nslots_init", "nslots_final",
    "s_x_b", "s_x_t", "s_x_d", "s_w_d", "s_w_k", "s_bias_d", "s_dy_b", "s_dy_t", "s_dy_d",
    "s_dx_b", "s_dx_t", "s_dx_d", "s_init_slot", "s_init_d", "s_init_k",
    "s_dinit_slot", "s_dinit_d", "s_dinit_k", "s_dfinal_slot", "s_dfinal_d", "s_dfinal_k",
    "s_cu", "s_init_idx", "s_final_idx",
    "has_bias", "silu", "has_cu", "has_init", "has_init_idx", "has_dinit", "has_dfinal",
    "has_final_idx"};
inline constexpr int kConvBwdStatesNumArgs =
    sizeof(kConvBwdStatesArgNames) / sizeof(kConvBwdStatesArgNames[0]);

// Device status codes (err[0]; err[1..3] as listed).
inline constexpr long long kErrConvUpdateSlot = 10;   // row b, state_indices[b], slots
inline constexpr long long kErrConvCuSeqlens = 11;    // sequence i, cu[i], cu[i + 1]
inline constexpr long long kErrConvInitSlot = 12;     // sequence i, initial_state_indices[i], slots
inline constexpr long long kErrConvFinalSlot = 13;    // sequence i, final_state_indices[i], slots
inline constexpr long long kErrConvSeqPos = 14;       // token t, seq_pos[t], seq_pos[t - 1] (-1 at t = 0)

}  // namespace ssmjit::kernels
