// The layout matrix of every op (tests/support/Relayout.h): a few representative problems each,
// re-laid as a model hands them over, with int64 indices and 16-bit dtypes where the op takes
// them. Shared by the GPU runs (test_layouts_gpu.cpp) and the CPU pre-flight
// (test_relayout.cpp: the op's own checks accept every case, the reference gives the same bits).
//   Sliced:    the inputs as column slices of one (tokens, width) in_proj output, in its order
//              (Mamba-2 [z | x | B | C | dt], the decode step [z | xBC | dt], Mamba-1 [x | z]
//              along the channels), outputs inside wider rows, states inside a wider per-slot
//              block (the conv and SSM states of a slot side by side, as serving engines keep them);
//   Offset:    every tensor starting 1..3 elements into its buffer (no 16-byte alignment);
//   Broadcast: the parameters the header lets broadcast (stride 0) doing so.
#pragma once
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "tests/support/Relayout.h"
#include "tools/problems/ConvProblem.h"
#include "tools/problems/DecodeProblem.h"
#include "tools/problems/ScanBackwardProblem.h"
#include "tools/problems/ScanProblem.h"
#include "tools/problems/SsuProblem.h"

namespace layouts {

using namespace ssmjit;
using namespace ssmjit::testing;

enum class Placing { Contiguous, Sliced, Offset, Broadcast };
inline const char* placingName(Placing p) {
  return p == Placing::Contiguous ? "contiguous"
         : p == Placing::Sliced   ? "sliced"
         : p == Placing::Offset   ? "offset"
                                  : "broadcast";
}

// Elements of one index of dims [rowDims, ndim): a row's columns.
inline int64_t columns(const HostTensor& h, int rowDims) {
  int64_t n = 1;
  for (int d = rowDims; d < h.meta.ndim; ++d) n *= h.meta.shape[d];
  return n;
}

// `parts` (undefined ones take no columns) as consecutive column slices of one buffer whose rows
// are their first `rowDims` dims, in the order given.
inline void sliceColumns(const std::vector<HostTensor*>& parts, int rowDims) {
  int64_t total = 0;
  for (HostTensor* h : parts)
    if (h->defined) total += columns(*h, rowDims);
  int64_t lead = 0;
  for (HostTensor* h : parts) {
    if (!h->defined) continue;
    const int64_t n = columns(*h, rowDims);
    *h = relayout(*h, Slice{rowDims, lead, total - lead - n});
    lead += n;
  }
}

// Each of `ts` starting 1, 2, 3, 1, ... elements into its buffer.
inline void offsetAll(const std::vector<HostTensor*>& ts) {
  int k = 0;
  for (HostTensor* h : ts)
    if (h->defined) *h = relayout(*h, Slice{0, 1 + (k++ % 3), 0});
}

// Index tensors to int64 (values exact).
inline void widenIndices(const std::vector<HostTensor*>& ts) {
  for (HostTensor* h : ts)
    if (h->defined) *h = relayout(*h, kContiguous, DType::I64);
}

// A case of some op placed in memory one way.
template <class Case>
struct LayoutCase {
  Case c;
  Placing placing = Placing::Contiguous;
  std::string name() const { return std::string(placingName(placing)) + "_" + c.name(); }
};

// ---- selective state update -------------------------------------------------------------------

using SsuLayoutCase = LayoutCase<SsuCase>;

inline SsuProblem placedProblem(const SsuLayoutCase& lc) {
  SsuProblem p = makeProblem(lc.c);
  const int rowDims = p.c.tokens ? 2 : 1;
  switch (lc.placing) {
    case Placing::Contiguous:
      break;
    case Placing::Sliced:
      sliceColumns({&p.z, &p.x, &p.B, &p.C, &p.dt}, rowDims);
      p.out = relayout(p.out, Slice{rowDims, 3, 5});
      p.state = relayout(p.state, Slice{1, 40, 8});
      break;
    case Placing::Offset:
      offsetAll({&p.state, &p.x, &p.dt, &p.A, &p.B, &p.C, &p.D, &p.z, &p.dtBias, &p.out, &p.idx, &p.dst});
      break;
    case Placing::Broadcast:  // one value for every head (Mamba-1: A per channel, over the states)
      p.A = broadcastAlong(p.A, p.c.mamba2 ? 0 : 1);
      p.D = broadcastAlong(p.D, 0);
      p.dtBias = broadcastAlong(p.dtBias, 0);
      break;
  }
  return p;
}

inline std::vector<SsuLayoutCase> ssuLayoutCases() {
  std::vector<SsuLayoutCase> v;
  auto add = [&](SsuCase c, Placing pl, uint64_t seed) {
    c.seed = seed;
    v.push_back({c, pl});
  };
  SsuCase m2 = mamba2Heads(/*H=*/8, /*P=*/64, /*N=*/128, /*G=*/2);
  m2.batch = 5, m2.stateIdx = true, m2.pads = 1;
  {  // one token, fp16 everywhere, int64 slots, the inputs sliced from in_proj
    SsuCase c = m2;
    c.tokens = false;
    c.stateT = c.inT = c.outT = DType::F16;
    c.idxT = DType::I64;
    add(c, Placing::Sliced, 31);
  }
  {  // eight tokens (the chunked form), bf16 inputs, fp16 out, sliced, per-token snapshots
    SsuCase c = m2;
    c.L = 8;
    c.inT = DType::BF16, c.outT = DType::F16, c.stateT = DType::BF16;
    c.write = StateWrite::PerToken;
    c.idxT = DType::I64;
    add(c, Placing::Sliced, 32);
  }
  {  // three tokens (the token loop), fp16, every pointer off 16-byte alignment
    SsuCase c = m2;
    c.L = 3;
    c.stateT = c.inT = c.outT = DType::F16;
    add(c, Placing::Offset, 33);
  }
  {  // one token, Mamba-2, broadcast A, D, dt_bias
    SsuCase c = m2;
    c.tokens = false;
    c.inT = DType::BF16;
    add(c, Placing::Broadcast, 34);
  }
  {  // Mamba-1 form, two tokens, A broadcast over the states
    SsuCase c;
    c.mamba2 = false;
    c.P = 96, c.N = 16, c.L = 2, c.batch = 3;
    c.inT = DType::F16;
    add(c, Placing::Broadcast, 35);
  }
  return v;
}

// ---- causal conv1d: forward, backward, update ---------------------------------------------------

using ConvLayoutCase = LayoutCase<ConvCase>;

inline ConvProblem placedProblem(const ConvLayoutCase& lc) {
  ConvProblem p(lc.c);
  widenIndices({&p.cu, &p.pos, &p.initIdx, &p.finalIdx});
  const bool cl = lc.c.layout == ConvLayout::ChannelLast;
  switch (lc.placing) {
    case Placing::Sliced:
      // Channel-last: xBC, columns of in_proj's (tokens, width) rows after z, before dt; channel-
      // first: x of Mamba-1's (B, 2D, L) xz. Out in wider rows, states in a wider slot block.
      if (cl)
        p.x = relayout(p.x, Slice{2, 2 * lc.c.D, 24});
      else
        p.x = relayout(p.x, Slice{1, 0, columns(p.x, 1)});
      p.out = relayout(p.out, Slice{2, 3, 5});
      p.states = relayout(p.states, Slice{1, 10, 6});
      break;
    case Placing::Offset:
      offsetAll({&p.x, &p.weight, &p.bias, &p.out, &p.cu, &p.pos, &p.states, &p.initIdx, &p.finalIdx});
      break;
    default:
      break;
  }
  return p;
}

inline std::vector<ConvLayoutCase> convLayoutCases() {
  std::vector<ConvLayoutCase> v;
  ConvCase c;
  c.layout = ConvLayout::ChannelLast;  // packed, fp16 everything, states through int64 slots
  c.xType = c.wType = c.stateType = DType::F16;
  c.D = 96, c.packing = ConvPacking::CuSeqlens, c.lens = {3, 130, 1, 70};
  c.initialStates = c.finalStates = c.slotIndices = true, c.seed = 41;
  v.push_back({c, Placing::Sliced});
  c = {};  // Mamba-1: x of xz, dense rows, bf16, states in place without indices
  c.xType = c.stateType = DType::BF16;
  c.D = 67, c.lens = {150, 150}, c.initialStates = c.finalStates = true, c.seed = 42;
  v.push_back({c, Placing::Sliced});
  c = {};  // positions (int64), fp16, width 3, every pointer offset
  c.layout = ConvLayout::ChannelLast;
  c.xType = c.wType = DType::F16, c.W = 3;
  c.D = 40, c.packing = ConvPacking::Positions, c.lens = {7, 90, 2}, c.seed = 43;
  v.push_back({c, Placing::Offset});
  return v;
}

using ConvBackwardLayoutCase = LayoutCase<ConvBackwardCase>;

inline ConvBackwardProblem placedProblem(const ConvBackwardLayoutCase& lc) {
  ConvBackwardProblem p(lc.c);
  widenIndices({&p.cu, &p.pos, &p.initIdx, &p.finalIdx});
  const bool cl = lc.c.layout == ConvLayout::ChannelLast;
  switch (lc.placing) {
    case Placing::Sliced:
      // x, dout and dx as the forward's: column slices of wider (token or channel) rows.
      if (cl) {
        p.x = relayout(p.x, Slice{2, 2 * lc.c.D, 24});
        p.dout = relayout(p.dout, Slice{2, 5, 3});
        p.dx = relayout(p.dx, Slice{2, lc.c.D, lc.c.D + 8});
      } else {
        p.x = relayout(p.x, Slice{1, 0, columns(p.x, 1)});
        p.dout = relayout(p.dout, Slice{2, 2, 2});
        p.dx = relayout(p.dx, Slice{1, columns(p.dx, 1), 0});
      }
      p.dweight = relayout(p.dweight, Slice{1, 1, 2});
      p.states = relayout(p.states, Slice{1, 10, 6});
      p.dfinal = relayout(p.dfinal, Slice{1, 4, 4});
      p.dinit = relayout(p.dinit, Slice{1, 7, 1});
      break;
    case Placing::Offset:
      offsetAll({&p.x, &p.weight, &p.bias, &p.dout, &p.cu, &p.pos, &p.states, &p.initIdx, &p.dfinal, &p.finalIdx, &p.dx,
                 &p.dweight, &p.dbias, &p.dinit});
      break;
    default:
      break;
  }
  return p;
}

inline std::vector<ConvBackwardLayoutCase> convBackwardLayoutCases() {
  std::vector<ConvBackwardLayoutCase> v;
  ConvBackwardCase c;
  c.layout = ConvLayout::ChannelLast;  // packed, fp16 everything, state gradients through int64 slots
  c.xType = c.wType = c.stateType = DType::F16;
  c.D = 96, c.packing = ConvPacking::CuSeqlens, c.lens = {3, 130, 1, 70};
  c.initialStates = c.dfinalStates = c.dinitialStates = c.slotIndices = true, c.seed = 51;
  v.push_back({c, Placing::Sliced});
  c = {};  // channel-first dense rows, bf16 x with fp32 weight
  c.xType = c.stateType = DType::BF16;
  c.D = 67, c.lens = {150, 150}, c.initialStates = c.dinitialStates = true, c.seed = 52;
  v.push_back({c, Placing::Sliced});
  c = {};  // fp16, channel-first, packed, every pointer offset
  c.xType = c.wType = c.stateType = DType::F16;
  c.D = 40, c.packing = ConvPacking::CuSeqlens, c.lens = {7, 90, 2}, c.W = 5;
  c.initialStates = c.dfinalStates = c.dinitialStates = c.slotIndices = true, c.seed = 53;
  v.push_back({c, Placing::Offset});
  return v;
}

using ConvUpdateLayoutCase = LayoutCase<ConvUpdateCase>;

inline ConvUpdateProblem placedProblem(const ConvUpdateLayoutCase& lc) {
  ConvUpdateProblem p(lc.c);
  widenIndices({&p.idx});
  switch (lc.placing) {
    case Placing::Sliced:  // xBC of in_proj's rows, out in wider rows, the state in a slot block
      p.x = relayout(p.x, Slice{2, 2 * lc.c.D, 24});
      p.out = relayout(p.out, Slice{2, 3, 5});
      p.state = relayout(p.state, Slice{1, 0, 100});
      break;
    case Placing::Offset:
      offsetAll({&p.state, &p.x, &p.weight, &p.bias, &p.out, &p.idx});
      break;
    default:
      break;
  }
  return p;
}

inline std::vector<ConvUpdateLayoutCase> convUpdateLayoutCases() {
  std::vector<ConvUpdateLayoutCase> v;
  ConvUpdateCase c;
  c.xType = c.stateType = DType::F16;
  c.D = 96, c.batch = 4, c.slots = 6, c.L = 1, c.seed = 61;
  v.push_back({c, Placing::Sliced});
  c.L = 3, c.commit = false, c.seed = 62;
  v.push_back({c, Placing::Sliced});
  c = {};
  c.xType = DType::BF16, c.stateType = DType::F16, c.W = 2;
  c.D = 40, c.batch = 3, c.slots = 5, c.L = 2, c.seed = 63;
  v.push_back({c, Placing::Offset});
  return v;
}

// ---- Mamba-2 decode step ------------------------------------------------------------------------

using DecodeLayoutCase = LayoutCase<DecodeCase>;

inline DecodeProblem placedProblem(const DecodeLayoutCase& lc) {
  DecodeProblem p(lc.c);
  widenIndices({&p.idx, &p.accepted});
  switch (lc.placing) {
    case Placing::Sliced:
      // The drafts as in_proj's (tokens, width) rows [z | xBC | dt]; y in wider rows; a slot's
      // conv and SSM states side by side in one block; the caches in wider slot blocks.
      sliceColumns({&p.z, &p.xbc, &p.dt}, 2);
      p.y = relayout(p.y, Slice{2, 3, 5});
      p.convState = relayout(p.convState, Slice{1, 0, columns(p.ssmState, 1)});
      p.ssmState = relayout(p.ssmState, Slice{1, columns(p.convState, 1), 0});
      p.xbcCache = relayout(p.xbcCache, Slice{1, 8, 8});
      p.dtCache = relayout(p.dtCache, Slice{1, 2, 2});
      break;
    case Placing::Offset:
      // cached_tokens and arrivals stay as they are: int32, and arrivals contiguous.
      offsetAll({&p.convState, &p.ssmState, &p.xbcCache, &p.dtCache, &p.convW, &p.convB, &p.A, &p.D, &p.dtBias, &p.xbc,
                 &p.dt, &p.z, &p.y});
      break;
    default:
      break;
  }
  return p;
}

inline std::vector<DecodeLayoutCase> decodeLayoutCases() {
  std::vector<DecodeLayoutCase> v;
  DecodeCase c;  // fp16 drafts and states, int64 slots and counts
  c.H = 8, c.P = 64, c.N = 64, c.G = 1, c.batch = 4, c.slots = 6, c.L = 4, c.Lc = 4;
  c.xType = c.dtType = c.wType = c.ssmStateType = c.convStateType = DType::F16;
  c.seed = 71;
  v.push_back({c, Placing::Sliced});
  c = {};  // bf16 drafts, fp32 states, every pointer offset
  c.xType = c.dtType = DType::BF16, c.L = 3, c.Lc = 5, c.seed = 72;
  v.push_back({c, Placing::Offset});
  return v;
}

// ---- selective scan, forward and backward -------------------------------------------------------

using ScanLayoutCase = LayoutCase<ScanCase>;

inline ScanCase allScanDtypes(ScanCase c, DType t) {
  c.uType = c.deltaType = c.zType = c.outType = c.bType = c.cType = c.stateType = t;
  return c;
}

// Mamba-1's layouts: u and z the halves of in_proj's (B, 2D, L) xz, delta inside wider channel
// rows, B and C of x_proj in wider rows, out in wider token rows (the token axis keeps stride 1).
inline void placeScanForward(ScanProblem& p, Placing placing) {
  switch (placing) {
    case Placing::Sliced:
      sliceColumns({&p.u, &p.z}, 1);
      p.delta = relayout(p.delta, Slice{1, 0, 64});
      if (p.c.bVarying) p.B = relayout(p.B, Slice{2, 0, 16});
      if (p.c.cVarying) p.C = relayout(p.C, Slice{2, 8, 8});
      p.out = relayout(p.out, Slice{2, 3, 5});
      p.initStates = relayout(p.initStates, Slice{1, 12, 4});
      p.finalStates = relayout(p.finalStates, Slice{1, 4, 12});
      break;
    case Placing::Offset:
      offsetAll({&p.u, &p.delta, &p.z, &p.out, &p.A, &p.B, &p.C, &p.Dv, &p.deltaBias, &p.cu, &p.initStates, &p.initIdx,
                 &p.finalStates, &p.finalIdx});
      break;
    case Placing::Broadcast:  // A = -(1..N) for every channel (S4D-real), one skip weight
      p.A = broadcastAlong(p.A, 0);
      p.Dv = broadcastAlong(p.Dv, 0);
      break;
    default:
      break;
  }
}

inline ScanProblem placedProblem(const ScanLayoutCase& lc) {
  ScanProblem p(lc.c);
  placeScanForward(p, lc.placing);
  return p;
}

inline std::vector<ScanLayoutCase> scanLayoutCases() {
  std::vector<ScanLayoutCase> v;
  ScanCase c = allScanDtypes({}, DType::F16);  // fp16 with time-varying B/C at N 16, groups
  c.batch = 2, c.D = 64, c.N = 16, c.G = 2, c.L = 300, c.seed = 81;
  c.initialStates = c.finalStates = true, c.inPlace = false;
  v.push_back({c, Placing::Sliced});
  c = allScanDtypes({}, DType::BF16);  // packed, int64 cu_seqlens and slots, states in place
  c.D = 40, c.N = 16, c.lens = {5, 300, 1, 64}, c.indexType = DType::I64, c.seed = 82;
  c.initialStates = c.finalStates = c.slotIndices = true;
  v.push_back({c, Placing::Offset});
  c = allScanDtypes({}, DType::F16);  // fp16, N 32 (two chunks of 16 in the backward), broadcast
  c.batch = 1, c.D = 24, c.N = 32, c.L = 200, c.seed = 83;
  v.push_back({c, Placing::Broadcast});
  return v;
}

using ScanBackwardLayoutCase = LayoutCase<ScanBackwardCase>;

inline ScanBackwardProblem placedProblem(const ScanBackwardLayoutCase& lc) {
  ScanBackwardProblem p(lc.c);
  placeScanForward(p.f, lc.placing);
  switch (lc.placing) {
    case Placing::Sliced:  // du and dz the halves of one dxz, the rest in wider rows
      sliceColumns({&p.du, &p.dz}, 1);
      p.dout = relayout(p.dout, Slice{2, 3, 5});
      p.ddelta = relayout(p.ddelta, Slice{1, 64, 0});
      if (p.f.c.bVarying) p.dB = relayout(p.dB, Slice{2, 2, 2});
      if (p.f.c.cVarying) p.dC = relayout(p.dC, Slice{2, 0, 6});
      p.dA = relayout(p.dA, Slice{1, 1, 1});
      p.dfinal = relayout(p.dfinal, Slice{1, 4, 4});
      p.dinit = relayout(p.dinit, Slice{1, 6, 2});
      break;
    case Placing::Offset:
      offsetAll({&p.dout, &p.dfinal, &p.du, &p.ddelta, &p.dA, &p.dB, &p.dC, &p.dD, &p.dz, &p.ddeltaBias, &p.dinit});
      break;
    default:
      break;
  }
  return p;
}

inline std::vector<ScanBackwardLayoutCase> scanBackwardLayoutCases() {
  std::vector<ScanBackwardLayoutCase> v;
  ScanBackwardCase c;  // fp16 everywhere, time-varying B/C at N 16 with groups, state gradients
  c.fwd = allScanDtypes({}, DType::F16);
  c.fwd.batch = 2, c.fwd.D = 64, c.fwd.N = 16, c.fwd.G = 2, c.fwd.L = 300, c.fwd.seed = 91;
  c.doutType = c.duType = c.ddeltaType = c.dzType = c.dBType = c.dCType = c.dStateType = DType::F16;
  c.dfinalStates = c.dinitialStates = true;
  c.fwd.inPlace = false;
  v.push_back({c, Placing::Sliced});
  c = {};  // packed, int64 cu_seqlens and slots, bf16, every pointer offset
  c.fwd = allScanDtypes({}, DType::BF16);
  c.fwd.D = 40, c.fwd.N = 16, c.fwd.lens = {5, 300, 1, 64}, c.fwd.indexType = DType::I64, c.fwd.seed = 92;
  c.fwd.slotIndices = true, c.fwd.inPlace = false;
  c.doutType = c.duType = c.ddeltaType = c.dzType = c.dBType = c.dCType = DType::BF16;
  c.dfinalStates = c.dinitialStates = true;
  v.push_back({c, Placing::Offset});
  return v;
}

// Parameterised tests print a case by its name.
inline void PrintTo(const layouts::SsuLayoutCase& c, std::ostream* os) { *os << c.name(); }
inline void PrintTo(const layouts::ConvLayoutCase& c, std::ostream* os) { *os << c.name(); }
inline void PrintTo(const layouts::ConvBackwardLayoutCase& c, std::ostream* os) { *os << c.name(); }
inline void PrintTo(const layouts::ConvUpdateLayoutCase& c, std::ostream* os) { *os << c.name(); }
inline void PrintTo(const layouts::DecodeLayoutCase& c, std::ostream* os) { *os << c.name(); }
inline void PrintTo(const layouts::ScanLayoutCase& c, std::ostream* os) { *os << c.name(); }
inline void PrintTo(const layouts::ScanBackwardLayoutCase& c, std::ostream* os) { *os << c.name(); }

}  // namespace layouts
