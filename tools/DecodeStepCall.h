// One Mamba-2 speculative-decoding step (mamba2_decode_step) as the tool describes it from
// options, with views at fake device addresses, so that `ssmjit inspect` and `prewarm` name its
// kernel without a GPU. The conv state, the draft caches, dt, z and y share the drafts' dtype (as
// `ssmjit bench-decode` lays them out); the SSM state has its own.
#pragma once
#include <cstdint>
#include <string>

#include "compiler/Specialization.h"
#include "ssmjit/ops.h"

namespace ssmjit::tool {

struct DecodeStepCall {
  int64_t H = 80, P = 64, N = 128, G = 1, W = 4, batch = 16, L = 4, cacheTokens = 4;
  int64_t ringDepth = 0;  // > 0: deferred commit with a ring of this depth
  DType state = DType::F32, drafts = DType::BF16;
  DecodeStepParts parts = DecodeStepParts::ReplayAndVerify;
  bool convBias = true, hasD = true, hasZ = true, dtBias = true, softplus = true, stateIndices = true;
  std::string arch = "sm_90a";
};

// "decode-step H80 P64 N128 G1 W4 b=16 L=4 Lc=4 fused state float32 drafts bfloat16 no-z" (" R=8"
// after Lc with a ring).
std::string decodeStepCallLabel(const DecodeStepCall& c);

// The specialisation the op compiles for the call, from its own check and binding. Throws
// UsageError("the decode-step options give an invalid call: ...") with the op's message for a
// call it rejects.
Specialization decodeStepCallSpecialization(const DecodeStepCall& c);

}  // namespace ssmjit::tool
