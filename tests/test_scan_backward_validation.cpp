// selective_scan_backward on the CPU: the float64 reference's gradients against central finite
// differences of the forward reference (every input, with and without softplus, packed and dense,
// groups, constant and time-varying B/C, states through slots with -1 entries), packing (a packed
// row's gradients equal running each sequence alone), and the argument check (every bad call is
// refused with a message naming the argument, and writes nothing).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "ssmjit/error.h"
#include "ssmjit/ops.h"
#include "ssmjit/reference.h"
#include "tests/support/ExpectError.h"
#include "tests/support/HostTensors.h"
#include "tools/problems/HostTensor.h"
#include "tools/problems/ScanBackwardProblem.h"
#include "tools/problems/ScanProblem.h"

using namespace ssmjit;
using namespace ssmjit::testing;

namespace {

// ---- helpers ----------------------------------------------------------------------------------

// The scalar whose gradients the backward computes: sum(out * dout) + sum over the final slots
// written of final_states * dfinal_states, from the forward reference run on a copy of p's
// forward problem (the states may be updated in place).
double loss(const ScanProblem& fwd, const ScanBackwardProblem& p) {
  ScanProblem f = fwd;
  reference::selective_scan(f.args());
  double l = 0;
  forEachElement(f.out.view(),
                 [&](int64_t, const std::vector<int64_t>& i) { l += value(f.out, i) * value(p.dout, i); });
  if (p.c.dfinalStates)
    for (int64_t s : f.finalSlot)
      if (s >= 0)
        for (int64_t d = 0; d < f.c.D; ++d)
          for (int64_t n = 0; n < f.c.N; ++n) l += value(f.finalHolder(), {s, d, n}) * value(p.dfinal, {s, d, n});
  return l;
}

// ---- gradients against finite differences -----------------------------------------------------

struct FdStats {
  double worst = 0;  // max |fd - grad| / (1 + |grad|)
  std::string where;
};

// Checks every element of input `in` (a tensor of p.f) against its gradient `grad` (a tensor of
// the backward's result r): the central difference of the loss with a step of 2^-9 (the step
// actually taken: the inputs are fp32). `written(idx)`: whether the gradient is written there
// (else the input must not matter: a zero difference, the gradient left poisoned).
void checkAgainstFd(const char* name, const ScanBackwardProblem& p, HostTensor ScanProblem::*in, const HostTensor& grad,
                    FdStats& st, const std::function<bool(const std::vector<int64_t>&)>& written = nullptr) {
  SCOPED_TRACE(name);
  const HostTensor& x = p.f.*in;
  ASSERT_TRUE(x.defined && grad.defined);
  const double h = 1.0 / 512;
  forEachElement(x.view(), [&](int64_t off, const std::vector<int64_t>& i) {
    ScanProblem plus = p.f, minus = p.f;
    const double x0 = loadElement(x.view(), off);
    storeElement((plus.*in).view(), off, x0 + h);
    storeElement((minus.*in).view(), off, x0 - h);
    const double step = loadElement((plus.*in).view(), off) - loadElement((minus.*in).view(), off);
    const double fd = (loss(plus, p) - loss(minus, p)) / step;
    std::string at = std::string(name) + "[";
    for (size_t k = 0; k < i.size(); ++k) at += (k ? ", " : "") + std::to_string(i[k]);
    at += "]";
    if (written && !written(i)) {
      EXPECT_EQ(fd, 0.0) << at << " is read by no sequence";
      EXPECT_TRUE(std::isnan(value(grad, i))) << at << ": the gradient of a slot no sequence reads is written";
      return;
    }
    const double g = value(grad, i), err = std::abs(fd - g) / (1 + std::abs(g));
    EXPECT_LE(err, 3e-4) << at << ": reference " << g << ", finite difference " << fd;
    if (!(err <= st.worst))
      st.worst = err, st.where = at + " (grad " + std::to_string(g) + ", fd " + std::to_string(fd) + ")";
  });
}

std::vector<ScanBackwardCase> fdCases() {
  std::vector<ScanBackwardCase> cases;
  ScanBackwardCase c;
  // Packed: 3 sequences of 4, 2, 3 tokens; softplus; G = 2 time-varying B and C; separate states
  // through permuted slots (initial[1] = -1, final[2] = -1).
  c.fwd.D = 4, c.fwd.N = 3, c.fwd.G = 2, c.fwd.lens = {4, 2, 3}, c.fwd.maxSeqlen = 4;
  c.fwd.initialStates = c.fwd.finalStates = c.fwd.slotIndices = true, c.fwd.inPlace = false;
  c.dfinalStates = c.dinitialStates = true;
  cases.push_back(c);
  // Dense batch 2: no softplus, constant B, grouped C, states in place through slots.
  c = ScanBackwardCase{};
  c.fwd.batch = 2, c.fwd.D = 6, c.fwd.N = 4, c.fwd.L = 6, c.fwd.G = 2, c.fwd.bVarying = false, c.fwd.softplus = false;
  c.fwd.initialStates = c.fwd.finalStates = c.fwd.slotIndices = true, c.fwd.indexType = DType::I64;
  c.fwd.strided = true, c.fwd.seed = 2;
  c.dfinalStates = c.dinitialStates = true;
  cases.push_back(c);
  // Dense batch 2: softplus, grouped B (G = 3), constant C, no D / z / delta_bias, states slot i.
  c = ScanBackwardCase{};
  c.fwd.batch = 2, c.fwd.D = 6, c.fwd.N = 5, c.fwd.L = 7, c.fwd.G = 3, c.fwd.cVarying = false;
  c.fwd.hasD = c.fwd.hasZ = c.fwd.hasDeltaBias = false, c.fwd.seed = 3;
  c.dfinalStates = c.dinitialStates = true;
  cases.push_back(c);
  // Packed, both constant, no softplus, no states.
  c = ScanBackwardCase{};
  c.fwd.D = 5, c.fwd.N = 3, c.fwd.lens = {2, 5, 1}, c.fwd.bVarying = c.fwd.cVarying = false, c.fwd.softplus = false;
  c.fwd.seed = 4;
  cases.push_back(c);
  // Dense, no initial states but a final-state gradient; softplus without delta_bias.
  c = ScanBackwardCase{};
  c.fwd.batch = 2, c.fwd.D = 4, c.fwd.N = 4, c.fwd.L = 9, c.fwd.hasDeltaBias = false, c.fwd.seed = 5;
  c.dfinalStates = true;
  cases.push_back(c);
  return cases;
}

TEST(ScanBackwardReference, GradientsMatchFiniteDifferences) {
  for (const ScanBackwardCase& sc : fdCases()) {
    SCOPED_TRACE(sc.name());
    ScanBackwardProblem p(sc);
    const auto inputsBefore = bytesOf(p);
    reference::selective_scan_backward(p.args());
    // Inputs untouched; every gradient element written (but dinit's unread slots).
    const auto after = bytesOf(p);
    for (size_t k = 0; k < 16; ++k) EXPECT_EQ(after[k], inputsBefore[k]) << "input " << k << " was written";
    for (HostTensor* t : {&p.du, &p.ddelta, &p.dA, &p.dB, &p.dC, &p.dD, &p.dz, &p.ddeltaBias})
      if (t->defined) {
        EXPECT_EQ(nonFinite(*t), 0);
      }

    FdStats st;
    using P = ScanProblem;
    checkAgainstFd("u", p, &P::u, p.du, st);
    checkAgainstFd("delta", p, &P::delta, p.ddelta, st);
    checkAgainstFd("A", p, &P::A, p.dA, st);
    checkAgainstFd("B", p, &P::B, p.dB, st);
    checkAgainstFd("C", p, &P::C, p.dC, st);
    if (sc.fwd.hasD) checkAgainstFd("D", p, &P::Dv, p.dD, st);
    if (sc.fwd.hasZ) checkAgainstFd("z", p, &P::z, p.dz, st);
    if (sc.fwd.hasDeltaBias) checkAgainstFd("delta_bias", p, &P::deltaBias, p.ddeltaBias, st);
    if (sc.dinitialStates) {
      const std::vector<char> read = p.slotsWritten();
      checkAgainstFd("initial_states", p, &P::initStates, p.dinit, st,
                     [&](const std::vector<int64_t>& i) { return read[static_cast<size_t>(i[0])] != 0; });
    }
    std::printf("  %s: worst |fd - grad| / (1 + |grad|) = %.3g at %s\n", sc.name().c_str(), st.worst, st.where.c_str());
  }
}

// ---- packing ----------------------------------------------------------------------------------

// A packed row (or a batch of rows) gives, bit for bit, the per-token gradients of running each
// sequence alone (batch-1 calls on views of its tokens, states through their own slots), and the
// parameter gradients (dA, dD, ddelta_bias, constant dB/dC) of their sum.
TEST(ScanBackwardReference, EverySequenceEqualsRunningItAlone) {
  std::vector<ScanBackwardCase> cases;
  ScanBackwardCase c;
  c.fwd.D = 6, c.fwd.N = 5, c.fwd.G = 2, c.fwd.lens = {5, 1, 9, 3}, c.fwd.maxSeqlen = 9;
  c.fwd.initialStates = c.fwd.finalStates = c.fwd.slotIndices = true, c.fwd.inPlace = false;
  c.dfinalStates = c.dinitialStates = true;
  cases.push_back(c);
  c.fwd.uType = c.fwd.deltaType = DType::BF16, c.fwd.bVarying = false, c.fwd.cType = DType::F16, c.fwd.G = 3;
  c.fwd.stateType = DType::BF16, c.fwd.inPlace = true, c.fwd.strided = true, c.fwd.seed = 2;
  c.duType = DType::BF16, c.dCType = DType::F16, c.dStateType = DType::BF16;
  cases.push_back(c);
  c = ScanBackwardCase{};  // no options, no states
  c.fwd.D = 4, c.fwd.N = 3, c.fwd.lens = {7, 2}, c.fwd.cVarying = false;
  c.fwd.hasD = c.fwd.hasZ = c.fwd.hasDeltaBias = c.fwd.softplus = false;
  cases.push_back(c);
  c = ScanBackwardCase{};  // dense rows, states slot i
  c.fwd.batch = 3, c.fwd.D = 5, c.fwd.N = 4, c.fwd.L = 8, c.fwd.G = 5;
  c.dfinalStates = c.dinitialStates = true;
  cases.push_back(c);

  for (const ScanBackwardCase& sc : cases) {
    SCOPED_TRACE(sc.name());
    ScanBackwardProblem whole(sc);
    ScanBackwardProblem alone = whole;
    reference::selective_scan_backward(whole.args());
    const ScanProblem& f = whole.f;
    const SelectiveScanBackwardArgs in = alone.args();
    const int64_t D = f.c.D, N = f.c.N;
    std::vector<double> dA(static_cast<size_t>(D * N), 0), dB(dA.size(), 0), dC(dA.size(), 0),
        dD(static_cast<size_t>(D), 0), ddb(dD.size(), 0);
    for (int64_t i = 0; i < f.nseq; ++i) {
      const size_t k = static_cast<size_t>(i);
      auto tokens = [&](const TensorView& t) {
        return slice(slice(t, 0, f.row[k], 1), t.ndim - 1, f.start[k], f.len[k]);
      };
      SelectiveScanBackwardArgs s = in;
      SelectiveScanArgs& a = s.forward;
      a.u = tokens(in.forward.u), a.delta = tokens(in.forward.delta), a.z = tokens(in.forward.z);
      a.out = tokens(in.forward.out);
      if (f.c.bVarying) a.B = tokens(in.forward.B);
      if (f.c.cVarying) a.C = tokens(in.forward.C);
      a.cu_seqlens = a.initial_state_indices = a.final_state_indices = {};
      a.max_seqlen = 0;
      const int64_t is = f.c.initialStates ? f.initSlot[k] : -1, fs = f.c.finalStates ? f.finalSlot[k] : -1;
      a.initial_states = is >= 0 ? slice(in.forward.initial_states, 0, is, 1) : TensorView{};
      a.final_states = {};
      s.dfinal_states = sc.dfinalStates && fs >= 0 ? slice(in.dfinal_states, 0, fs, 1) : TensorView{};
      s.dinitial_states = sc.dinitialStates && is >= 0 ? slice(in.dinitial_states, 0, is, 1) : TensorView{};
      s.dout = tokens(in.dout), s.du = tokens(in.du), s.ddelta = tokens(in.ddelta), s.dz = tokens(in.dz);
      // The parameter gradients of this sequence alone, into fresh fp32 tensors summed below.
      HostTensor pA = poisoned(DType::F32, {D, N}), pB = poisoned(DType::F32, {D, N}),
                 pC = poisoned(DType::F32, {D, N});
      HostTensor pD = poisoned(DType::F32, {D}), pDb = poisoned(DType::F32, {D});
      s.dA = pA.view();
      s.dB = f.c.bVarying ? tokens(in.dB) : pB.view();
      s.dC = f.c.cVarying ? tokens(in.dC) : pC.view();
      s.dD = f.c.hasD ? pD.view() : TensorView{};
      s.ddelta_bias = f.c.hasDeltaBias ? pDb.view() : TensorView{};
      reference::selective_scan_backward(s);
      for (int64_t d = 0; d < D; ++d) {
        for (int64_t n = 0; n < N; ++n) {
          const size_t j = static_cast<size_t>(d * N + n);
          dA[j] += value(pA, {d, n});
          if (!f.c.bVarying) dB[j] += value(pB, {d, n});
          if (!f.c.cVarying) dC[j] += value(pC, {d, n});
        }
        if (f.c.hasD) dD[static_cast<size_t>(d)] += value(pD, {d});
        if (f.c.hasDeltaBias) ddb[static_cast<size_t>(d)] += value(pDb, {d});
      }
    }
    // Per-token gradients (time-varying dB/dC included) and dinitial_states: bit for bit.
    EXPECT_EQ(nonFinite(whole.du), 0);
    EXPECT_EQ(whole.du.bytes, alone.du.bytes);
    EXPECT_EQ(whole.ddelta.bytes, alone.ddelta.bytes);
    EXPECT_EQ(whole.dz.bytes, alone.dz.bytes);
    if (f.c.bVarying) {
      EXPECT_EQ(whole.dB.bytes, alone.dB.bytes);
    }
    if (f.c.cVarying) {
      EXPECT_EQ(whole.dC.bytes, alone.dC.bytes);
    }
    EXPECT_EQ(whole.dinit.bytes, alone.dinit.bytes);
    if (sc.dinitialStates) {
      const std::vector<char> read = whole.slotsWritten();
      for (size_t s = 0; s < read.size(); ++s)
        EXPECT_EQ(std::isnan(value(whole.dinit, {static_cast<int64_t>(s), 0, 0})), !read[s]) << "slot " << s;
    }
    // Sums over sequences: each sequence's fp32 result summed, against one rounding of the sum.
    auto near = [](double got, double want) { EXPECT_NEAR(got, want, 1e-6 * (1 + std::abs(want))); };
    for (int64_t d = 0; d < D; ++d) {
      for (int64_t n = 0; n < N; ++n) {
        const size_t j = static_cast<size_t>(d * N + n);
        near(value(whole.dA, {d, n}), dA[j]);
        if (!f.c.bVarying) near(value(whole.dB, {d, n}), dB[j]);
        if (!f.c.cVarying) near(value(whole.dC, {d, n}), dC[j]);
      }
      if (f.c.hasD) near(value(whole.dD, {d}), dD[static_cast<size_t>(d)]);
      if (f.c.hasDeltaBias) near(value(whole.ddeltaBias, {d}), ddb[static_cast<size_t>(d)]);
    }
  }
}

// ---- the argument check -----------------------------------------------------------------------

// Packed: one row of 3 sequences (2, 3, 1 tokens), D 8, N 4, G 2, z, D, delta_bias, separate
// states through int64 slots (S = 5), dfinal_states and dinitial_states.
ScanBackwardCase packedCase() {
  ScanBackwardCase c;
  c.fwd.D = 8, c.fwd.N = 4, c.fwd.G = 2, c.fwd.lens = {2, 3, 1}, c.fwd.maxSeqlen = 3;
  c.fwd.initialStates = c.fwd.finalStates = c.fwd.slotIndices = true, c.fwd.inPlace = false;
  c.fwd.indexType = DType::I64;
  c.dfinalStates = c.dinitialStates = true;
  return c;
}
// Dense batch 2, L 6, constant B (time-varying C), no states.
ScanBackwardCase constantBCase() {
  ScanBackwardCase c;
  c.fwd.batch = 2, c.fwd.D = 8, c.fwd.N = 4, c.fwd.L = 6, c.fwd.bVarying = false;
  return c;
}

struct Bad {
  const ScanBackwardProblem* base;
  std::function<void(ScanBackwardProblem&, SelectiveScanBackwardArgs&)> mutate;
  std::vector<std::string> parts;
};

TEST(ScanBackwardReference, BadCallsAreNamedAndWriteNothing) {
  const ScanBackwardProblem packed(packedCase()), constB(constantBCase());
  using P = ScanBackwardProblem;
  using A = SelectiveScanBackwardArgs;
  const std::vector<Bad> bad = {
      // The gradients of the per-token inputs: required, u's shape.
      {&packed, [](P&, A& a) { a.du = {}; }, {"du is required"}},
      {&packed, [](P&, A& a) { a.ddelta = {}; }, {"ddelta is required"}},
      {&packed,
       [](P&, A& a) { a.du.dtype = DType::I32; },
       {"du has dtype int32", "expected float32, bfloat16 or float16"}},
      {&packed, [](P&, A& a) { a.ddelta.strides[2] = 2; }, {"ddelta has stride 2 along its token axis", "expected 1"}},
      // dz exactly with z.
      {&packed,
       [](P&, A& a) { a.forward.z = {}; },
       {"dz is given (shape (1, 8, 6))", "expected none", "forward.z is not given"}},
      {&packed, [](P&, A& a) { a.dz = {}; }, {"dz is not given, expected a tensor", "forward.z is given"}},
      {&packed, [](P&, A& a) { a.dz.shape[1] = 7; }, {"dz has shape (1, 7, 6)", "dim 1 (dim) is 7, expected 8"}},
      // dA (D, N) fp32.
      {&packed, [](P&, A& a) { a.dA = {}; }, {"dA is required"}},
      {&packed, [](P&, A& a) { a.dA.shape[1] = 5; }, {"dA has shape (8, 5)", "expected (8, 4) [dim, dstate]"}},
      {&packed, [](P&, A& a) { a.dA.dtype = DType::BF16; }, {"dA has dtype bfloat16", "expected float32"}},
      // dB / dC: B's / C's form.
      {&packed, [](P&, A& a) { a.dB = {}; }, {"dB is required"}},
      {&packed, [](P&, A& a) { a.dC.shape[1] = 4; }, {"dC has shape (1, 4, 4, 6)", "dim 1 (ngroups) is 4, expected 2"}},
      {&packed, [](P&, A& a) { a.dB = a.dA; }, {"dB has rank 2", "expected rank 4"}},
      {&constB, [](P&, A& a) { a.dB.dtype = DType::BF16; }, {"dB has dtype bfloat16", "expected float32"}},
      {&constB, [](P&, A& a) { a.dB.shape[0] = 4; }, {"dB has shape (4, 4)", "expected (8, 4) [dim, dstate]"}},
      // dD / ddelta_bias exactly with D / delta_bias.
      {&packed, [](P&, A& a) { a.dD = {}; }, {"dD is not given, expected a tensor", "forward.D is given"}},
      {&packed,
       [](P&, A& a) { a.forward.delta_bias = {}; },
       {"ddelta_bias is given", "forward.delta_bias is not given"}},
      {&packed, [](P&, A& a) { a.dD.dtype = DType::F16; }, {"dD has dtype float16", "expected float32"}},
      // dinitial_states: only with initial states, their shape.
      {&packed,
       [](P&, A& a) { a.forward.initial_states = a.forward.initial_state_indices = {}; },
       {"dinitial_states is given (shape (5, 8, 4))", "expected none", "forward.initial_states is not given"}},
      {&packed,
       [](P&, A& a) { a.dinitial_states.shape[0] = 4; },
       {"dinitial_states has shape (4, 8, 4)", "expected (5, 8, 4) [slots, dim, dstate]"}},
      // dout: u's shape (checked as the forward checks out); dfinal_states as final_states.
      {&packed, [](P&, A& a) { a.dout = {}; }, {"dout is required"}},
      {&packed, [](P&, A& a) { a.dout.shape[2] = 5; }, {"dout has shape (1, 8, 5)", "dim 2 (seqlen) is 5, expected 6"}},
      {&packed,
       [](P&, A& a) { a.dfinal_states.shape[2] = 3; },
       {"dfinal_states has shape (5, 8, 3)", "dim 2 (dstate) is 3"}},
      // No output may alias an input or another output.
      {&packed,
       [](P&, A& a) { a.du.data = a.forward.u.data; },
       {"du has data pointer 0x", "the same as u's", "expected a separate tensor"}},
      {&packed, [](P&, A& a) { a.ddelta.data = a.dout.data; }, {"ddelta has data pointer", "the same as dout's"}},
      {&packed,
       [](P&, A& a) { a.dinitial_states.data = a.forward.initial_states.data; },
       {"dinitial_states has data pointer", "the same as initial_states's"}},
      {&packed, [](P&, A& a) { a.dz.data = a.du.data; }, {"dz has data pointer", "the same as du's"}},
      // Values, read by the reference before anything is written.
      {&packed,
       [](P& p, A&) { setIndex(p.f.cu, 2, 2); },
       {"cu_seqlens[2] = 2 after cu_seqlens[1] = 2", "strictly increasing"}},
      {&packed,
       [](P&, A& a) { a.forward.max_seqlen = 2; },
       {"sequence 1 has 3 tokens", "expected at most max_seqlen = 2"}},
      {&packed, [](P& p, A&) { setIndex(p.f.initIdx, 2, 5); }, {"initial_state_indices[2] = 5", "[0, 5)"}},
      {&packed, [](P& p, A&) { setIndex(p.f.finalIdx, 0, -2); }, {"final_state_indices[0] = -2", "[0, 5)"}},
      {&packed,
       [](P& p, A&) { setIndex(p.f.initIdx, 2, p.f.initSlot[0]); },
       {"initial_state_indices[2]", "the slot of initial_state_indices[0] too",
        "expected distinct slots with dinitial_states"}},
  };
  for (size_t i = 0; i < bad.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i) + ": " + bad[i].parts[0]);
    ScanBackwardProblem p = *bad[i].base;
    SelectiveScanBackwardArgs a = p.args();
    bad[i].mutate(p, a);
    expectRefusedUnwritten(p, "reference::selective_scan_backward", bad[i].parts,
                           [&] { reference::selective_scan_backward(a); });
    for (HostTensor* t : {&p.du, &p.ddelta, &p.dA, &p.dB, &p.dC, &p.dD, &p.dz, &p.ddeltaBias, &p.dinit})
      if (t->defined) {
        EXPECT_EQ(nonFinite(*t), t->meta.numel()) << "a gradient is no longer poisoned";
      }
  }

  // The bases themselves are valid, and shared initial slots are fine without dinitial_states.
  for (const ScanBackwardProblem* base : {&packed, &constB}) {
    ScanBackwardProblem p = *base;
    EXPECT_NO_THROW(reference::selective_scan_backward(p.args()));
  }
  ScanBackwardProblem p = packed;
  setIndex(p.f.initIdx, 2, p.f.initSlot[0]);
  SelectiveScanBackwardArgs a = p.args();
  a.dinitial_states = {};
  EXPECT_NO_THROW(reference::selective_scan_backward(a));
}

}  // namespace
