// The check every decode-step GPU test makes after a step: what the device copies hold against the
// float64 reference's step from the same start (already run on the host problem `ref`): the conv
// state (copies of the replayed drafts: exact) and the SSM state in the committed slots, y in the
// verified rows (a few fp32 steps), the caches, cached_tokens and (deferred) the ring bit for bit,
// arrivals left zero, and every other byte as it was.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "GpuTest.h"
#include "tools/problems/DecodeProblem.h"

namespace ssmjit::testing {

// The bytes of the tensors a step may write, and the slots whose states it writes, before it.
struct DecodeStepBefore {
  std::vector<uint8_t> conv, ssm, y;
  std::vector<char> committed;
  explicit DecodeStepBefore(const DecodeProblem& p)
      : conv(p.convState.bytes), ssm(p.ssmState.bytes), y(p.y.bytes), committed(p.slotsCommitted()) {}
};

// d: copies of a problem's all() (conv state 0, SSM state 1, xbc cache 2, dt cache 3, cached
// tokens 4, arrivals 5, y 16, xbc ring 17, dt ring 18, ring tokens 19).
inline void expectStepMatches(const DecodeProblem& ref, const DeviceTensors& d, const DecodeStepBefore& before) {
  const DecodeCase& c = ref.c;
  const std::vector<char>& committed = before.committed;
  expectWithin(compareTensor(ref.convState, d.download(0), before.conv, committed), bound(c.convStateType, kExact),
               "conv_state");
  expectWithin(compareTensor(ref.ssmState, d.download(1), before.ssm, committed), bound(c.ssmStateType, kFp32Short),
               "ssm_state");
  if (c.parts != DecodeStepParts::ReplayOnly)
    expectWithin(compareTensor(ref.y, d.download(16), before.y, ref.rowsVerified()), bound(c.xType, kFp32Short), "y");
  EXPECT_EQ(d.download(2), ref.xbcCache.bytes) << "xbc_cache";
  EXPECT_EQ(d.download(3), ref.dtCache.bytes) << "dt_cache";
  EXPECT_EQ(d.download(4), ref.cachedTokens.bytes) << "cached_tokens";
  if (c.R > 0) {
    EXPECT_EQ(d.download(17), ref.xbcRing.bytes) << "xbc_ring";
    EXPECT_EQ(d.download(18), ref.dtRing.bytes) << "dt_ring";
    EXPECT_EQ(d.download(19), ref.ringTokens.bytes) << "ring_tokens";
  }
  const std::vector<uint8_t> arrivals = d.download(5);
  EXPECT_TRUE(std::all_of(arrivals.begin(), arrivals.end(), [](uint8_t v) { return v == 0; }))
      << "arrivals not left zero";
}

}  // namespace ssmjit::testing
