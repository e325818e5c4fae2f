// Selective-state-update problems for checking the ops against the float64 reference: the
// description of one call (model form, sizes, dtypes, optional inputs, slots, write mode, layouts),
// the shapes of its tensors, random inputs in every supported dtype and layout with poisoned
// outputs and gaps, the slots a call may write, and the calls that run it. Shared by the tests
// and by `ssmjit demo` / `ssmjit bench`, so that all of them build and check a call the same way.
#pragma once
#include <array>
#include <cstdint>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "ssmjit/ops.h"
#include "ssmjit/tensor.h"
#include "tools/problems/HostTensor.h"

namespace ssmjit::testing {

// The tensors of a call, in kernel-argument order (opspec::ssuViews).
enum SsuTensor : int { kState, kX, kDt, kA, kB, kC, kD, kZ, kDtBias, kOut, kStateIdx, kDstIdx, kNumTensors };

// One call. Mamba-1 ignores H and G (P is the channel count D).
struct SsuCase {
  bool mamba2 = true;
  bool tokens = true;  // the multi-token op (else the one-token op; L must be 1)
  int64_t batch = 2, L = 1, H = 4, P = 8, N = 16, G = 2;
  DType stateT = DType::F32, inT = DType::F32, outT = DType::F32;  // inT: x, dt, B, C, z
  bool hasD = true, hasZ = true, hasDtBias = true, softplus = true, clamp = false;
  bool stateIdx = false;
  int pads = 0;            // rows marked -1 (needs stateIdx)
  int64_t spareSlots = 3;  // with stateIdx: slots no row reads (they must stay untouched)
  DType idxT = DType::I32;
  StateWrite write = StateWrite::Final;
  bool strided = false;   // padded / transposed / offset layouts on most tensors
  double decayScale = 1;  // A's range times this: at 10, Mamba-2 decays underflow within a few tokens
  uint64_t seed = 1;

  // Slots of the state: batch, or with stateIdx batch + spareSlots, plus batch * L destination
  // slots for PerToken writes.
  int64_t slots() const;
  std::string name() const;  // a test-name-safe summary: "m2_H4P8N16G2_b2_L1_stf32_..."
};
// gtest prints a parameterised case by its name (else its bytes would go into CTest's test names).
inline std::ostream& operator<<(std::ostream& os, const SsuCase& c) { return os << c.name(); }

// A Mamba-2 case with these head sizes, everything else at its default.
SsuCase mamba2Heads(int64_t H, int64_t P, int64_t N, int64_t G);
// Mamba-2 2.7B's heads: H 80, P 64, N 128, G 1.
inline SsuCase mamba2_2p7bHeads() { return mamba2Heads(80, 64, 128, 1); }

// dt' bounds of a case with `clamp`: inside the range of dt', so both bounds bite.
inline constexpr float kClampDtMin = 0.05f, kClampDtMax = 0.5f;

// One tensor of a call: whether the call passes it, its storage dtype and its shape in the op's
// documented layout (ssmjit/ops.h).
struct TensorDesc {
  const char* name = "";
  bool present = false;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  int64_t numel() const;  // 0 when absent
  size_t bytes() const;   // contiguous
};
std::array<TensorDesc, kNumTensors> ssuTensors(const SsuCase& c);

// The range an input is drawn from: bounded decays exp(A dt') in (0, 1), so the state stays
// bounded, and dt' > 0 after softplus.
std::pair<double, double> valueRange(SsuTensor t, const SsuCase& c);

// The call over `views` (SsuTensor order; undefined views for absent tensors) with the case's
// softplus, clamp and write mode.
SelectiveStateUpdateArgs ssuArgs(const SsuCase& c, const std::array<TensorView, kNumTensors>& views);

// A case's host tensors: random inputs in their storage dtypes and layouts, out all poison, slots
// a random permutation with `pads` rows set to -1.
struct SsuProblem {
  SsuCase c;
  int64_t S = 0;
  HostTensor state, x, dt, A, B, C, D, z, dtBias, out, idx, dst;
  std::vector<int64_t> readSlot;       // per row; -1: pad
  std::vector<char> slotMayBeWritten;  // per slot: written by this call (all else must not change)

  SelectiveStateUpdateArgs args() const;  // CPU views into this object's bytes
  // Every tensor, in SsuTensor order (undefined ones included).
  std::array<HostTensor*, kNumTensors> all() {
    return {&state, &x, &dt, &A, &B, &C, &D, &z, &dtBias, &out, &idx, &dst};
  }
  std::array<const HostTensor*, kNumTensors> all() const {
    return {&state, &x, &dt, &A, &B, &C, &D, &z, &dtBias, &out, &idx, &dst};
  }
};

// The problem of `c`, its inputs drawn from c.seed. Pads and PerToken writes turn stateIdx on,
// Mamba-1 sets H = G = 1 and the one-token op L = 1 (in the returned problem's c).
SsuProblem makeProblem(SsuCase c);

// Rows of out that are written: every row but the pads.
std::vector<char> rowsWritten(const SsuProblem& p);

// The op (the multi-token one if `tokens`) on the GPU, or its float64 reference.
void runOp(bool tokens, const SelectiveStateUpdateArgs& a, Stream stream = nullptr);
void runReference(bool tokens, const SelectiveStateUpdateArgs& a);
void runReference(const SsuProblem& p);  // updates p's state and out in place

// Token t of a multi-token call as a one-token call: x, dt, B, C, z and out lose their token
// axis, the state is written in place (Final) and no destination slots are passed, so that L
// such calls in order compute what the multi-token call computes.
SelectiveStateUpdateArgs oneTokenArgs(const SelectiveStateUpdateArgs& a, int64_t t);

}  // namespace ssmjit::testing
