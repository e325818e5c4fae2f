// Mamba-2 SSD chunked-scan problems for the tests and `ssmjit demo`: host tensors with fresh random
// inputs and poisoned outputs (dense rows or one packed row of sequences of given lengths, any
// dtype per tensor, optional D (per head or per channel), z, dt_bias, the clamp, initial and final
// states through permuted slots, block states, the sequences' decays), and their device copies.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "ssmjit/ops.h"
#include "tools/problems/ConvProblem.h"  // DeviceTensors
#include "tools/problems/HostTensor.h"

namespace ssmjit::testing {

struct SsdCase {
  int64_t batch = 1, L = 7, H = 4, P = 3, G = 2, N = 5;
  std::vector<int64_t> lens;  // packed (cu_seqlens) when not empty: batch 1, L = their sum
  DType xType = DType::F32, dtType = DType::F32, bcType = DType::F32, zType = DType::F32;
  DType outType = DType::F32, stateType = DType::F32, indexType = DType::I32;
  bool hasD = true, dPerChannel = false, hasZ = true, hasDtBias = true, softplus = true;
  bool bigDt = false;                // every 5th dt is 21..24: past softplus' threshold
  float dtMin = 0.0f, dtMax = 0.0f;  // the clamp
  double aLo = -4.0, aHi = -0.25;    // A ~ U(aLo, aHi)
  bool initial = false, final = false;
  bool inPlace = false;      // one tensor for both states
  bool slotIndices = false;  // permuted slots with a -1 each (initial of sequence 1, final of the last)
  int64_t blockTokens = 0;   // K: block states through block_state_indices
  bool decay = false, hasOut = true;
  bool keepY = false;  // y (fp32, before the gate) beside out
  int chunk = 64;
  uint64_t seed = 1;
};

// Host tensors for one call: fresh random inputs, poisoned outputs.
struct SsdProblem {
  SsdCase c;
  HostTensor x, dt, A, B, C, Dv, z, dtBias, out, cu, init, initIdx, fin, finIdx, blk, blkIdx, decay, y;
  int64_t nseq = 0, S = 0, kmax = 0, blockSlots = 0;
  std::vector<int64_t> row, start, len, initSlot, finalSlot;  // per sequence (-1: none)
  std::vector<int64_t> blockSlot;                             // [i * kmax + k], -1: none

  explicit SsdProblem(const SsdCase& c);

  const HostTensor& finalHolder() const { return c.inPlace && c.initial ? init : fin; }
  // The longest sequence: the length its recurrence's fp32 error grows with (Tolerance.h).
  int64_t longest() const { return *std::max_element(len.begin(), len.end()); }

  SsdArgs args(const Viewer& view = hostView) const;  // no workspace
  // all() order: 0 x, 1 dt, 2 A, 3 B, 4 C, 5 Dv, 6 z, 7 dtBias, 8 out, 9 cu, 10 init, 11 initIdx,
  // 12 fin, 13 finIdx, 14 blk, 15 blkIdx, 16 decay, 17 y (undefined tensors still listed).
  std::vector<HostTensor*> all() {
    return {&x,  &dt,   &A,       &B,   &C,      &Dv,  &z,      &dtBias, &out,
            &cu, &init, &initIdx, &fin, &finIdx, &blk, &blkIdx, &decay,  &y};
  }
};

}  // namespace ssmjit::testing
