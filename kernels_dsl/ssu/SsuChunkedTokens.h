// The L-token Mamba-2 state update in the chunked (SSD) form, on the tensor cores: the tokens'
// contributions as products of small matrices instead of a token loop over the state.
// Internal to the selective-state-update kernel (SelectiveStateUpdate.cpp), which declares the
// arguments, loads the state tile and hands over what both forms share.
#pragma once
#include <cstdint>
#include <functional>

#include "compiler/IntMath.h"
#include "compiler/Specialization.h"
#include "kernels_dsl/Dsl.h"

namespace ssmjit::kernels {

// Tokens a chunk is padded to (a multiple of the mma's k-step of 16).
inline int64_t ssuChunkTokens(int64_t L) { return std::max<int64_t>(16, nextPow2(L)); }

// Where the form keeps what in its shared buffer (f32 offsets): B and C rows [token][n] (a row
// BN + 4 long: the mma's b reads of a warp then fall in distinct banks), x and dt' x [token][row],
// silu(z), the decays' prefix and suffix sums, a_s [s > u] for the segment sums, and G.
struct SsuChunkPlan {
  int64_t LD, BNs, LDs, oB, oC, oX, oDx, oZ, oCum, oRev, oSeg, oG, floats;
};
SsuChunkPlan ssuChunkPlan(int64_t L, int64_t BP, int64_t BN, bool withZ);

// Rows of a program: two a thread (the mma's pair) while a thread's share of the state stays at
// 64 values or fewer (N up to 128), else one.
int64_t ssuChunkRows(int64_t P, int64_t BN, int64_t numWarps);

// Whether the chunked form serves `s` (completed up to meta:BLOCK_N and meta:num_warps): Mamba-2
// heads, 2..16 tokens, the final state or none written (per-token snapshots need the state after
// every token: the token loop), rows of N from an mma's 16 to 256 (a thread's one row), staging
// that fits the shared buffer, and an arch with bf16 mma (sm_80+).
bool ssuChunkable(const Specialization& s);

struct SsuChunkInputs {
  dsl::Value state, x, dt, B, C, z, out;
  dsl::Value b, h, g, pidP, slot, L, P, N;
  dsl::Value offsN, maskN, mask2;  // the state tile's columns, and its mask
  bool wholeP;                     // the program's rows all lie inside P
  dsl::Value st;                   // the state tile [BLOCK_P, BLOCK_N], f32
  dsl::Value Ahead, biasHead, D;   // A and dt_bias of the head (scalars), D of the rows [BLOCK_P]
  dsl::Value sXb, sXl, sXh, sXp, sDtb, sDtl, sDth, sBb, sBl, sBg, sBn, sCb, sCl, sCg, sCn;
  dsl::Value sZb, sZl, sZh, sZp, sOb, sOl, sOh, sOp;
  std::function<dsl::Value(dsl::Value)> dtTransform;   // dt + bias -> dt'
  std::function<dsl::Value(dsl::Value)> stateOffsets;  // slot -> the state tile's offsets
};

void buildSsuChunkedTokens(dsl::KernelBuilder& k, const Specialization& spec, const SsuChunkInputs& in);

}  // namespace ssmjit::kernels
