// The Mamba-2 SSD chunked scan's backward kernels and their contract with the op
// (ssmjit::ssd_backward, runtime/ops/SsdBackward.cpp). The op first runs the forward (ssd) into
// the front of its workspace (Ssd.h's layout: the chunk table, dt', dA_cumsum, the entering
// states, CB), and y (before the gate, D x included) into the workspace's y plane unless the
// caller's forward kept it (forward.y: then chunk_scan does not run again); then these kernels,
// in launch order:
//   ssd_bwd_dstates       (slots, H, cdiv(P, BLOCK_P) cdiv(N, BLOCK_N)), flattened, programs in
//     reverse slot order by ticket: per chunk c, the gradient its own outputs give the entering
//     state, local_c = sum_i exp(cum_i) dy_i C_i^T, and, passed along a chain of programs from the
//     sequence's last chunk (d(final state) by slot, -1 or none: zeros), g_c = local_c +
//     exp(cum_last,c) g_{c+1}: the g plane holds g_{c+1} (the gradient of chunk c's own state)
//     at slot c, the pass plane exp(cum_last,c) S_in,c . g_{c+1} per program (pass_parts a slot
//     and head), dinitial_states g_0. Reports bad d(final state) and d(initial state) slots.
//   ssd_bwd_dx            (slots, H, (Q/64) cdiv(P, kSsdBwdBlockP(P))): per 64 tokens j and block
//     of p: acc_j = exp(cum_last - cum_j) B_j . g + sum_{i >= j} CB_ij exp(cum_i - cum_j) dy_i;
//     dx = dt'_j acc + D dy_j, dz; per token partials (per block of p) of u = dy . (y - D x),
//     ddt's s = x . acc and w = dt' x . (the state part of acc); dD partials per 64 tokens.
//   ssd_bwd_dcb           (slots, G, (Q/64)^2): dCB_ij = sum over the group's heads in order of
//     exp(cum_i - cum_j) dt'_j dy_i . x_j, j <= i, to the dcb plane.
//   ssd_bwd_db / ssd_bwd_dc (slots, G, (Q/64) cdiv(N, BLOCK_N)): dB_j = sum_{i >= j} dCB_ij C_i +
//     sum_h dt'_j exp(cum_last - cum_j) x_j . g_h; dC_i = sum_{j <= i} dCB_ij B_j +
//     sum_h exp(cum_i) dy_i . S_in,h.
//   ssd_bwd_dt            (slots, cdiv(H, BLOCK_H)): d cum_t = u_t - dt'_t s_t, its reverse
//     cumsum plus the chunk's last-position terms (sum of w, the pass plane) gives d(dt' A);
//     ddt through the clamp, softplus and bias; per-chunk partials of dA and ddt_bias.
//   ssd_bwd_sums          (H, 1, 1): dA, ddt_bias and dD as fixed-order sums of the partials.
// Every sum runs in a fixed order (no atomics); a chunk's arithmetic reads its own sequence only.
//
// Workspace (float32), after the forward's region: the y plane [b, l, h, p] (none where the
// forward kept y; the kernels read y through their y argument either way); g[slot, h, P, N] at o_g;
// three token planes [slot, h, cdiv(P, BLOCK_P), Q] (u, s, w) at o_tok; dD partials
// [slot, Q/64, h, P] at o_dd; the pass plane [slot, h, pass_parts] at o_pn (room for the
// smallest state blocks);
// dA and ddt_bias partials [2, slot, h] at o_sl; dCB[slot, g, Q, Q] at o_dcb.
#pragma once
#include <algorithm>
#include <cstdint>

#include "kernels_dsl/Signature.h"
#include "kernels_dsl/ssd/Ssd.h"

namespace ssmjit::kernels {

namespace ssd_bwd {
using namespace dsl::decl;

// The token kernels' arguments: the forward's inputs, y, dout and the per-token and per-head
// gradients (dD's p stride 0 for D (H,)).
inline constexpr TensorArg kTensors[] = {ssd::x,
                                         ssd::dt,
                                         ssd::A,
                                         ssd::B,
                                         ssd::C,
                                         ssd::Dv,
                                         ssd::z,
                                         ssd::dtb,
                                         {"y", F, {"b", "l", "h", "p"}},
                                         {"dout", F, {"b", "l", "h", "p"}, "do"},
                                         {"dx", F, {"b", "l", "h", "p"}},
                                         {"ddt", F, {"b", "l", "h"}},
                                         {"dA", F, {"h"}},
                                         {"dB", F, {"b", "l", "g", "n"}},
                                         {"dC", F, {"b", "l", "g", "n"}},
                                         {"dD", F, {"h", "p"}},
                                         {"dz", F, {"b", "l", "h", "p"}},
                                         {"ddtb", F, {"h"}},
                                         ssd::ws,
                                         ssd::chunks};
inline constexpr SizeArg kSizes[] = {
    {"H", Div},      {"P", Bound},    {"N", Bound},    {"hpg", Bound}, {"L", Div},           {"slots", Count},
    {"o_dt", Div},   {"o_cum", Div},  {"o_st", Div},   {"o_cb", Div},  {"o_g", Div},         {"o_tok", Count},
    {"o_dd", Count}, {"o_pn", Count}, {"o_sl", Count}, {"o_dcb", Div}, {"pass_parts", Count}};
inline constexpr const char* kScalars[] = {"dt_min", "dt_max"};
// has_init: the call's forward took initial states; has_dfinal: the final states' gradients are
// given. Without them a sequence's first chunk enters from zeros (dC skips its states part) and
// its last chunk's g is zero (dx and dB skip theirs).
inline constexpr const char* kFlags[] = {"has_D",    "d_per_channel", "has_z",    "has_dtb",
                                         "softplus", "has_clamp",     "has_init", "has_dfinal"};

// ssd_bwd_dstates' arguments: the token kernels' and what passing the states' gradients reads
// and writes (d(final state) by slot, d(initial state) to its slot, cu_seqlens for the chunks'
// sequences, the chain's words at o_flags, the device status record).
inline constexpr TensorArg kChainTensors[] = {{"dfinal", F, {"slot", "h", "p", "n"}},
                                              {"dinit", F, {"slot", "h", "p", "n"}},
                                              ssd::cu,
                                              ssd::initIdx,
                                              ssd::finalIdx,
                                              ssd::err};
inline constexpr SizeArg kChainSizes[] = {
    {"nseq", Count}, {"nslots_init", Count}, {"nslots_final", Count}, {"o_flags", Div}};
inline constexpr const char* kChainFlags[] = {"has_cu", "has_init_idx", "has_final_idx", "has_dinit"};
inline constexpr auto kDstatesTensors = concat(kTensors, kChainTensors);
inline constexpr auto kDstatesSizes = concat(kSizes, kChainSizes);
inline constexpr auto kDstatesFlags = concat(kFlags, kChainFlags);

// The signature every kernel but dstates shares, under the kernel's name.
constexpr dsl::Signature signature(const char* kernel) { return {kernel, kTensors, kSizes, kScalars, kFlags}; }
}  // namespace ssd_bwd

inline constexpr dsl::Signature kSsdBwdDstates{"ssd_bwd_dstates", ssd_bwd::kDstatesTensors, ssd_bwd::kDstatesSizes,
                                               ssd_bwd::kScalars, ssd_bwd::kDstatesFlags};
inline constexpr dsl::Signature kSsdBwdDx = ssd_bwd::signature("ssd_bwd_dx");
inline constexpr dsl::Signature kSsdBwdDcb = ssd_bwd::signature("ssd_bwd_dcb");
inline constexpr dsl::Signature kSsdBwdDb = ssd_bwd::signature("ssd_bwd_db");
inline constexpr dsl::Signature kSsdBwdDc = ssd_bwd::signature("ssd_bwd_dc");
inline constexpr dsl::Signature kSsdBwdDt = ssd_bwd::signature("ssd_bwd_dt");
inline constexpr dsl::Signature kSsdBwdSums = ssd_bwd::signature("ssd_bwd_sums");

// The block of p ssd_bwd_dx takes (its token planes have cdiv(P, it) partials a token).
inline int64_t ssdBwdBlockP(int64_t P) { return P <= 32 ? 32 : 64; }

// Where the backward's workspace keeps what (float32 elements; each region 16-aligned), after
// the forward's `fwdTotal` elements (ssdWorkspaceLayout); the y plane only without `savedY`.
struct SsdBwdWorkspaceLayout {
  int64_t oY = 0, oG = 0, oTok = 0, oDd = 0, oPn = 0, oSl = 0, oDcb = 0, total = 0;
};
inline SsdBwdWorkspaceLayout ssdBwdWorkspaceLayout(int64_t fwdTotal, int64_t slots, int64_t rowsTokens, int64_t H,
                                                   int64_t G, int64_t P, int64_t N, int64_t Q, bool savedY) {
  auto up = [](int64_t v) { return (v + 15) / 16 * 16; };
  auto cdiv = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
  SsdBwdWorkspaceLayout w;
  w.oY = up(fwdTotal);
  w.oG = w.oY + (savedY ? 0 : up(rowsTokens * H * P));
  w.oTok = w.oG + up(slots * H * P * N);
  w.oDd = w.oTok + up(3 * slots * H * cdiv(P, ssdBwdBlockP(P)) * Q);
  w.oPn = w.oDd + up(slots * (Q / 64) * H * P);
  w.oSl = w.oPn + up(slots * H * ssdChainBlocks(P, N));
  w.oDcb = w.oSl + up(2 * slots * H);
  w.total = w.oDcb + slots * G * Q * Q;
  return w;
}

}  // namespace ssmjit::kernels
