// The Mamba-2 SSD chunked scan's forward kernels and their contract with the op (ssmjit::ssd):
// argument names and meaning, shared by the five kernels (each reads the arguments it needs;
// the op binds all of them for every launch).
//
// Logical chunks: every sequence is cut into chunks of Q = meta:chunk tokens from its own start,
// so no chunk straddles two sequences. Sequence i (dense: row i, tokens [0, L); packed: row 0,
// [cu[i], cu[i + 1])) has cdiv(len, Q) chunks; its chunk c sits at slot
//   firstSlot(i) + c,  firstSlot(i) = row * cdiv(L, Q) + start / Q + (packed ? i : 0)
// of the `slots` slots (dense Bt * cdiv(L, Q), packed nseq + L / Q): distinct for distinct
// chunks, since start / Q + cdiv(len, Q) <= (start + len) / Q + 1. A chunk's arithmetic depends
// only on its own tokens and the state entering it, so a packed sequence equals its own call
// bitwise.
//
// Workspace (float32; offsets o_* in elements, from ssdWorkspaceLayout):
//   chunks (int32 view of the workspace's start): per slot {sequence, row, first token, tokens}
//     (tokens 0: an empty slot);
//   dt'[slot, h, Q] and dA_cumsum[slot, h, Q] at o_dt, o_cum (0 and constant past the chunk's
//     tokens);
//   states[slot, h, P, N] at o_st: the state entering the chunk (chunk_state under pass_states;
//     otherwise each chunk's state from zero, which state_passing replaces in place);
//   CB[slot, g, Q, Q] at o_cb: C_i . B_j of the chunk's tokens, 64 x 64 blocks j <= i written;
//   flagWords int32 words at o_flags: the chains' tickets and flags (ssdChainBlocks).
//
// Kernels, in launch order (grids in ssd's op, runtime/ops/Ssd.cpp):
//   ssd_chunk_cumsum  (slots, cdiv(H, meta:BLOCK_H)): the chunk table (a packed slot finds its
//     sequence by a binary search of `search_steps` steps over cu), dt' and its cumsum; reports
//     bad cu_seqlens entries (slot i checks sequence i).
//   ssd_bmm           (slots, G, (Q/64)^2): CB, blocks above the diagonal skipped.
//   ssd_chunk_state   (slots, H, cdiv(P, BLOCK_P) * cdiv(N, BLOCK_N)), flattened (ssdSlotHeadGrid):
//     the chunk's state from zero, sum_t x_t (B_t dt'_t exp(cum_last - cum_t))^T. With the flag
//     pass_states (the op's whole calls without sequence decays) it also passes the states: a
//     program waits for the state entering its chunk (its sequence's previous chunk's program
//     writes it, then sets a flag), adds its own, and hands the next chunk its entering state,
//     or writes the sequence's block and final states, as state_passing would, bitwise; then
//     state_passing does not run.
//   ssd_state_passing (cdiv(P N, BLOCK), H, nseq): per sequence, serially over its chunks, from
//     its initial state: writes the entering states, block (prefix-cache) states, the final state
//     and the sequence's decay; reports bad cu_seqlens entries and slots.
//   ssd_chunk_scan    (slots, H, (Q/64) * cdiv(P, BLOCK_P)), flattened (ssdSlotHeadGrid):
//     y = exp(cum_i) C_i . S_in + sum_{j <= i} CB_ij exp(cum_i - cum_j) dt'_j x_j + D x_i, to y
//     where the call keeps it (has_y, for the backward), and out = y times silu(z).
#pragma once
#include <cstdint>

#include "kernels_dsl/Signature.h"

namespace ssmjit::kernels {

namespace ssd {
using namespace dsl::decl;

// The tensors the forward and backward kernels share: x/z[b, l, h, p], dt[b, l, h], B/C[b, l, g,
// n], A/dtb[h], Dv[h, p] (p stride 0 for D (H,)), the workspace and its chunk table, cu_seqlens,
// the state slot indices and the device status record.
inline constexpr TensorArg x{"x", F, {"b", "l", "h", "p"}}, dt{"dt", F, {"b", "l", "h"}}, A{"A", F, {"h"}},
    B{"B", F, {"b", "l", "g", "n"}}, C{"C", F, {"b", "l", "g", "n"}}, Dv{"Dv", F, {"h", "p"}, "D"},
    z{"z", F, {"b", "l", "h", "p"}}, dtb{"dtb", F, {"h"}}, ws{"ws", F, {}}, chunks{"chunks", I, {}, nullptr, M},
    cu{"cu", I, {""}, nullptr, M}, initIdx{"init_idx", I, {""}, nullptr, M}, finalIdx{"final_idx", I, {""}, nullptr, M},
    err{"err", I, {}, nullptr, M};

// out and y (before the gate) [b, l, h, p], init/final/blk[slot, h, p, n], decay[s, h], blk_idx[i, k].
inline constexpr TensorArg kTensors[] = {x,
                                         dt,
                                         A,
                                         B,
                                         C,
                                         Dv,
                                         z,
                                         dtb,
                                         {"out", F, {"b", "l", "h", "p"}, "o"},
                                         {"y", F, {"b", "l", "h", "p"}},
                                         {"init", F, {"slot", "h", "p", "n"}},
                                         {"final", F, {"slot", "h", "p", "n"}},
                                         {"blk", F, {"slot", "h", "p", "n"}},
                                         {"decay", F, {"s", "h"}},
                                         ws,
                                         chunks,
                                         cu,
                                         initIdx,
                                         finalIdx,
                                         {"blk_idx", I, {"i", "k"}, nullptr, M},
                                         err};
// hpg: heads a group (H / G). search_steps: binary-search steps over
// cu (packed). blk_tokens: block_state_tokens. kmax: blk_idx's columns. o_*: workspace offsets.
inline constexpr SizeArg kSizes[] = {{"H", Div},
                                     {"P", Bound},
                                     {"N", Bound},
                                     {"hpg", Bound},
                                     {"L", Div},
                                     {"nseq", Count},
                                     {"search_steps", Count},
                                     {"nslots_init", Count},
                                     {"nslots_final", Count},
                                     {"nslots_blk", Count},
                                     {"blk_tokens", Count},
                                     {"kmax", Count},
                                     {"o_dt", Div},
                                     {"o_cum", Div},
                                     {"o_st", Div},
                                     {"o_cb", Div},
                                     {"o_flags", Div}};
inline constexpr const char* kScalars[] = {"dt_min", "dt_max"};
inline constexpr const char* kFlags[] = {"has_cu",    "has_D",     "has_z",        "has_dtb",   "softplus",
                                         "has_clamp", "has_init",  "has_init_idx", "has_final", "has_final_idx",
                                         "has_blk",   "has_decay", "has_y",        "pass_states"};
}  // namespace ssd

inline constexpr dsl::Signature kSsdChunkCumsum{"ssd_chunk_cumsum", ssd::kTensors, ssd::kSizes, ssd::kScalars,
                                                ssd::kFlags};
inline constexpr dsl::Signature kSsdBmm{"ssd_bmm", ssd::kTensors, ssd::kSizes, ssd::kScalars, ssd::kFlags};
inline constexpr dsl::Signature kSsdChunkState{"ssd_chunk_state", ssd::kTensors, ssd::kSizes, ssd::kScalars,
                                               ssd::kFlags};
inline constexpr dsl::Signature kSsdStatePassing{"ssd_state_passing", ssd::kTensors, ssd::kSizes, ssd::kScalars,
                                                 ssd::kFlags};
inline constexpr dsl::Signature kSsdChunkScan{"ssd_chunk_scan", ssd::kTensors, ssd::kSizes, ssd::kScalars, ssd::kFlags};

// The CB kernel's and the scan's row and column blocks of a chunk (tokens).
inline constexpr int64_t kSsdTokenBlock = 64;

// ssd_state_passing's block for a call: {meta:BLOCK state elements, meta:num_warps}. Threads own
// 8 elements each (two 16-byte runs) while the grid still covers an H100's warp slots (132 SMs x
// 64 warps), 4 otherwise, so that a few long sequences (few heads x sequences) keep twice the
// threads at work.
struct SsdPassBlock {
  int64_t block, warps;
};
SsdPassBlock ssdStatePassingBlock(int64_t PN, int64_t H, int64_t nseq);

// The grid of a kernel over (slot, head, block) (ssdSlotHeadBlock, SsdChunks.h) for its
// meta:slot_inner: one flat axis of slots * H * blocks programs, or (slots, H, blocks).
struct SsdGrid {
  int64_t x, y, z;
};
inline SsdGrid ssdSlotHeadGrid(bool slotInner, int64_t slots, int64_t H, int64_t blocks) {
  return slotInner ? SsdGrid{slots, H, blocks} : SsdGrid{slots * H * blocks, 1, 1};
}

// The chains of programs that pass states (chunk_state under pass_states, and the backward's
// dstates): int32 words at o_flags, the ticket counter at word 0 and, from word kSsdFlagBase, one
// flag a (slot, head, state block) at kSsdFlagBase + (s H + h) ssdChainBlocks(P, N) + b, set once
// the program of slot s has handed its state on. The blocks are counted for the smallest state
// block such a kernel takes (BLOCK_P >= 32, BLOCK_N >= 16). The ops zero the words before each
// launch of a chained kernel.
inline constexpr int64_t kSsdMinStateBlockP = 32, kSsdMinStateBlockN = 16, kSsdFlagBase = 16;
inline int64_t ssdChainBlocks(int64_t P, int64_t N) {
  return ((P + kSsdMinStateBlockP - 1) / kSsdMinStateBlockP) * ((N + kSsdMinStateBlockN - 1) / kSsdMinStateBlockN);
}

// Where the workspace keeps what (float32 elements; each region 16-aligned).
struct SsdWorkspaceLayout {
  int64_t slots = 0, oDt = 0, oCum = 0, oSt = 0, oCb = 0, oFlags = 0, flagWords = 0, total = 0;
};
inline SsdWorkspaceLayout ssdWorkspaceLayout(int64_t slots, int64_t H, int64_t G, int64_t P, int64_t N, int64_t Q) {
  auto up = [](int64_t v) { return (v + 15) / 16 * 16; };
  SsdWorkspaceLayout w;
  w.slots = slots;
  w.oDt = up(4 * slots);
  w.oCum = w.oDt + up(slots * H * Q);
  w.oSt = w.oCum + up(slots * H * Q);
  w.oCb = w.oSt + up(slots * H * P * N);
  w.oFlags = w.oCb + up(slots * G * Q * Q);
  w.flagWords = kSsdFlagBase + slots * H * ssdChainBlocks(P, N);
  w.total = w.oFlags + w.flagWords;
  return w;
}

// Device status codes (err[0]; err[1..3] as named).
inline constexpr long long kErrSsdCuSeqlens = 40;   // sequence i, cu[i], cu[i + 1]
inline constexpr long long kErrSsdInitSlot = 41;    // sequence i, slot, slots
inline constexpr long long kErrSsdFinalSlot = 42;   // sequence i, slot, slots
inline constexpr long long kErrSsdBlockSlot = 43;   // sequence i, slot, slots
inline constexpr long long kErrSsdBlockCount = 44;  // sequence i, its blocks, kmax

}  // namespace ssmjit::kernels
