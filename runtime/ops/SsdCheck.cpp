// The argument checks of ssd and ssd_backward (see SsdCheck.h and the contract in ssmjit/ops.h).
// Shapes, dtypes, devices, strides and alignment only: no tensor data is read.
#include "runtime/ops/SsdCheck.h"

#include <iterator>
#include <string>
#include <utility>

#include "runtime/ops/ArgCheck.h"
#include "runtime/ops/NoAlias.h"
#include "runtime/ops/ScanGradientsNoAlias.h"
#include "ssmjit/error.h"
#include "ssmjit/ops.h"

namespace ssmjit::detail {
namespace {

std::string str(int64_t v) { return std::to_string(v); }

// The kernels read a token's channels as one contiguous run: say so rather than copy.
void unitLastStride(const Checker& c, const char* name, const TensorView& t) {
  const int ax = t.ndim - 1;
  if (t.defined() && t.shape[ax] > 1 && t.strides[ax] != 1)
    c.fail(std::string(name) + " has stride " + str(t.strides[ax]) + " along its last axis (dim " + str(ax) +
           " of shape " + t.shapeString() + "), expected 1 (a token's channels contiguous)");
}

// A per-token tensor (Bt, L, ...): any float dtype, no broadcast axis, unit last-axis stride
// when `unitLast`.
void perToken(const Checker& c, const char* name, const TensorView& t, const Dim* e, int n, bool unitLast) {
  c.required(name, t);
  c.tensor(name, t, e, n, kFloat16Or32, false);
  if (unitLast) unitLastStride(c, name, t);
}

// x, dt, A, B, C, D, z, dt_bias, the dt options and chunk_size.
void checkInputs(const Checker& c, const SsdArgs& a, SsdDims& d) {
  Dim eX[4] = {{-1, "batch"}, {-1, "seqlen"}, {-1, "nheads"}, {-1, "headdim"}};
  for (int k = 0; k < 4; ++k) eX[k].size = a.x.shape[k];
  d.batch = a.x.shape[0], d.L = a.x.shape[1], d.H = a.x.shape[2], d.P = a.x.shape[3];
  if (d.P < 1 || d.P > kMaxSsdHeadDim)
    c.fail("x has headdim " + str(d.P) + " (dim 3 of shape " + a.x.shapeString() +
           "), expected 1 <= P <= " + str(kMaxSsdHeadDim) + " (kMaxSsdHeadDim)");
  if (d.H < 1 || d.L < 1 || d.batch < 1)
    c.fail("x has shape " + a.x.shapeString() + ", expected batch, seqlen and nheads >= 1");
  perToken(c, "x", a.x, eX, 4, true);
  const Dim eDt[3] = {eX[0], eX[1], eX[2]};
  perToken(c, "dt", a.dt, eDt, 3, false);
  c.optional("z", a.z, eX, 4, kFloat16Or32, false);
  unitLastStride(c, "z", a.z);

  const Dim eH[1] = {{d.H, "nheads"}};
  c.required("A", a.A);
  c.tensor("A", a.A, eH, 1, kF32Only, true);
  c.optional("dt_bias", a.dt_bias, eH, 1, kF32Only, true);
  if (a.D.defined()) {
    const Dim eD[2] = {{d.H, "nheads"}, {d.P, "headdim"}};
    if (a.D.ndim != 1 && a.D.ndim != 2)
      c.fail("D has rank " + str(a.D.ndim) + " (shape " + a.D.shapeString() +
             "), expected rank 1 (nheads) or rank 2 (nheads, headdim)");
    d.dPerChannel = a.D.ndim == 2;
    c.tensor("D", a.D, eD, a.D.ndim, kF32Only, true);
  }

  c.required("B", a.B);
  Dim eB[4] = {eX[0], eX[1], {-1, "ngroups"}, {-1, "dstate"}};
  c.rank("B", a.B, eB, 4);
  d.G = a.B.shape[2], d.N = a.B.shape[3];
  if (d.G < 1 || d.H % d.G != 0)
    c.fail("B has " + str(d.G) + " groups (dim 2 of shape " + a.B.shapeString() +
           "), expected G >= 1 dividing nheads H = " + str(d.H) + " (head h reads group h / (H / G))");
  if (d.N < 1 || d.N > kMaxSsdState)
    c.fail("B has dstate " + str(d.N) + " (dim 3 of shape " + a.B.shapeString() +
           "), expected 1 <= N <= " + str(kMaxSsdState) + " (kMaxSsdState)");
  d.headsPerGroup = d.H / d.G;
  eB[2].size = d.G, eB[3].size = d.N;
  perToken(c, "B", a.B, eB, 4, true);
  perToken(c, "C", a.C, eB, 4, true);

  if (a.chunk_size != 64 && a.chunk_size != 128 && a.chunk_size != 256)
    c.fail("chunk_size is " + str(a.chunk_size) + ", expected 64, 128 or 256");
  d.chunk = a.chunk_size;
  d.clamp = a.dt_max > a.dt_min;
}

// cu_seqlens decides the sequences, which the slot indices count.
void checkPacking(const Checker& c, const SsdArgs& a, SsdDims& d) {
  d.packed = a.cu_seqlens.defined();
  d.nseq = checkPackedRow(c, a.cu_seqlens, d.batch, a.x, "x");
}

// block_state_tokens, block_states and block_state_indices.
void checkBlockStates(const Checker& c, const SsdArgs& a, SsdDims& d) {
  const int64_t K = a.block_state_tokens;
  if (K < 0) c.fail("block_state_tokens is " + str(K) + ", expected >= 0 (0: no block states)");
  if (K == 0) {
    for (auto [name, t] : {std::pair<const char*, const TensorView*>{"block_states", &a.block_states},
                           {"block_state_indices", &a.block_state_indices}})
      if (t->defined())
        c.fail(std::string(name) + " is given (shape " + t->shapeString() +
               "), expected none: block_state_tokens is 0 (no block states)");
    return;
  }
  if (K % d.chunk != 0)
    c.fail("block_state_tokens is " + str(K) + ", expected a multiple of chunk_size = " + str(d.chunk));
  if (!a.block_states.defined())
    c.fail("block_states is not given, expected (slots, nheads, headdim, dstate): block_state_tokens is " + str(K));
  if (!a.block_state_indices.defined())
    c.fail("block_state_indices is not given, expected (nseq, kmax) int32/int64: block_state_tokens is " + str(K));
  Dim e[4] = {{-1, "slots"}, {d.H, "nheads"}, {d.P, "headdim"}, {d.N, "dstate"}};
  c.rank("block_states", a.block_states, e, 4);
  e[0].size = a.block_states.shape[0];
  c.tensor("block_states", a.block_states, e, 4, kFloat16Or32, false);
  Dim eIdx[2] = {{d.nseq, "nseq"}, {-1, "kmax"}};
  c.rank("block_state_indices", a.block_state_indices, eIdx, 2);
  eIdx[1].size = a.block_state_indices.shape[1];
  c.tensor("block_state_indices", a.block_state_indices, eIdx, 2, kIndexTypes, false);
  // Dense rows all have L tokens; a packed row's lengths are data (the reference checks them).
  if (!d.packed && eIdx[1].size < d.L / K)
    c.fail("block_state_indices has kmax " + str(eIdx[1].size) + " (dim 1 of shape " +
           a.block_state_indices.shapeString() + "), expected at least seqlen / block_state_tokens = " + str(d.L) +
           " / " + str(K) + " = " + str(d.L / K) + " (a slot for every block of a sequence)");
  d.blockTokens = K;
  d.blockSlots = a.block_states.shape[0];
  d.blocksPerSeq = eIdx[1].size;
}

// y (fp32, out's shape), beside out, read by programs that read no other token: it aliases
// nothing of the call.
void checkY(const Checker& c, const SsdArgs& a, const SsdDims& d, const char* yName, const char* outName) {
  if (!a.y.defined()) return;
  if (!a.out.defined())
    c.fail(std::string(yName) + " is given without " + outName +
           ", expected out with it (y is the output before the gate, kept for the backward)");
  const Dim e[4] = {{d.batch, "batch"}, {d.L, "seqlen"}, {d.H, "nheads"}, {d.P, "headdim"}};
  c.tensor(yName, a.y, e, 4, kF32Only, false);
  unitLastStride(c, yName, a.y);
  noAlias(c, yName, a.y, "x", a.x);
  noAlias(c, yName, a.y, "z", a.z);
  noAlias(c, yName, a.y, outName, a.out);
}

// Every argument but the outputs' presence rule; `outName`, `yName` and `finalName` are what
// messages call out, y and the final states (dout, forward.y and dfinal_states in the backward).
SsdDims checkForward(const SsdArgs& a, DeviceKind device, const char* op, const char* outName, const char* yName,
                     const char* finalName) {
  Checker c(op, device);
  SsdDims d;
  const Dim eX[4] = {{-1, "batch"}, {-1, "seqlen"}, {-1, "nheads"}, {-1, "headdim"}};
  c.lead("x", a.x, eX, 4);
  checkInputs(c, a, d);
  checkPacking(c, a, d);
  if (a.out.defined()) {
    const Dim eOut[4] = {{d.batch, "batch"}, {d.L, "seqlen"}, {d.H, "nheads"}, {d.P, "headdim"}};
    perToken(c, outName, a.out, eOut, 4, true);
    // Other programs still read a token's inputs while one writes its output.
    noAlias(c, outName, a.out, "x", a.x);
    noAlias(c, outName, a.out, "z", a.z);
  }
  checkY(c, a, d, yName, outName);
  const Dim eState[3] = {{d.H, "nheads"}, {d.P, "headdim"}, {d.N, "dstate"}};
  d.initSlots = checkStateSlots(c, "initial_states", a.initial_states, "initial_state_indices", a.initial_state_indices,
                                eState, 3, d.nseq);
  d.finalSlots =
      checkStateSlots(c, finalName, a.final_states, "final_state_indices", a.final_state_indices, eState, 3, d.nseq);
  checkBlockStates(c, a, d);
  const Dim eDecay[2] = {{d.nseq, "nseq"}, {d.H, "nheads"}};
  c.optional("sequence_decay", a.sequence_decay, eDecay, 2, kF32Only, false);
  return d;
}

}  // namespace

SsdDims checkSsdArgs(const SsdArgs& a, DeviceKind device, const char* op, bool needOutputs) {
  const SsdDims d = checkForward(a, device, op, "out", "y", "final_states");
  if (needOutputs && !a.out.defined() && !a.final_states.defined() && !a.block_states.defined() &&
      !a.sequence_decay.defined())
    Checker(op, device)
        .fail(
            "out is not given, expected out or at least one of final_states, block_states and sequence_decay "
            "(a call without outputs computes nothing)");
  return d;
}

SsdDims checkSsdBackwardArgs(const SsdBackwardArgs& b, DeviceKind device, const char* op) {
  // The forward's check on what the backward reads: dout as out, dfinal_states as the final
  // states (forward.final_state_indices maps its slots), forward.y as y; the forward's other
  // outputs are not read.
  SsdArgs f = forwardAsRead(b);
  f.block_state_tokens = 0, f.block_states = {}, f.block_state_indices = {};
  f.sequence_decay = {};
  Checker c(op, device);
  c.required("dout", b.dout);
  const SsdDims d = checkForward(f, device, op, "dout", "forward.y", "dfinal_states");
  c.setDeviceId(f.x.deviceId, "x");

  const Dim eX[4] = {{d.batch, "batch"}, {d.L, "seqlen"}, {d.H, "nheads"}, {d.P, "headdim"}};
  const Dim eDt[3] = {eX[0], eX[1], eX[2]};
  const Dim eB[4] = {eX[0], eX[1], {d.G, "ngroups"}, {d.N, "dstate"}};
  const Dim eH[1] = {{d.H, "nheads"}};
  perToken(c, "dx", b.dx, eX, 4, true);
  perToken(c, "ddt", b.ddt, eDt, 3, false);
  c.required("dA", b.dA);
  c.tensor("dA", b.dA, eH, 1, kF32Only, false);
  perToken(c, "dB", b.dB, eB, 4, true);
  perToken(c, "dC", b.dC, eB, 4, true);
  exactlyWith(c, "dD", b.dD, "D", f.D);
  if (b.dD.defined()) {
    const Dim eD[2] = {{d.H, "nheads"}, {d.P, "headdim"}};
    const int n = d.dPerChannel ? 2 : 1;
    c.rank("dD", b.dD, eD, n);
    c.tensor("dD", b.dD, eD, n, kF32Only, false);
  }
  exactlyWith(c, "dz", b.dz, "z", f.z);
  if (b.dz.defined()) perToken(c, "dz", b.dz, eX, 4, true);
  exactlyWith(c, "ddt_bias", b.ddt_bias, "dt_bias", f.dt_bias);
  c.optional("ddt_bias", b.ddt_bias, eH, 1, kF32Only, false);
  if (b.dinitial_states.defined()) {
    onlyWith(c, "dinitial_states", b.dinitial_states, "forward.initial_states", f.initial_states,
             "it is the gradient of the initial states read");
    const Dim e[4] = {{d.initSlots, "slots"}, {d.H, "nheads"}, {d.P, "headdim"}, {d.N, "dstate"}};
    c.rank("dinitial_states", b.dinitial_states, e, 4);
    c.tensor("dinitial_states", b.dinitial_states, e, 4, kFloat16Or32, false);
  }

  checkSeparateScanGradients(c, f, b, {{"dx", &b.dx}, {"ddt", &b.ddt}, {"ddt_bias", &b.ddt_bias}},
                             {{"x", &f.x}, {"dt", &f.dt}, {"dt_bias", &f.dt_bias}}, {{"forward.y", &f.y}});
  return d;
}

}  // namespace ssmjit::detail
