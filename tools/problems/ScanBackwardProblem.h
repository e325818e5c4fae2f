// Selective-scan (Mamba-1) backward problems for the tests: a forward problem (ScanProblem: its
// inputs random, its out and final states unused by the backward), a random dout (and, when
// asked, dfinal_states), and every gradient poisoned, in the forward's layouts (plain or strided)
// and any dtype per gradient; and their device copies.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ssmjit/ops.h"
#include "tools/problems/ConvProblem.h"  // DeviceTensors
#include "tools/problems/HostTensor.h"
#include "tools/problems/ScanProblem.h"

namespace ssmjit::testing {

struct ScanBackwardCase {
  ScanCase fwd;
  DType doutType = DType::F32, duType = DType::F32, ddeltaType = DType::F32, dzType = DType::F32;
  DType dBType = DType::F32, dCType = DType::F32;  // when time-varying (constant: fp32)
  DType dStateType = DType::F32;                   // dfinal_states and dinitial_states
  // dfinal_states: the slots of the forward's final-state holder, through its
  // final_state_indices (forces fwd.finalStates). dinitial_states: the initial states' slots
  // (forces fwd.initialStates; in place, the one shared state tensor's).
  bool dfinalStates = false, dinitialStates = false;
  std::string name() const;  // gtest-safe
};

// all() order (fixed; undefined tensors still listed): 0..13 the forward's (ScanProblem::all()),
// then 14 dout, 15 dfinal, 16 du, 17 ddelta, 18 dA, 19 dB, 20 dC, 21 dD, 22 dz, 23 ddeltaBias,
// 24 dinit: the gradients, kScanGradients (their arguments' names) from index kFirstScanGradient.
enum : int { kDu = 16, kDdelta, kDA, kDB, kDC, kDD, kDz, kDbias, kDinit };
inline constexpr int kFirstScanGradient = kDu;
inline constexpr const char* kScanGradients[] = {"du",          "ddelta",         "dA", "dB", "dC", "dD", "dz",
                                                 "ddelta_bias", "dinitial_states"};
struct ScanBackwardProblem {
  ScanBackwardCase c;
  ScanProblem f;
  HostTensor dout, dfinal, du, ddelta, dA, dB, dC, dD, dz, ddeltaBias, dinit;

  explicit ScanBackwardProblem(const ScanBackwardCase& c);
  // forward = f.args(view); no workspace
  SelectiveScanBackwardArgs args(const Viewer& view = hostView) const;
  std::vector<char> slotsWritten() const;  // per slot of dinit: read (so written) by some sequence
  // What the backward writes of gradient k (an all() index): dinit's slotsWritten(), every row of
  // the others.
  std::vector<char> written(int k);
  std::vector<HostTensor*> all();
};

}  // namespace ssmjit::testing
