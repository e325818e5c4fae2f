// What the float64 references of ssd and ssd_backward share: the call's sequences and state
// slots, read and checked on the host before anything is written, and dt' as the contract
// defines it (with its derivative). Errors are InvalidArgument, prefixed `op`.
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

#include "runtime/ops/SsdCheck.h"
#include "runtime/reference/ElementAccess.h"
#include "runtime/reference/RefHelpers.h"
#include "runtime/reference/ScanSequences.h"
#include "ssmjit/ops.h"

namespace ssmjit::reference {

// The sequences and, per sequence, the slots it reads and writes (-1: none; a vector is empty
// when its tensor is not given). blockSlot[i * kmax + k] for the blocks sequence i completes,
// -1 elsewhere.
struct SsdCall {
  ScanSequences seq;
  std::vector<int64_t> initSlot, finalSlot, blockSlot;
  int64_t blocks(int64_t i) const;  // blocks sequence i completes: len / K (0 without K)
  int64_t blockTokens = 0;
};

// Reads cu_seqlens and every slot index, and refuses (before anything is written): a bad
// cu_seqlens entry; a slot outside [0, S) other than -1; a sequence with more blocks than
// block_state_indices has columns. The forward (`forward`) also refuses two writes (final or
// block states) to one slot of one tensor, and a slot one sequence reads and another writes
// (states updated in place); the backward reads `finalStates` = dfinal_states through
// final_state_indices, ignores the block states, and with `distinctInitial` (dinitial_states
// given) refuses two sequences reading one initial slot (each slot's gradient has one writer).
SsdCall readSsdCall(const char* op, const SsdArgs& a, const detail::SsdDims& d, const TensorView& finalStates,
                    bool forward, bool distinctInitial);

// dt' of one token and head from its raw dt (ssmjit/ops.h), and d dt' / d dt: sigmoid(v) through
// the softplus where v = dt + dt_bias <= 20 (1 above: softplus passes it through), 0 where the
// clamp binds (v outside [dt_min, dt_max]).
struct DtPrime {
  double value, grad;
};
DtPrime dtPrime(const SsdArgs& a, double raw, int64_t h);

}  // namespace ssmjit::reference
