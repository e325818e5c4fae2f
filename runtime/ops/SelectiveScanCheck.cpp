// The argument check of selective_scan (see SelectiveScanCheck.h and the contract in
// ssmjit/ops.h). Shapes, dtypes, devices, strides and alignment only: no tensor data is read.
#include "runtime/ops/SelectiveScanCheck.h"

#include <algorithm>
#include <iterator>
#include <string>
#include <vector>

#include "runtime/ops/ArgCheck.h"
#include "runtime/ops/ScanGradientsNoAlias.h"
#include "ssmjit/error.h"
#include "ssmjit/ops.h"

namespace ssmjit::detail {
namespace {

constexpr int64_t kMaxGridRows = 65535;  // gridDim.z: one program row per sequence
std::string str(int64_t v) { return std::to_string(v); }

// The kernel walks tokens with unit stride: say so rather than copy.
void unitTokenStride(const Checker& c, const char* name, const TensorView& t, int axis) {
  if (t.defined() && t.shape[axis] > 1 && t.strides[axis] != 1)
    c.fail(std::string(name) + " has stride " + str(t.strides[axis]) + " along its token axis (dim " + str(axis) +
           " of shape " + t.shapeString() + "), expected 1 (tokens contiguous)");
}

// Time-varying (Bt, G, N, L), any float dtype; or constant (D, N) fp32.
void checkBC(const Checker& c, const char* name, const TensorView& t, ScanDims& d, bool& varying, int64_t& G) {
  c.required(name, t);
  if (t.ndim == 4) {
    varying = true;
    G = t.shape[1];
    if (G < 1 || d.D % G != 0)
      c.fail(std::string(name) + " has " + str(G) + " groups (dim 1 of shape " + t.shapeString() +
             "), expected G >= 1 dividing D = " + str(d.D) + " (channel d reads group d / (D / G))");
    const Dim e[4] = {{d.batch, "batch"}, {G, "ngroups"}, {d.N, "dstate"}, {d.L, "seqlen"}};
    c.tensor(name, t, e, 4, kFloat16Or32, false);
    unitTokenStride(c, name, t, 3);
  } else {
    const Dim e[2] = {{d.D, "dim"}, {d.N, "dstate"}};
    if (t.ndim != 2)
      c.fail(std::string(name) + " has rank " + str(t.ndim) + " (shape " + t.shapeString() +
             "), expected rank 2 (dim, dstate) for a constant " + name +
             " or rank 4 (batch, ngroups, dstate, seqlen) "
             "for a time-varying one");
    c.tensor(name, t, e, 2, kF32Only, true);
  }
}

}  // namespace

ScanDims checkSelectiveScanArgs(const SelectiveScanArgs& a, DeviceKind device, const char* op,
                                const ScanCheckNames& names) {
  Checker c(op, device);
  const char* outName = names.out;
  ScanDims d;
  Dim eX[3] = {{-1, "batch"}, {-1, "dim"}, {-1, "seqlen"}};
  c.lead("u", a.u, eX, 3);
  d.batch = a.u.shape[0], d.D = a.u.shape[1], d.L = a.u.shape[2];
  for (int k = 0; k < 3; ++k) eX[k].size = a.u.shape[k];
  c.tensor("u", a.u, eX, 3, kFloat16Or32, false);
  unitTokenStride(c, "u", a.u, 2);
  c.required("delta", a.delta);
  c.tensor("delta", a.delta, eX, 3, kFloat16Or32, false);
  unitTokenStride(c, "delta", a.delta, 2);
  c.optional("z", a.z, eX, 3, kFloat16Or32, false);
  unitTokenStride(c, "z", a.z, 2);
  c.required(outName, a.out);
  c.tensor(outName, a.out, eX, 3, kFloat16Or32, false);
  unitTokenStride(c, outName, a.out, 2);
  // Other programs still read a token's inputs while one writes its output.
  for (auto [name, t] : {std::pair<const char*, const TensorView*>{"u", &a.u}, {"delta", &a.delta}, {"z", &a.z}})
    if (t->defined() && t->data == a.out.data)
      c.fail(std::string(outName) + " has data pointer " + hexPtr(a.out.data) + ", the same as " + name +
             "'s, expected a separate tensor (" + outName + " may not alias " + name + ")");

  c.required("A", a.A);
  Dim eA[2] = {{d.D, "dim"}, {-1, "dstate"}};
  c.rank("A", a.A, eA, 2);
  d.N = a.A.shape[1];
  if (d.N < 1 || d.N > kMaxScanState)
    c.fail("A has dstate " + str(d.N) + " (dim 1 of shape " + a.A.shapeString() +
           "), expected 1 <= N <= " + str(kMaxScanState) + " (kMaxScanState)");
  eA[1].size = d.N;
  c.tensor("A", a.A, eA, 2, kF32Only, true);

  // Packing decides the sequences, which the states' indices count.
  d.packed = a.cu_seqlens.defined();
  d.nseq = checkPackedRow(c, a.cu_seqlens, d.batch, a.u, "u");
  if (a.serial_seqlen < 0) c.fail("serial_seqlen is " + str(a.serial_seqlen) + ", expected >= 0 (0: no serial scan)");
  if (a.max_seqlen < 0) c.fail("max_seqlen is " + str(a.max_seqlen) + ", expected >= 0 (0: no bound)");
  if (a.max_seqlen != 0 && !d.packed)
    c.fail("max_seqlen is " + str(a.max_seqlen) +
           ", expected 0: it bounds packed sequences, and cu_seqlens is not given");
  d.maxLen = a.max_seqlen > 0 ? std::min(a.max_seqlen, d.L) : d.L;
  if (d.nseq > kMaxGridRows)
    c.fail(d.packed ? "cu_seqlens holds " + str(d.nseq) + " sequences, expected at most " + str(kMaxGridRows) +
                          " (grid limit: one program row per sequence)"
                    : "u has batch " + str(d.batch) + " (dim 0 of shape " + a.u.shapeString() + "), expected at most " +
                          str(kMaxGridRows) + " (grid limit: one program row per sequence)");

  bool bv = false, cv = false;
  int64_t gB = 1, gC = 1;
  checkBC(c, "B", a.B, d, bv, gB);
  checkBC(c, "C", a.C, d, cv, gC);
  if (bv && cv && gB != gC)
    c.fail("B has " + str(gB) + " groups and C has " + str(gC) + " (dim 1 of shapes " + a.B.shapeString() + " and " +
           a.C.shapeString() + "), expected the same");
  d.bVarying = bv, d.cVarying = cv, d.G = bv ? gB : (cv ? gC : 1);

  const Dim eD[1] = {{d.D, "dim"}};
  c.optional("D", a.D, eD, 1, kF32Only, true);
  c.optional("delta_bias", a.delta_bias, eD, 1, kF32Only, true);
  const Dim eState[2] = {{d.D, "dim"}, {d.N, "dstate"}};
  d.initSlots = checkStateSlots(c, "initial_states", a.initial_states, "initial_state_indices", a.initial_state_indices,
                                eState, 2, d.nseq);
  d.finalSlots =
      checkStateSlots(c, names.final, a.final_states, names.finalIdx, a.final_state_indices, eState, 2, d.nseq);
  return d;
}

ScanDims checkSelectiveScanBackwardArgs(const SelectiveScanBackwardArgs& b, DeviceKind device, const char* op) {
  // The forward's check, with dout in out's place and dfinal_states in final_states'.
  const SelectiveScanArgs f = forwardAsRead(b);
  const ScanDims d = checkSelectiveScanArgs(f, device, op, {"dout", "dfinal_states", "final_state_indices"});
  Checker c(op, device);
  c.setDeviceId(f.u.deviceId, "u");
  const Dim eX[3] = {{d.batch, "batch"}, {d.D, "dim"}, {d.L, "seqlen"}};
  auto perToken = [&](const char* name, const TensorView& t) {
    c.required(name, t);
    c.tensor(name, t, eX, 3, kFloat16Or32, false);
    unitTokenStride(c, name, t, 2);
  };
  perToken("du", b.du);
  perToken("ddelta", b.ddelta);
  // Exactly the gradients of the inputs given.
  exactlyWith(c, "dz", b.dz, "z", f.z);
  if (b.dz.defined()) perToken("dz", b.dz);
  const Dim eA[2] = {{d.D, "dim"}, {d.N, "dstate"}};
  c.required("dA", b.dA);
  c.tensor("dA", b.dA, eA, 2, kF32Only, false);
  auto likeBC = [&](const char* name, const TensorView& t, bool varying) {
    c.required(name, t);
    if (varying) {
      const Dim e[4] = {{d.batch, "batch"}, {d.G, "ngroups"}, {d.N, "dstate"}, {d.L, "seqlen"}};
      c.rank(name, t, e, 4);
      c.tensor(name, t, e, 4, kFloat16Or32, false);
      unitTokenStride(c, name, t, 3);
    } else {
      c.rank(name, t, eA, 2);
      c.tensor(name, t, eA, 2, kF32Only, false);
    }
  };
  likeBC("dB", b.dB, d.bVarying);
  likeBC("dC", b.dC, d.cVarying);
  const Dim eD[1] = {{d.D, "dim"}};
  exactlyWith(c, "dD", b.dD, "D", f.D);
  c.optional("dD", b.dD, eD, 1, kF32Only, false);
  exactlyWith(c, "ddelta_bias", b.ddelta_bias, "delta_bias", f.delta_bias);
  c.optional("ddelta_bias", b.ddelta_bias, eD, 1, kF32Only, false);
  if (b.dinitial_states.defined()) {
    if (!f.initial_states.defined())
      c.fail("dinitial_states is given (shape " + b.dinitial_states.shapeString() +
             "), expected none: forward.initial_states is not given");
    const Dim e[3] = {{f.initial_states.shape[0], "slots"}, {d.D, "dim"}, {d.N, "dstate"}};
    c.rank("dinitial_states", b.dinitial_states, e, 3);
    c.tensor("dinitial_states", b.dinitial_states, e, 3, kFloat16Or32, false);
  }
  checkSeparateScanGradients(c, f, b, {{"du", &b.du}, {"ddelta", &b.ddelta}, {"ddelta_bias", &b.ddelta_bias}},
                             {{"u", &f.u}, {"delta", &f.delta}, {"delta_bias", &f.delta_bias}});
  return d;
}

}  // namespace ssmjit::detail
