// The L-token Mamba-2 state update in the chunked (SSD) form, on the tensor cores: the tokens'
// contributions as products of small matrices instead of a token loop over the state.
// Internal to the selective-state-update kernel (SelectiveStateUpdate.cpp), which declares the
// arguments, loads the state tile and hands over what both forms share.
#pragma once
#include <cstdint>
#include <functional>

#include "compiler/Specialization.h"
#include "kernels_dsl/Dsl.h"

namespace ssmjit::kernels {

// Tokens a chunk is padded to (a multiple of the mma's k-step of 16).
inline int64_t ssuChunkTokens(int64_t L) { return std::max<int64_t>(16, dsl::nextPow2(L)); }

// Whether the chunked form serves `s` (completed up to meta:BLOCK_N): Mamba-2 heads, 2..16
// tokens, the final state or none written (per-token snapshots need the state after every
// token: the token loop), rows of N at least an mma's 16, and an arch with bf16 mma (sm_80+).
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
  std::function<dsl::Value(dsl::Value)> dtTransform;        // dt + bias -> dt'
  std::function<dsl::Value(dsl::Value)> stateOffsets;       // slot -> the state tile's offsets
};

void buildSsuChunkedTokens(dsl::KernelBuilder& k, const Specialization& spec, const SsuChunkInputs& in);

}  // namespace ssmjit::kernels
