// Selective state update on the CPU: the argument check of the ops (every bad input gets an
// InvalidArgument error naming the argument, the expected and the actual value, and nothing
// touches the GPU: tensors here are fake device pointers that must never be dereferenced), and
// self-tests of the float64 reference the GPU tests compare against.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "SsuTestUtil.h"
#include "runtime/Driver.h"
#include "ssmjit/error.h"
#include "ssmjit/ops.h"
#include "ssmjit/reference.h"
#include "tests/support/ExpectError.h"
#include "tests/support/FakeTensors.h"

using ssmjit::DType;
using ssmjit::Error;
using ssmjit::SelectiveStateUpdateArgs;
using ssmjit::StateWrite;
using ssmjit::TensorView;
using ssmjit::testing::invalidArgMessage;
using namespace ssutest;
using ssmjit::testing::fakeAddress;
using ssmjit::testing::fakeView;

namespace {

// ----------------------------------------------------------------------------------------------
// Argument check

// A valid Mamba-2 call: batch 4, L 3 (tokens op), H 8, P 16, N 32, G 2, S 6 slots with indices.
SelectiveStateUpdateArgs validM2(bool tokens, int64_t batch = 4) {
  const int64_t B = batch, L = 3, H = 8, P = 16, N = 32, G = 2, S = 6;
  SelectiveStateUpdateArgs a;
  auto lead = [&](std::initializer_list<int64_t> rest) {
    std::vector<int64_t> s{B};
    if (tokens) s.push_back(L);
    s.insert(s.end(), rest);
    return s;
  };
  auto view = [&](int k, DType t, const std::vector<int64_t>& shape) {
    TensorView v;
    v.data = fakeAddress(k);
    v.dtype = t;
    v.ndim = static_cast<int>(shape.size());
    int64_t st = 1;
    for (int d = v.ndim - 1; d >= 0; --d) {
      v.shape[d] = shape[d];
      v.strides[d] = st;
      st *= std::max<int64_t>(shape[d], 1);
    }
    return v;
  };
  a.state = fakeView(0, DType::F32, {S, H, P, N});
  a.x = view(1, DType::BF16, lead({H, P}));
  a.dt = view(2, DType::BF16, lead({H}));
  a.A = fakeView(3, DType::F32, {H});
  a.B = view(4, DType::BF16, lead({G, N}));
  a.C = view(5, DType::BF16, lead({G, N}));
  a.D = fakeView(6, DType::F32, {H});
  a.z = view(7, DType::BF16, lead({H, P}));
  a.dt_bias = fakeView(8, DType::F32, {H});
  a.out = view(9, DType::BF16, lead({H, P}));
  a.state_batch_indices = fakeView(10, DType::I32, {B});
  a.dt_softplus = true;
  return a;
}

// A valid Mamba-1 one-token call: batch 4, D 24, N 16, no indices (S = batch).
SelectiveStateUpdateArgs validM1() {
  SelectiveStateUpdateArgs a;
  a.state = fakeView(0, DType::F16, {4, 24, 16});
  a.x = fakeView(1, DType::F32, {4, 24});
  a.dt = fakeView(2, DType::F32, {4, 24});
  a.A = fakeView(3, DType::F32, {24, 16});
  a.B = fakeView(4, DType::F32, {4, 16});
  a.C = fakeView(5, DType::F32, {4, 16});
  a.out = fakeView(9, DType::F32, {4, 24});
  return a;
}

std::string tokensError(const SelectiveStateUpdateArgs& a) {
  return invalidArgMessage([&] { ssmjit::selective_state_update_tokens(a); });
}
std::string oneTokenError(const SelectiveStateUpdateArgs& a) {
  return invalidArgMessage([&] { ssmjit::selective_state_update(a); });
}

TEST(SsuValidation, ValidCallsPassTheCheck) {
  // Batch 0 passes every check and then returns without touching the GPU, so this shows the
  // baselines the other tests break are valid, on any machine.
  for (bool tokens : {false, true}) {
    SelectiveStateUpdateArgs a = validM2(tokens, 0);
    EXPECT_NO_THROW(tokens ? ssmjit::selective_state_update_tokens(a) : ssmjit::selective_state_update(a));
  }
  // The full-size baselines get past the check to the driver: without one, that is the error.
  if (ssmjit::driver::available()) GTEST_SKIP() << "a GPU is present: fake pointers would launch";
  for (int k = 0; k < 3; ++k) {
    try {
      if (k == 0) ssmjit::selective_state_update_tokens(validM2(true));
      if (k == 1) ssmjit::selective_state_update(validM2(false));
      if (k == 2) ssmjit::selective_state_update(validM1());
      ADD_FAILURE() << "expected the driver to be unavailable";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), Error::Kind::Unavailable) << e.what();
    }
  }
}

TEST(SsuValidation, WrongRank) {
  SelectiveStateUpdateArgs a = validM2(true);
  a.state.ndim = 5;
  a.state.shape[4] = 2;
  a.state.strides[4] = 1;
  EXPECT_MENTIONS(tokensError(a), "selective_state_update_tokens: state", "rank 5", "expected rank 3",
                  "or 4 (slots, nheads, headdim, dstate)");

  a = validM2(true);
  a.x = fakeView(1, DType::BF16, {4, 8, 16});  // token axis missing
  EXPECT_MENTIONS(tokensError(a), "x has rank 3", "(4, 8, 16)", "expected rank 4 (batch, tokens, nheads, headdim)");

  a = validM2(false);
  a.dt = fakeView(2, DType::BF16, {4, 8, 16});  // Mamba-2 dt is per head: (batch, nheads)
  EXPECT_MENTIONS(oneTokenError(a), "selective_state_update: dt has rank 3", "expected rank 2 (batch, nheads)",
                  "Mamba-2");

  SelectiveStateUpdateArgs b = validM1();
  b.A = fakeView(3, DType::F32, {24});  // Mamba-1 A is (dim, dstate)
  EXPECT_MENTIONS(oneTokenError(b), "A has rank 1", "expected rank 2 (dim, dstate)", "Mamba-1");
}

TEST(SsuValidation, MismatchedDims) {
  SelectiveStateUpdateArgs a = validM2(true);
  a.C = fakeView(5, DType::BF16, {4, 3, 1, 32});
  EXPECT_MENTIONS(tokensError(a), "C has shape (4, 3, 1, 32)", "expected (4, 3, 2, 32)",
                  "[batch, tokens, ngroups, dstate]", "dim 2 (ngroups) is 1, expected 2");

  a = validM2(true);
  a.B = fakeView(4, DType::BF16, {5, 3, 2, 32});
  EXPECT_MENTIONS(tokensError(a), "B has shape (5, 3, 2, 32)", "dim 0 (batch) is 5, expected 4");

  a = validM2(true);
  a.x = fakeView(1, DType::BF16, {4, 3, 8, 15});
  EXPECT_MENTIONS(tokensError(a), "x has shape (4, 3, 8, 15)", "dim 3 (headdim) is 15, expected 16");

  a = validM2(false);
  a.D = fakeView(6, DType::F32, {16});
  EXPECT_MENTIONS(oneTokenError(a), "D has shape (16)", "expected (8) [nheads]", "dim 0 (nheads) is 16, expected 8");

  a = validM2(true);
  a.dst_state_indices = fakeView(11, DType::I32, {4, 2});
  a.state_write = StateWrite::PerToken;
  EXPECT_MENTIONS(tokensError(a), "dst_state_indices has shape (4, 2)", "dim 1 (tokens) is 2, expected 3");

  SelectiveStateUpdateArgs b = validM1();
  b.A = fakeView(3, DType::F32, {24, 8});
  EXPECT_MENTIONS(oneTokenError(b), "A has shape (24, 8)", "[dim, dstate]", "dim 1 (dstate) is 8, expected 16");

  b = validM1();
  b.state = fakeView(0, DType::F16, {3, 24, 16});  // no indices: one slot per sequence
  EXPECT_MENTIONS(oneTokenError(b), "state has 3 slots", "expected batch = 4", "state_batch_indices");
}

TEST(SsuValidation, UnsupportedDtype) {
  SelectiveStateUpdateArgs a = validM2(true);
  a.x.dtype = DType::I32;
  EXPECT_MENTIONS(tokensError(a), "x has dtype int32", "expected float32, bfloat16 or float16");

  a = validM2(true);
  a.A.dtype = DType::BF16;
  EXPECT_MENTIONS(tokensError(a), "A has dtype bfloat16", "expected float32");

  a = validM2(true);
  a.state.dtype = DType::I64;
  EXPECT_MENTIONS(tokensError(a), "state has dtype int64", "expected float32, bfloat16 or float16");
}

TEST(SsuValidation, HeadsNotDivisibleByGroups) {
  SelectiveStateUpdateArgs a = validM2(true);
  a.B = fakeView(4, DType::BF16, {4, 3, 3, 32});
  a.C = fakeView(5, DType::BF16, {4, 3, 3, 32});
  EXPECT_MENTIONS(tokensError(a), "B has shape (4, 3, 3, 32)", "dim 2 (ngroups) is 3",
                  "expected a divisor of nheads H = 8");
}

TEST(SsuValidation, TokensOverTheLimit) {
  SelectiveStateUpdateArgs a = validM2(true);
  for (int64_t L : {int64_t{ssmjit::kMaxTokens} + 1, int64_t{0}}) {
    for (TensorView* t : {&a.x, &a.dt, &a.B, &a.C, &a.z, &a.out}) {
      t->shape[1] = L;
    }
    const std::string m = tokensError(a);
    EXPECT_MENTIONS(m, "x has " + std::to_string(L) + " tokens", "expected 1 <= L <= 32");
  }
}

TEST(SsuValidation, StridesTheKernelCannotTake) {
  SelectiveStateUpdateArgs a = validM2(true);
  a.x.strides[2] = -16;
  EXPECT_MENTIONS(tokensError(a), "x has strides (384, 128, -16, 1)", "dim 2 (nheads) has stride -16",
                  "expected a stride >= 0");

  a = validM2(true);
  a.out.strides[3] = 0;  // every p would write the same element
  EXPECT_MENTIONS(tokensError(a), "out has strides (384, 128, 16, 0)", "dim 3 (headdim, size 16) has stride 0",
                  "expected a nonzero stride");

  a = validM2(true);
  a.state.strides[0] = 0;
  EXPECT_MENTIONS(tokensError(a), "state has strides (0, 512, 32, 1)", "dim 0 (slots, size 6) has stride 0");

  a = validM2(true);
  a.B.strides[3] = 0;
  EXPECT_MENTIONS(tokensError(a), "B has strides", "dim 3 (dstate, size 32) has stride 0");

  // A, D and dt_bias may broadcast (one value for every head); batch 0 skips the launch.
  a = validM2(true, 0);
  a.A.strides[0] = 0;
  a.D.strides[0] = 0;
  a.dt_bias.strides[0] = 0;
  EXPECT_NO_THROW(ssmjit::selective_state_update_tokens(a));
}

TEST(SsuValidation, PerTokenNeedsDestinationSlots) {
  SelectiveStateUpdateArgs a = validM2(true);
  a.state_write = StateWrite::PerToken;
  EXPECT_MENTIONS(tokensError(a), "dst_state_indices is required with state_write = PerToken", "got none",
                  "(4, 3) [batch, tokens]");

  // The one-token op takes them as (batch,).
  a = validM2(false);
  a.state_write = StateWrite::PerToken;
  a.dst_state_indices = fakeView(11, DType::I64, {4, 1});
  EXPECT_MENTIONS(oneTokenError(a), "dst_state_indices has rank 2", "expected rank 1 (batch)");

  a = validM2(true);
  a.dst_state_indices = fakeView(11, DType::I32, {4, 3});
  EXPECT_MENTIONS(tokensError(a), "dst_state_indices is given", "state_write is Final", "only PerToken");

  a = validM2(true);
  a.state_write = static_cast<StateWrite>(7);
  EXPECT_MENTIONS(tokensError(a), "state_write is 7", "expected Final (0), None (1) or PerToken (2)");
}

TEST(SsuValidation, IndexTensorWrongDtype) {
  SelectiveStateUpdateArgs a = validM2(true);
  a.state_batch_indices.dtype = DType::F32;
  EXPECT_MENTIONS(tokensError(a), "state_batch_indices has dtype float32", "expected int32 or int64");

  a = validM2(true);
  a.state_write = StateWrite::PerToken;
  a.dst_state_indices = fakeView(11, DType::F16, {4, 3});
  EXPECT_MENTIONS(tokensError(a), "dst_state_indices has dtype float16", "expected int32 or int64");

  a = validM2(true);
  a.state_batch_indices = fakeView(10, DType::I64, {5});
  EXPECT_MENTIONS(tokensError(a), "state_batch_indices has shape (5)", "dim 0 (batch) is 5, expected 4");
}

TEST(SsuValidation, DevicesAlignmentAndMissingTensors) {
  SelectiveStateUpdateArgs a = validM2(true);
  a.z.device = ssmjit::DeviceKind::CPU;
  EXPECT_MENTIONS(tokensError(a), "z is a CPU tensor, expected a CUDA tensor");

  a = validM2(true);
  a.dt.deviceId = 1;
  EXPECT_MENTIONS(tokensError(a), "dt is on CUDA device 1, expected device 0");

  a = validM2(true);
  a.B.data = static_cast<char*>(a.B.data) + 1;  // bf16 at an odd address
  EXPECT_MENTIONS(tokensError(a), "B has data pointer 0x",
                  "expected a multiple of its element size (bfloat16: 2 bytes)");

  a = validM2(true);
  a.C = TensorView{};
  EXPECT_MENTIONS(tokensError(a), "C is required");

  a = validM2(true);
  a.dt_max = NAN;
  EXPECT_MENTIONS(tokensError(a), "dt_max = nan");
}

TEST(SsuValidation, ReferenceRunsTheSameCheckOnCpuTensors) {
  // Device tensors are refused by the reference (it would dereference them).
  const std::string m = invalidArgMessage([&] { ssmjit::reference::selective_state_update_tokens(validM2(true)); });
  EXPECT_MENTIONS(m, "reference::selective_state_update_tokens: state is a CUDA tensor", "expected a CPU tensor");
}

// ----------------------------------------------------------------------------------------------
// The float64 reference

void runRef(const SsuProblem& p) { runReference(p); }

// Runs token t of the tokens problem `p` through the one-token op, updating `state` and `out`
// (views of a separate copy) in Final mode.
void oneTokenStep(const SsuProblem& p, int64_t t, const TensorView& state, const TensorView& out) {
  SelectiveStateUpdateArgs a = p.args();
  a.state = state;
  a.out = out;
  ssmjit::reference::selective_state_update(oneTokenArgs(a, t));
}

// Overwrites every float input of `p` with small dyadic values and A with 0, so that every
// state update is exact in float64 and in fp32 storage: the L-token run and L one-token runs
// (which store and reload the state between tokens) must then agree bit for bit.
void makeExact(SsuProblem& p, std::mt19937_64& rng) {
  auto dyadic = [&](HostTensor& h, int lo, int hi) {
    if (!h.defined) return;
    const TensorView v = h.view();
    forEachElement(v, [&](int64_t off, const std::vector<int64_t>&) {
      storeElement(v, off, double(lo + int64_t(rng() % uint64_t(hi - lo + 1))) / 8.0);
    });
  };
  dyadic(p.state, -8, 8);
  dyadic(p.x, -8, 8);
  dyadic(p.dt, 1, 3);
  dyadic(p.B, -8, 8);
  dyadic(p.C, -8, 8);
  dyadic(p.D, -8, 8);
  dyadic(p.z, -8, 8);
  dyadic(p.dtBias, 0, 1);
  dyadic(p.A, 0, 0);
}

// Compares the L-token reference with L one-token reference calls, for every write mode.
// exact: bit for bit (see makeExact); else within `tol` relative L2, and token 0 bit for bit.
void checkTokensAgainstChain(SsuCase c, bool exact, double tol) {
  SsuProblem p = makeProblem(c);
  std::mt19937_64 rng(c.seed + 99);
  if (exact) makeExact(p, rng);
  SsuProblem fused = p, chain = p;
  runRef(fused);

  const TensorView chainState = chain.state.view(), chainOut = chain.out.view();
  const TensorView fusedState = fused.state.view();
  const TensorView st0 = p.state.view();
  const auto rows = rowsWritten(p);
  for (int64_t t = 0; t < c.L; ++t) {
    oneTokenStep(p, t, chainState, chainOut);
    if (c.write != StateWrite::PerToken) continue;
    // Snapshot t of the fused run == the chain's state after t + 1 tokens.
    const TensorView dv = p.dst.view();
    for (int64_t b = 0; b < c.batch; ++b) {
      const int64_t ds = int64_t(loadElement(dv, b * dv.strides[0] + t * dv.strides[1]));
      if (p.readSlot[b] < 0 || ds < 0) continue;
      double num = 0, den = 0;
      int64_t bitDiffs = 0;
      forEachElement(st0, [&](int64_t off, const std::vector<int64_t>& i) {
        if (i[0] != 0) return;  // one slot: offsets relative to slot 0
        const double got = loadElement(fusedState, off + ds * st0.strides[0]);
        const double want = loadElement(chainState, off + p.readSlot[b] * st0.strides[0]);
        bitDiffs += got != want;
        num += (got - want) * (got - want);
        den += want * want;
      });
      if (exact || t == 0)
        EXPECT_EQ(bitDiffs, 0) << "snapshot b " << b << " t " << t;
      else
        EXPECT_LE(std::sqrt(num / den), tol) << "snapshot b " << b << " t " << t;
    }
  }
  // out: the same elements written (pads untouched), with the same values.
  const Compared co = compareTensor(chain.out, fused.out.bytes, rows);
  EXPECT_EQ(co.violations, 0) << co.first;
  EXPECT_GT(co.written, 0);
  if (exact)
    EXPECT_EQ(chain.out.bytes, fused.out.bytes);
  else
    EXPECT_LE(co.relL2, tol);
  if (c.write == StateWrite::Final) {
    std::vector<char> slots(p.slotMayBeWritten.begin(), p.slotMayBeWritten.end());
    const Compared cs = compareTensor(chain.state, fused.state.bytes, slots);
    EXPECT_EQ(cs.violations, 0) << cs.first;
    if (exact)
      EXPECT_EQ(chain.state.bytes, fused.state.bytes);
    else
      EXPECT_LE(cs.relL2, tol);
  }
  if (c.write == StateWrite::None) {
    EXPECT_EQ(fused.state.bytes, p.state.bytes);
  }
}

SsuCase smallM2(uint64_t seed) {
  SsuCase c = mamba2Heads(/*H=*/6, /*P=*/5, /*N=*/7, /*G=*/3);
  c.batch = 5;
  c.L = 6;
  c.stateIdx = true;
  c.pads = 2;
  c.seed = seed;
  return c;
}

TEST(SsuReference, TokensEqualOneTokenCallsBitwiseOnExactInputs) {
  for (StateWrite w : {StateWrite::Final, StateWrite::None, StateWrite::PerToken}) {
    for (bool m2 : {true, false}) {
      SsuCase c = smallM2(11 + int(w) * 2 + m2);
      c.mamba2 = m2;
      c.write = w;
      c.softplus = false;  // log1p(exp()) of a dyadic is not dyadic
      c.strided = m2;
      SCOPED_TRACE(c.name());
      checkTokensAgainstChain(c, /*exact=*/true, 0);
    }
  }
}

TEST(SsuReference, TokensEqualOneTokenCallsOnRandomInputs) {
  // fp32 state: the chain rounds the state to fp32 after every token, the fused run does not;
  // that is the only difference, well under 1e-6 relative L2.
  for (StateWrite w : {StateWrite::Final, StateWrite::PerToken}) {
    SsuCase c = smallM2(31 + int(w));
    c.write = w;
    c.clamp = true;
    c.L = 16;
    SCOPED_TRACE(c.name());
    checkTokensAgainstChain(c, /*exact=*/false, 1e-6);
  }
}

TEST(SsuReference, PadRowsAndUnusedSlotsAreUntouched) {
  for (StateWrite w : {StateWrite::Final, StateWrite::PerToken, StateWrite::None}) {
    SsuCase c = smallM2(41 + int(w));
    c.write = w;
    c.strided = true;
    c.stateT = DType::BF16;
    c.outT = DType::F16;
    SCOPED_TRACE(c.name());
    SsuProblem p = makeProblem(c), r = p;
    runRef(r);
    const auto rows = rowsWritten(p);
    ASSERT_EQ(std::count(rows.begin(), rows.end(), 0), 2);
    // out: pad rows (and layout gaps) still poison bytes; every other element written, finite.
    const TensorView ov = r.out.view();
    int64_t poisonLeft = 0, written = 0;
    forEachElement(ov, [&](int64_t off, const std::vector<int64_t>& i) {
      const double v = loadElement(ov, off);
      if (rows[i[0]]) {
        EXPECT_TRUE(std::isfinite(v));
        ++written;
      } else {
        poisonLeft += std::isnan(v);
      }
    });
    EXPECT_EQ(poisonLeft, ov.numel() / c.batch * 2);
    EXPECT_EQ(written, ov.numel() / c.batch * (c.batch - 2));
    // state: slots nobody writes are bitwise unchanged; every written slot changed somewhere.
    const Compared cs = compareTensor(p.state, r.state.bytes, p.slotMayBeWritten);
    EXPECT_EQ(cs.violations, 0) << cs.first;
    const TensorView s0 = p.state.view(), s1 = r.state.view();
    for (int64_t s = 0; s < p.S; ++s) {
      if (!p.slotMayBeWritten[s]) continue;
      int64_t changed = 0;
      forEachElement(s0, [&](int64_t off, const std::vector<int64_t>& i) {
        if (i[0] == s) changed += loadElement(s0, off) != loadElement(s1, off);
      });
      EXPECT_GT(changed, 0) << "slot " << s << " should have been written";
    }
  }
}

TEST(SsuReference, PerTokenWritesExactlyTheDestinationSlots) {
  SsuCase c = smallM2(51);
  c.write = StateWrite::PerToken;
  c.idxT = DType::I64;
  SsuProblem p = makeProblem(c), r = p;
  runRef(r);
  // Read slots are not written (they are not destinations); -1 destinations are skipped.
  for (int64_t s : p.readSlot)
    if (s >= 0) {
      EXPECT_FALSE(p.slotMayBeWritten[s]);
    }
  const Compared cs = compareTensor(p.state, r.state.bytes, p.slotMayBeWritten);
  EXPECT_EQ(cs.violations, 0) << cs.first;
  int64_t skipped = 0;
  const TensorView dv = p.dst.view();
  forEachElement(dv, [&](int64_t off, const std::vector<int64_t>&) { skipped += loadElement(dv, off) < 0; });
  EXPECT_GT(skipped, 0) << "the case should include skipped (-1) destinations";
}

// One sequence, one channel, N = 1: the closed form of the update, computed here independently.
struct Scalar {
  double state = 0.5, x = 0.75, dt = 0.3, A = -1.5, B = 0.625, C = -1.25, D = 0.5, z = 0.8, bias = 0.2;
  bool softplus = false, hasD = true, hasZ = true, hasBias = true;
  float dtMin = 0, dtMax = 0;
};

// Returns (out, new state) from the reference on a 1x1x1 Mamba-1 problem in fp32.
std::pair<double, double> refScalar(const Scalar& s) {
  float st = float(s.state), x = float(s.x), dt = float(s.dt), A = float(s.A), B = float(s.B), C = float(s.C),
        D = float(s.D), z = float(s.z), bias = float(s.bias), out = NAN;
  SelectiveStateUpdateArgs a;
  auto v = [](float* p, std::initializer_list<int64_t> shape) {
    return TensorView::contiguous(p, DType::F32, shape, ssmjit::DeviceKind::CPU);
  };
  a.state = v(&st, {1, 1, 1});
  a.x = v(&x, {1, 1});
  a.dt = v(&dt, {1, 1});
  a.A = v(&A, {1, 1});
  a.B = v(&B, {1, 1});
  a.C = v(&C, {1, 1});
  if (s.hasD) a.D = v(&D, {1});
  if (s.hasZ) a.z = v(&z, {1, 1});
  if (s.hasBias) a.dt_bias = v(&bias, {1});
  a.out = v(&out, {1, 1});
  a.dt_softplus = s.softplus;
  a.dt_min = s.dtMin;
  a.dt_max = s.dtMax;
  ssmjit::reference::selective_state_update(a);
  return {out, st};
}

std::pair<double, double> closedForm(const Scalar& s, double dtEff) {
  auto f = [](double v) { return double(float(v)); };  // inputs as stored in fp32
  const double st = f(s.state) * std::exp(f(s.A) * dtEff) + f(s.B) * dtEff * f(s.x);
  double y = st * f(s.C);
  if (s.hasD) y += f(s.x) * f(s.D);
  if (s.hasZ) y *= f(s.z) / (1 + std::exp(-f(s.z)));
  return {double(float(y)), double(float(st))};
}

// The reference and the closed form round the same double values to fp32 storage; evaluated in a
// different order they may land one fp32 ulp apart, never more.
#define EXPECT_CLOSE_FP32(got, want)                                            \
  do {                                                                          \
    auto g_ = (got), w_ = (want);                                               \
    EXPECT_NEAR(g_.first, w_.first, 2.5e-7 * std::abs(w_.first)) << "out";      \
    EXPECT_NEAR(g_.second, w_.second, 2.5e-7 * std::abs(w_.second)) << "state"; \
  } while (0)

TEST(SsuReference, SoftplusClampAndGatingFollowTheClosedForm) {
  auto f = [](double v) { return double(float(v)); };
  Scalar s;
  // Plain: dt' = dt + bias.
  EXPECT_CLOSE_FP32(refScalar(s), closedForm(s, f(s.dt) + f(s.bias)));
  // Softplus of dt + bias.
  s.softplus = true;
  EXPECT_CLOSE_FP32(refScalar(s), closedForm(s, std::log1p(std::exp(f(s.dt) + f(s.bias)))));
  // Past 20 the value is used as is; log1p(exp(800)) would be inf and the result NaN.
  Scalar big = s;
  big.dt = 800;
  auto r = refScalar(big);
  EXPECT_TRUE(std::isfinite(r.first) && std::isfinite(r.second));
  EXPECT_CLOSE_FP32(r, closedForm(big, 800.0 + f(big.bias)));
  // Clamp after softplus: above dt_max, below dt_min, and inside.
  s.dtMin = 0.1f;
  s.dtMax = 0.6f;  // softplus(0.5) = 0.974 > 0.6
  EXPECT_CLOSE_FP32(refScalar(s), closedForm(s, double(0.6f)));
  Scalar low = s;
  low.dt = -6;  // softplus(-5.8) = 0.003 < 0.1
  EXPECT_CLOSE_FP32(refScalar(low), closedForm(low, double(0.1f)));
  Scalar inside = s;
  inside.softplus = false;  // 0.5 in [0.1, 0.6]
  EXPECT_CLOSE_FP32(refScalar(inside), closedForm(inside, f(s.dt) + f(s.bias)));
  // dt_max <= dt_min: no clamp.
  // (Compared with the same call without clamp fields, bit for bit: that is the claim.)
  Scalar off = s, unclamped = s;
  off.dtMax = 0.1f;
  unclamped.dtMin = unclamped.dtMax = 0.0f;
  EXPECT_EQ(refScalar(off), refScalar(unclamped));
  EXPECT_NEAR(refScalar(off).first, closedForm(off, std::log1p(std::exp(f(s.dt) + f(s.bias)))).first, 1e-6);
  // Without D, z, bias.
  Scalar bare;
  bare.hasD = bare.hasZ = bare.hasBias = false;
  EXPECT_CLOSE_FP32(refScalar(bare), closedForm(bare, f(bare.dt)));
}

// Mamba-1 with A constant along dstate is Mamba-2 with one-channel heads (H = D, P = 1, G = 1):
// the two indexing paths of the reference must agree bit for bit.
TEST(SsuReference, Mamba1EqualsMamba2WithOneChannelHeads) {
  SsuCase c1;
  c1.mamba2 = false;
  c1.batch = 3;
  c1.L = 4;
  c1.P = 6;
  c1.N = 8;
  c1.clamp = true;
  c1.stateIdx = true;
  c1.pads = 1;
  c1.seed = 61;
  SsuProblem p1 = makeProblem(c1);
  {
    const TensorView av = p1.A.view();
    for (int64_t d = 0; d < c1.P; ++d)
      for (int64_t n = 1; n < c1.N; ++n)
        storeElement(av, d * av.strides[0] + n * av.strides[1], loadElement(av, d * av.strides[0]));
  }
  // The same bytes seen in the Mamba-2 layout.
  SsuProblem p2 = p1;
  auto reshape = [](HostTensor& h, std::initializer_list<int64_t> shape) {
    const TensorView old = h.meta;
    h.meta = TensorView::contiguous(nullptr, old.dtype, shape, ssmjit::DeviceKind::CPU);
  };
  const int64_t B = c1.batch, L = c1.L, D = c1.P, N = c1.N, S = p1.S;
  reshape(p2.state, {S, D, 1, N});
  reshape(p2.x, {B, L, D, 1});
  reshape(p2.z, {B, L, D, 1});
  reshape(p2.out, {B, L, D, 1});
  reshape(p2.B, {B, L, 1, N});
  reshape(p2.C, {B, L, 1, N});
  std::mt19937_64 rng(1);
  p2.A = makeTensor(DType::F32, {D}, Layout{}, rng);
  for (int64_t d = 0; d < D; ++d) storeElement(p2.A.view(), d, loadElement(p1.A.view(), d * p1.A.meta.strides[0]));
  runRef(p1);
  runRef(p2);
  EXPECT_EQ(p1.out.bytes, p2.out.bytes);
  EXPECT_EQ(p1.state.bytes, p2.state.bytes);
  EXPECT_NE(p1.out.bytes, makeProblem(c1).out.bytes) << "the run should have written out";
}

// The state columns n evolve independently and y sums them: a problem with dstate N equals N
// problems with dstate 1 (column n of state, B, C, and of A for Mamba-1), out summed over them.
// This pins A[d, n] (Mamba-1) and the n axis of every tensor.
TEST(SsuReference, StateColumnsEvolveIndependently) {
  for (bool m2 : {true, false}) {
    SsuCase c = smallM2(75 + m2);
    c.mamba2 = m2;
    c.hasD = c.hasZ = false;  // D and the gate act on the sum, not per column
    c.strided = true;
    SCOPED_TRACE(c.name());
    SsuProblem full = makeProblem(c), ran = full;
    runRef(ran);
    SsuCase c1 = c;
    c1.N = 1;
    c1.strided = false;
    std::vector<double> outSum(size_t(full.out.view().numel()), 0.0);
    for (int64_t n = 0; n < c.N; ++n) {
      SsuProblem col = makeProblem(c1);
      auto tf = full.all(), tc = col.all();
      for (size_t k = 0; k < tf.size(); ++k) {
        if (!tf[k]->defined || tf[k] == &full.out) continue;
        const TensorView fv = tf[k]->view(), cv = tc[k]->view();
        // Tensors with an n axis (last): state, B, C, and A for Mamba-1.
        const bool hasN = tf[k] == &full.state || tf[k] == &full.B || tf[k] == &full.C || (tf[k] == &full.A && !m2);
        forEachElement(cv, [&](int64_t off, const std::vector<int64_t>& i) {
          int64_t fo = 0;
          for (size_t d = 0; d < i.size(); ++d) fo += (hasN && d + 1 == i.size() ? n : i[d]) * fv.strides[d];
          storeElement(cv, off, loadElement(fv, fo));
        });
      }
      runRef(col);
      // State column n: the same computation, bit for bit.
      const TensorView rs = ran.state.view(), cs = col.state.view();
      int64_t diffs = 0;
      forEachElement(cs, [&](int64_t off, const std::vector<int64_t>& i) {
        int64_t fo = 0;
        for (size_t d = 0; d + 1 < i.size(); ++d) fo += i[d] * rs.strides[d];
        fo += n * rs.strides[i.size() - 1];
        diffs += loadElement(cs, off) != loadElement(rs, fo);
      });
      EXPECT_EQ(diffs, 0) << "state column " << n;
      const TensorView co = col.out.view();
      size_t e = 0;
      forEachElement(co, [&](int64_t off, const std::vector<int64_t>& i) {
        if (full.readSlot[i[0]] >= 0) outSum[e] += loadElement(co, off);
        ++e;
      });
    }
    const TensorView ro = ran.out.view();
    double num = 0, den = 0;
    size_t e = 0;
    forEachElement(ro, [&](int64_t off, const std::vector<int64_t>& i) {
      if (full.readSlot[i[0]] >= 0) {
        const double v = loadElement(ro, off);
        num += (v - outSum[e]) * (v - outSum[e]);
        den += v * v;
      }
      ++e;
    });
    EXPECT_LE(std::sqrt(num / den), 1e-6);  // fp32 rounding of each column's out
  }
}

// D adds x * D[c] and dt_bias adds to dt, with c the head (Mamba-2) or channel (Mamba-1).
TEST(SsuReference, PerHeadAndPerChannelParameters) {
  for (bool m2 : {true, false}) {
    SsuCase c = smallM2(77 + m2);
    c.mamba2 = m2;
    c.hasZ = false;
    c.softplus = false;
    SCOPED_TRACE(c.name());
    SsuProblem base = makeProblem(c);
    SsuProblem withD = base, noD = base, foldedBias = base;
    noD.D = HostTensor{};
    // dt + dt_bias folded into dt (fp32 inputs: one rounding, ~1e-7).
    foldedBias.dtBias = HostTensor{};
    const TensorView dv = foldedBias.dt.view(), bv = base.dtBias.view();
    forEachElement(dv, [&](int64_t off, const std::vector<int64_t>& i) {
      storeElement(dv, off, loadElement(dv, off) + loadElement(bv, i.back() * bv.strides[0]));
    });
    runRef(withD);
    runRef(noD);
    runRef(foldedBias);
    const TensorView o1 = withD.out.view(), o0 = noD.out.view(), x = base.x.view();
    const TensorView Dv = base.D.view();
    double worst = 0;
    forEachElement(o1, [&](int64_t off, const std::vector<int64_t>& i) {
      if (base.readSlot[i[0]] < 0) return;
      // x has o1's layout (both contiguous here); c = h (dim 2) or the channel (last dim).
      const int64_t ch = m2 ? i[2] : i.back();
      const double want = loadElement(x, off) * loadElement(Dv, ch * Dv.strides[0]);
      worst = std::max(worst, std::fabs(loadElement(o1, off) - loadElement(o0, off) - want));
    });
    EXPECT_LE(worst, 1e-5);
    const Compared cb = compareTensor(withD.out, foldedBias.out.bytes, rowsWritten(base));
    EXPECT_EQ(cb.violations, 0) << cb.first;
    EXPECT_LE(cb.relL2, 1e-6);
  }
}

// Head h reads group h / (H / G): G = 2 groups over 4 heads equals G = 4 with each group
// duplicated for its two heads.
TEST(SsuReference, HeadsReadTheirGroup) {
  SsuCase c = smallM2(71);
  c.H = 4;
  c.G = 2;
  SsuProblem p2 = makeProblem(c);
  SsuCase c4 = c;
  c4.G = 4;
  SsuProblem p4 = makeProblem(c4);
  // Everything but B and C has the same shape and layout: copy the bytes.
  auto t2 = p2.all(), t4 = p4.all();
  for (size_t k = 0; k < t2.size(); ++k)
    if (t2[k] != &p2.B && t2[k] != &p2.C) t4[k]->bytes = t2[k]->bytes;
  for (auto [dst, src] : {std::pair{&p4.B, &p2.B}, std::pair{&p4.C, &p2.C}}) {
    const TensorView dv = dst->view(), sv = src->view();
    forEachElement(dv, [&](int64_t off, const std::vector<int64_t>& i) {
      const int64_t so =
          i[0] * sv.strides[0] + i[1] * sv.strides[1] + (i[2] / 2) * sv.strides[2] + i[3] * sv.strides[3];
      storeElement(dv, off, loadElement(sv, so));
    });
  }
  runRef(p2);
  runRef(p4);
  EXPECT_EQ(p2.out.bytes, p4.out.bytes);
  EXPECT_EQ(p2.state.bytes, p4.state.bytes);
}

// Strided, transposed and offset layouts give the same values as contiguous ones.
TEST(SsuReference, StridedEqualsContiguous) {
  for (bool m2 : {true, false}) {
    SsuCase c = smallM2(81 + m2);
    c.mamba2 = m2;
    c.strided = true;
    c.write = StateWrite::PerToken;
    c.inT = DType::F16;
    SsuProblem ps = makeProblem(c);
    c.strided = false;
    SsuProblem pc = makeProblem(c);
    auto ts = ps.all(), tc = pc.all();
    for (size_t k = 0; k < ts.size(); ++k) {
      if (!ts[k]->defined) continue;
      const TensorView sv = ts[k]->view(), cv = tc[k]->view();
      forEachElement(sv, [&](int64_t off, const std::vector<int64_t>& i) {
        int64_t co = 0;
        for (size_t d = 0; d < i.size(); ++d) co += i[d] * cv.strides[d];
        std::memcpy(static_cast<char*>(cv.data) + co * ssmjit::dtypeBytes(cv.dtype),
                    static_cast<const char*>(sv.data) + off * ssmjit::dtypeBytes(sv.dtype),
                    size_t(ssmjit::dtypeBytes(sv.dtype)));
      });
    }
    runRef(ps);
    runRef(pc);
    for (auto [s, k] : {std::pair{&ps.out, &pc.out}, std::pair{&ps.state, &pc.state}}) {
      const TensorView sv = s->view(), cv = k->view();
      int64_t diffs = 0;
      forEachElement(sv, [&](int64_t off, const std::vector<int64_t>& i) {
        int64_t co = 0;
        for (size_t d = 0; d < i.size(); ++d) co += i[d] * cv.strides[d];
        const double a = loadElement(sv, off), b = loadElement(cv, co);
        diffs += !(a == b || (std::isnan(a) && std::isnan(b)));
      });
      EXPECT_EQ(diffs, 0) << (m2 ? "Mamba-2" : "Mamba-1");
    }
  }
}

TEST(SsuReference, BadSlotThrowsBeforeWriting) {
  SsuCase c = smallM2(91);
  c.write = StateWrite::PerToken;
  SsuProblem p = makeProblem(c);
  {
    SsuProblem r = p;
    storeElement(r.idx.view(), 1 * r.idx.meta.strides[0], double(p.S));
    const std::string m = invalidArgMessage([&] { runRef(r); });
    EXPECT_MENTIONS(m, "state_batch_indices[1] = " + std::to_string(p.S), "expected -1 (pad) or a slot in [0, ");
    EXPECT_EQ(r.out.bytes, p.out.bytes);
    EXPECT_EQ(r.state.bytes, p.state.bytes);
  }
  {
    SsuProblem r = p;
    const int64_t b = p.readSlot[2] >= 0 ? 2 : 3;
    storeElement(r.dst.view(), b * r.dst.meta.strides[0] + 4 * r.dst.meta.strides[1], -5);
    const std::string m = invalidArgMessage([&] { runRef(r); });
    EXPECT_MENTIONS(m, "dst_state_indices[" + std::to_string(b) + ", 4] = -5");
    EXPECT_EQ(r.out.bytes, p.out.bytes);
    EXPECT_EQ(r.state.bytes, p.state.bytes);
  }
}

TEST(SsuReference, SixteenBitConversionsRoundToNearestEven) {
  using namespace ssmjit::reference;
  EXPECT_EQ(toHalfBits(1.0), 0x3C00);
  EXPECT_EQ(toHalfBits(-2.0), 0xC000);
  EXPECT_EQ(toHalfBits(65504.0), 0x7BFF);
  EXPECT_EQ(toHalfBits(65519.99), 0x7BFF);
  EXPECT_EQ(toHalfBits(65520.0), 0x7C00);  // the tie above the largest finite rounds to inf
  EXPECT_EQ(toHalfBits(std::ldexp(1.0, -24)), 0x0001);
  EXPECT_EQ(toHalfBits(std::ldexp(1.0, -25)), 0x0000);                               // tie -> even (0)
  EXPECT_EQ(toHalfBits(std::ldexp(3.0, -25)), 0x0002);                               // tie -> even (2)
  EXPECT_EQ(toHalfBits(1.0 + std::ldexp(1.0, -11)), 0x3C00);                         // tie -> even
  EXPECT_EQ(toHalfBits(1.0 + std::ldexp(3.0, -11)), 0x3C02);                         // tie -> even (up)
  EXPECT_EQ(toHalfBits(1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -30)), 0x3C01);  // no double rounding
  EXPECT_EQ(toHalfBits(std::ldexp(1023.5, -24)), 0x0400);  // largest subnormal carries to min normal
  EXPECT_EQ(toHalfBits(-0.0), 0x8000);
  EXPECT_EQ(toHalfBits(1e300), 0x7C00);
  EXPECT_EQ(toHalfBits(-INFINITY), 0xFC00);
  EXPECT_EQ(toHalfBits(NAN) & 0x7C00, 0x7C00);
  EXPECT_NE(toHalfBits(NAN) & 0x03FF, 0);
  EXPECT_EQ(toBFloat16Bits(1.0), 0x3F80);
  EXPECT_EQ(toBFloat16Bits(1.0 + std::ldexp(1.0, -8)), 0x3F80);  // tie -> even
  EXPECT_EQ(toBFloat16Bits(1.0 + std::ldexp(3.0, -8)), 0x3F82);
  EXPECT_EQ(toBFloat16Bits(3.0e38), 0x7F62);
  EXPECT_EQ(toBFloat16Bits(3.4e38), 0x7F80);                 // past the largest finite + half ulp: inf
  EXPECT_EQ(toBFloat16Bits(std::ldexp(1.0, -133)), 0x0001);  // smallest subnormal
  EXPECT_TRUE(std::isnan(fromBFloat16Bits(toBFloat16Bits(NAN))));
  EXPECT_EQ(fromHalfBits(0x0001), std::ldexp(1.0, -24));
  EXPECT_EQ(fromBFloat16Bits(0xC040), -3.0);
  // Every finite and infinite pattern survives decode -> encode.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const double vh = fromHalfBits(uint16_t(h)), vb = fromBFloat16Bits(uint16_t(h));
    if (!std::isnan(vh)) {
      ASSERT_EQ(toHalfBits(vh), h) << std::hex << h;
    }
    if (!std::isnan(vb)) {
      ASSERT_EQ(toBFloat16Bits(vb), h) << std::hex << h;
    }
    // bf16 is the top half of an fp32.
    const uint32_t f32bits = h << 16;
    float f;
    std::memcpy(&f, &f32bits, 4);
    if (!std::isnan(f)) {
      ASSERT_EQ(vb, double(f)) << std::hex << h;
    }
  }
}

}  // namespace
