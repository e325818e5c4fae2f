// The Mamba-1 selective-scan backward kernels' contract with their op
// (ssmjit::selective_scan_backward). A sequence is cut into spans of meta:span tokens (from its
// start), so that one long sequence fills the GPU; span keys: span j of sequence i (its row's
// tokens [start, end)) is key row * span_keys_per_row + start / span + (packed ? i : 0) + j.
// Four to six launches:
//   1. selective_scan_fwd with meta:checkpoints (SelectiveScan.h): each sequence's state carried
//      into each BLOCK_T tile, at ws[key, n, d] (ckpt keys); where a sequence can have two spans,
//      in the backward's spans (grid (cdiv(D, BLOCK_D), spans, nseq)), each from a zero start but
//      the first, so that one long sequence runs as many programs as dense rows, then
//   1b. selective_scan_ckpt_fold (ScanCheckpointFold.h): the entering states' share added.
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

#include "kernels_dsl/scan/SelectiveScan.h"

namespace ssmjit::kernels {

// Per-sequence sums, rows r of ws' partial block: dA (N rows), dD, ddelta_bias, dB and dC when
// constant (N rows each): 3 N + 2 rows.
inline int64_t scanBwdSums(int64_t N) { return 3 * N + 2; }

namespace scan {
// dinit/dfinal [slot, d, n]; the gradients of u, delta, z laid out as they are.
inline constexpr TensorArg kBwdTensors[] = {u,
                                            delta,
                                            A,
                                            B,
                                            C,
                                            Dv,
                                            z,
                                            dbias,
                                            {"dout", F, {"b", "d"}, "do"},
                                            {"dfinal", F, {"slot", "d", "n"}, "df"},
                                            {"du", F, {"b", "d"}},
                                            {"ddelta", F, {"b", "d"}, "ddl"},
                                            {"dz", F, {"b", "d"}},
                                            {"dinit", F, {"slot", "d", "n"}, "di"},
                                            ws,
                                            {"part", F, {}},
                                            cu,
                                            initIdx,
                                            finalIdx,
                                            err};
inline constexpr const char* kBwdStrideOrder[] = {"u",      "delta", "z",  "dout",     "du",       "ddelta",
                                                  "dz",     "A",     "B",  "C",        "Dv",       "dbias",
                                                  "dfinal", "dinit", "cu", "init_idx", "final_idx"};
// max_len: L when unbounded.
inline constexpr SizeArg kBwdSizes[] = {{"D", Bound},
                                        {"L", TileDiv},
                                        {"nseq", Count},
                                        {"nslots_init", Count},
                                        {"nslots_final", Count},
                                        {"max_len", Count},
                                        {"ckpt_per_row", Div},
                                        {"span_keys_per_row", Div},
                                        {"group", Bound},
                                        {"adj_base", Div},
                                        {"part_base", Div},
                                        {"bc_base", Div},
                                        {"bc_size", Div}};
inline constexpr const char* kBwdFlags[] = {"b_varying",    "c_varying", "has_D",      "has_z",         "has_dbias",
                                            "softplus",     "has_cu",    "has_dfinal", "has_final_idx", "has_dinit",
                                            "has_init_idx", "part_in",   "part_out"};

// meta: part, dstate, span, bwd_block_d, groups_per_block (the backward's).
inline constexpr TensorArg kSumTensors[] = {ws,
                                            {"dA", F, {"d", "n"}},
                                            {"dD", F, {""}},
                                            {"ddbias", F, {""}, "ddb"},
                                            {"dB", F, {"b", "g", "n", "d"}},
                                            {"dC", F, {"b", "g", "n", "d"}},
                                            cu};
inline constexpr const char* kSumStrideOrder[] = {"cu", "dA", "dD", "ddbias", "dB", "dC"};
inline constexpr SizeArg kSumSizes[] = {{"D", Div},
                                        {"L", Div},
                                        {"nseq", Count},
                                        {"rows", Div},
                                        {"G", Div},
                                        {"group", Div},
                                        {"dblocks", Div},
                                        {"span_keys_per_row", Div},
                                        {"ckpt_per_row", Div},
                                        {"part_base", Div},
                                        {"bc_base", Div},
                                        {"bc_size", Div}};
inline constexpr const char* kSumFlags[] = {"b_varying", "c_varying", "has_D", "has_dbias", "has_cu"};
}  // namespace scan

inline constexpr dsl::Signature kScanBwd{"selective_scan_bwd", scan::kBwdTensors,    scan::kBwdSizes, {},
                                         scan::kBwdFlags,      scan::kBwdStrideOrder};
inline constexpr dsl::Signature kScanBwdSum{"selective_scan_bwd_sum", scan::kSumTensors,    scan::kSumSizes, {},
                                            scan::kSumFlags,          scan::kSumStrideOrder};

}  // namespace ssmjit::kernels
