// Selective-scan (Mamba-1) problems for the tests and `ssmjit bench-scan`: host tensors with fresh
// random inputs in realistic ranges and poisoned outputs (dense rows or one packed row of
// sequences of given lengths, constant or time-varying B/C with groups, any dtype per tensor,
// optional D, z, delta_bias, initial and final states through slots, plain or strided layouts),
// and their device copies.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "ssmjit/ops.h"
#include "tools/problems/ConvProblem.h"  // DeviceTensors
#include "tools/problems/HostTensor.h"

namespace ssmjit::testing {

struct ScanCase {
  int64_t batch = 2, D = 16, N = 8, L = 32;  // dense rows; packed: one row of sum(lens) tokens
  int64_t G = 1;                             // groups of the time-varying B/C
  bool bVarying = true, cVarying = true;     // else constant (D, N) fp32
  DType uType = DType::F32, deltaType = DType::F32, zType = DType::F32, outType = DType::F32;
  DType bType = DType::F32, cType = DType::F32;  // when time-varying
  DType stateType = DType::F32;                  // initial and final states
  bool hasD = true, hasZ = true, hasDeltaBias = true, softplus = true;
  std::vector<int64_t> lens;  // packed (cu_seqlens) when not empty: batch 1, L = their sum
  int64_t maxSeqlen = 0;      // max_seqlen of a packed call (0: none)
  int64_t serialSeqlen = 0;   // serial_seqlen
  bool initialStates = false, finalStates = false;
  bool inPlace = true;  // one tensor for both states when both are given
  // Slots through index tensors: a permutation of S = nseq + 2 slots (the same one for both
  // states when in place: two sequences must not share a slot), initial[1] = -1 and final[2] = -1
  // where those sequences exist. Without: sequence i uses slot i.
  bool slotIndices = false;
  DType indexType = DType::I32;  // cu_seqlens and the slot indices
  bool strided = false;          // padded, offset layouts; A, constant B/C and the states also transposed
  uint64_t seed = 1;
  std::string name() const;  // gtest-safe
};

// all() order (fixed; undefined tensors still listed): 0 u, 1 delta, 2 z, 3 out, 4 A, 5 B, 6 C,
// 7 Dv, 8 deltaBias, 9 cu, 10 initStates, 11 initIdx, 12 finalStates, 13 finalIdx.
// In place, the states are initStates and finalStates is undefined.
struct ScanProblem {
  ScanCase c;
  HostTensor u, delta, z, out, A, B, C, Dv, deltaBias, cu, initStates, initIdx, finalStates, finalIdx;
  int64_t nseq = 0, S = 0;                   // sequences; slots of each states tensor
  std::vector<int64_t> row, start, len;      // sequence i: tokens [start, start + len) of row `row`
  std::vector<int64_t> initSlot, finalSlot;  // per sequence (-1: none), empty without those states

  explicit ScanProblem(const ScanCase& c);
  SelectiveScanArgs args(const Viewer& view = hostView) const;  // no workspace
  bool inPlace() const { return c.inPlace && c.initialStates && c.finalStates; }
  const HostTensor& finalHolder() const { return inPlace() ? initStates : finalStates; }
  std::vector<char> slotsWritten() const;  // per slot of finalHolder(): written by some sequence
  // The longest sequence: the length its recurrence's fp32 error grows with (Tolerance.h).
  int64_t longest() const { return *std::max_element(len.begin(), len.end()); }
  std::vector<HostTensor*> all();
};

// Copies tokens [start, start + len) of `from`'s row 0 (the last axis) into `to` (batch 1, len
// tokens): a packed sequence's inputs for running it alone. Does nothing when `from` is undefined.
void copyTokens(const HostTensor& from, HostTensor& to, int64_t start);

}  // namespace ssmjit::testing
