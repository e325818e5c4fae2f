// The Mamba-1 selective-scan backward kernels' contract with their op
// (ssmjit::selective_scan_backward). A sequence is cut into spans of meta:span tokens (from its
// start), so that one long sequence fills the GPU; span keys: span j of sequence i (its row's
// tokens [start, end)) is key row * span_keys_per_row + start / span + (packed ? i : 0) + j.
// Four or five launches:
//   1. selective_scan_fwd with meta:checkpoints (SelectiveScan.h): each sequence's state carried
//      into each BLOCK_T tile, at ws[key, n, d] (ckpt keys).
//   2. selective_scan_bwd with meta:adjoint_pass, only when a sequence can have two spans: grid
//      (cdiv(D, meta:BLOCK_D), nseq, spans); every span but the first runs the adjoint's reverse
//      scan alone from a zero carry at its end and stores the adjoint at its first token S[n] and
//      its summed dt at ws[adj_base + (key * (N + 1) + r) * D + d] (r = n, then N).
//   3. selective_scan_bwd, grid (cdiv(D, meta:BLOCK_D), nseq, spans): program (d block, sequence
//      i, span j) starts from the adjoint at the span's end (dfinal, or 0, carried back over the
//      later spans: s = S + exp(A sum_dt) s) and walks the span's tiles from its last to its
//      first, carrying the adjoint s[n] = exp(dt A) g[n] (g: the gradient of h) in registers. Per
//      tile: the states recomputed from the tile's checkpoint (a forward scan), the adjoint by a
//      reverse scan, every per-token gradient written; the sums over the tile's tokens kept in
//      registers (dA, dD, ddelta_bias, constant dB/dC: per span to ws[part_base + (key *
//      kScanBwdSums + r) * D + d] at the end); time-varying dB/dC summed over the block's
//      channels of each group (meta:groups_per_block of them at most) to ws[bc_base + ((dblock *
//      groups_per_block + lg) * N + n) * rows * ckpt_per_row * BLOCK_T + key * BLOCK_T + t % BLOCK_T]
//      (key: the token's tile's checkpoint key, so a packed sequence's runs are aligned as a dense
//      row's; then C's at bc_base + bc_size).
//      dinit (the adjoint at the sequence start) by span 0 at the end.
//   4. selective_scan_bwd_sum, meta:part 0: grid (cdiv(D, BLOCK), kScanBwdSums): the per-span
//      sums added, each sequence's spans in order and then the sequences in order, into dA, dD,
//      ddelta_bias, constant dB/dC; meta:part 1: grid (cdiv(max_len, BLOCK), N, nseq * G * 2):
//      per sequence, the per-block sums of time-varying dB (z even) / dC (odd) added in block order.
// State chunks (N over ssmjit's per-program bound): the launches run once per chunk of states on
//   the chunk's A, B, C, states and their gradients. The sums over states of each token's du,
//   ddelta (before softplus' derivative) and y cross chunks through `part`, three fp32 planes
//   [row, d, t] (rows x D x L each): every chunk but the first adds them in (flag part_in), every
//   chunk but the last writes them there instead of du, ddelta and dz (flag part_out; D's terms
//   and the dD / ddelta_bias sums belong to the last chunk).
// Every order is fixed, so the results are deterministic, and a sequence's per-token gradients
// do not depend on where it lies in a packed row.
#pragma once
#include <cstdint>

namespace ssmjit::kernels {

inline constexpr const char* kScanBwdKernel = "selective_scan_bwd";
inline constexpr const char* kScanBwdSumKernel = "selective_scan_bwd_sum";

// Per-sequence sums, rows r of ws' partial block: dA (N rows), dD, ddelta_bias, dB and dC when
// constant (N rows each): 3 N + 2 rows.
inline int64_t scanBwdSums(int64_t N) { return 3 * N + 2; }

// Pointers (data): u delta A B C Dv z dbias dout dfinal du ddelta dz dinit ws part. Metadata: cu
// init_idx final_idx err. Sizes: D L nseq nslots_init nslots_final max_len (L when unbounded)
// ckpt_per_row span_keys_per_row group (bound) adj_base part_base bc_base bc_size. Layouts as the forward's; dinit/dfinal
// [slot, d, n].
inline constexpr const char* kScanBwdArgNames[] = {
    "u", "delta", "A", "B", "C", "Dv", "z", "dbias", "dout", "dfinal", "du", "ddelta", "dz", "dinit", "ws", "part",
    "cu", "init_idx", "final_idx", "err",
    "D", "L", "nseq", "nslots_init", "nslots_final", "max_len", "ckpt_per_row", "span_keys_per_row", "group",
    "adj_base", "part_base", "bc_base", "bc_size",
    "s_u_b", "s_u_d", "s_dl_b", "s_dl_d", "s_z_b", "s_z_d", "s_do_b", "s_do_d", "s_du_b", "s_du_d", "s_ddl_b",
    "s_ddl_d", "s_dz_b", "s_dz_d", "s_A_d", "s_A_n", "s_B_b", "s_B_g", "s_B_n", "s_B_d", "s_C_b", "s_C_g", "s_C_n",
    "s_C_d", "s_D_d", "s_db_d", "s_df_slot", "s_df_d", "s_df_n", "s_di_slot", "s_di_d", "s_di_n", "s_cu",
    "s_init_idx", "s_final_idx",
    "b_varying", "c_varying", "has_D", "has_z", "has_dbias", "softplus", "has_cu", "has_dfinal",
    "has_final_idx", "has_dinit", "has_init_idx", "part_in", "part_out"};
inline constexpr int kScanBwdNumArgs = sizeof(kScanBwdArgNames) / sizeof(kScanBwdArgNames[0]);

// Pointers: ws dA dD ddbias dB dC, cu (metadata). Sizes: D L nseq rows G group dblocks
// span_keys_per_row part_base bc_base bc_size. meta: part, dstate, span, bwd_block_d,
// groups_per_block (the backward's).
inline constexpr const char* kScanBwdSumArgNames[] = {
    "ws", "dA", "dD", "ddbias", "dB", "dC", "cu",
    "D", "L", "nseq", "rows", "G", "group", "dblocks", "span_keys_per_row", "ckpt_per_row", "part_base",
    "bc_base", "bc_size", "s_cu",
    "s_dA_d", "s_dA_n", "s_dD", "s_ddb", "s_dB_b", "s_dB_g", "s_dB_n", "s_dB_d", "s_dC_b", "s_dC_g", "s_dC_n",
    "s_dC_d",
    "b_varying", "c_varying", "has_D", "has_dbias", "has_cu"};
inline constexpr int kScanBwdSumNumArgs = sizeof(kScanBwdSumArgNames) / sizeof(kScanBwdSumArgNames[0]);

}  // namespace ssmjit::kernels
