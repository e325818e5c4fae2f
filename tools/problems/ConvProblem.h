// Causal conv1d problems for the tests and `ssmjit bench`: host tensors with random inputs and
// poisoned outputs (dense rows or one packed row of sequences of given lengths, either memory
// order, optional bias and conv states with slot indices), for the forward, the backward and the
// decode update, and their device copies.
#pragma once
#include <cstdint>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "runtime/DeviceBuffer.h"
#include "ssmjit/ops.h"
#include "tools/problems/HostTensor.h"

namespace ssmjit::testing {

enum class ConvPacking { Dense, CuSeqlens, Positions };

// What the forward's and the backward's cases share: the forward's inputs and options.
struct ConvInputsCase {
  ConvLayout layout = ConvLayout::ChannelFirst;
  // x (and out, dout, dx); weight, bias (and their gradients); the states (and their gradients).
  DType xType = DType::F32, wType = DType::F32, stateType = DType::F32;
  int W = 4;
  int64_t D = 64;
  std::vector<int64_t> lens = {100, 100};  // Dense: every length equal (one row each)
  ConvPacking packing = ConvPacking::Dense;
  bool bias = true, silu = true;
  bool slotIndices = false;  // slots through index tensors (permuted, one -1 each when > 1 seq)
  uint64_t seed = 1;
};

// A packed row of 17 bf16 sequences (W 4, D 96) through cu_seqlens, one tile holding more
// sequence starts than kNearStarts: the GPU suites compare it with each sequence alone.
ConvInputsCase manyStartsRow(ConvLayout layout);

// The GPU suites' matrix of inputs: both memory orders, fp32 and bf16 x (fp32 weight), widths 2,
// 3, 4, 5 and 8, D 67, dense rows and packed ones (cu_seqlens with slot indices, positions), with
// seeds from `seed` on.
std::vector<ConvInputsCase> convInputsMatrix(uint64_t seed);

struct ConvCase : ConvInputsCase {
  bool initialStates = false, finalStates = false;  // same tensor (in place) when both
  std::string name() const;
};
// gtest prints a parameterised case by its name (else its bytes would go into CTest's test names).
inline std::ostream& operator<<(std::ostream& os, const ConvCase& c) { return os << c.name(); }

struct ConvProblem {
  ConvCase c;
  HostTensor x, weight, bias, out, cu, pos, states, initIdx, finalIdx;
  explicit ConvProblem(const ConvCase& c);
  CausalConv1dArgs args(const Viewer& view = hostView) const;
  std::vector<char> slotsWritten() const;  // per state slot: some sequence's final state goes there
  std::vector<HostTensor*> all();
};

// A backward call: the forward's inputs (random), dout and dfinal_states (random), the gradients
// (poisoned). States are an input here: initial_states and, separately, dfinal_states, each with
// nseq + 2 slots (the initial slots distinct).
struct ConvBackwardCase : ConvInputsCase {
  bool initialStates = false, dfinalStates = false;
  bool dinitialStates = false;  // needs initialStates
  std::string name() const;
  // The fraction of dx's elements the backward rounds twice (Tolerance.h's Bound::twiceRounded):
  // with d(final states), the W - 1 tokens before each sequence's end get dfinal added by a second
  // kernel, after the first stored dx.
  double dxTwiceRounded() const;
};
inline std::ostream& operator<<(std::ostream& os, const ConvBackwardCase& c) { return os << c.name(); }

// all() lists the tensors in this order (the GPU tests download by index):
//   0 x, 1 weight, 2 bias, 3 dout, 4 cu, 5 pos, 6 states (initial_states), 7 initIdx, 8 dfinal,
//   9 finalIdx, 10 dx, 11 dweight, 12 dbias, 13 dinit.
// Tensors a case does not use are undefined (still listed, so the indices stay fixed).
struct ConvBackwardProblem {
  ConvBackwardCase c;
  HostTensor x, weight, bias, dout, cu, pos, states, initIdx, dfinal, finalIdx, dx, dweight, dbias, dinit;
  explicit ConvBackwardProblem(const ConvBackwardCase& c);
  CausalConv1dBackwardArgs args(const Viewer& view = hostView) const;  // no workspace
  std::vector<char> slotsWritten() const;  // per slot of dinit: read (so written) by some sequence
  std::vector<HostTensor*> all();
  // The gradients' bytes (dx, dweight, dbias, dinit): what a refused call must leave as it was.
  std::vector<std::vector<uint8_t>> gradientBytes() const {
    return {dx.bytes, dweight.bytes, dbias.bytes, dinit.bytes};
  }
};

struct ConvUpdateCase {
  DType xType = DType::F32, stateType = DType::F32;
  int W = 4;
  int64_t D = 64, batch = 3, L = 1, slots = 5;
  bool bias = true, silu = true, commit = true, indices = true;  // indices: permuted, row 1 = -1
  uint64_t seed = 1;
  std::string name() const;
};
inline std::ostream& operator<<(std::ostream& os, const ConvUpdateCase& c) { return os << c.name(); }

struct ConvUpdateProblem {
  ConvUpdateCase c;
  HostTensor state, x, weight, bias, out, idx;
  explicit ConvUpdateProblem(const ConvUpdateCase& c);
  CausalConv1dUpdateArgs args(const Viewer& view = hostView) const;
  std::vector<char> rowsWritten() const;   // per row of out: not a pad
  std::vector<char> slotsWritten() const;  // per state slot: a row's, with commit
  std::vector<HostTensor*> all();
};

// Device copies of host tensors (same bytes, gaps and poison included, same strides).
struct DeviceTensors {
  std::vector<const HostTensor*> host;  // the tensors copied, in order
  std::vector<DeviceBuffer> bufs;
  explicit DeviceTensors(const std::vector<const HostTensor*>& host);
  explicit DeviceTensors(const std::vector<HostTensor*>& host)
      : DeviceTensors(std::vector<const HostTensor*>(host.begin(), host.end())) {}
  TensorView view(size_t k, const HostTensor& h) const;  // CUDA view of tensor k
  TensorView view(const HostTensor& h) const;            // CUDA view of `h`, one of `host`
  Viewer viewer() const;                                 // view(h), for a problem's args()
  std::vector<TensorView> views() const;                 // view(k, host[k]) for every k, in order
  std::vector<uint8_t> download(size_t k) const;
};

// A problem's call on device copies (d = DeviceTensors(p.all())); a workspace is left undefined:
// the caller sizes and sets it.
template <class Problem>
auto deviceArgs(const Problem& p, const DeviceTensors& d) {
  return p.args(d.viewer());
}

}  // namespace ssmjit::testing
