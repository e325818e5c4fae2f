// ssd on the CPU: the argument check (every bad call gets an InvalidArgument error naming the
// argument, the expected and the actual value, and writes nothing), and the float64 reference
// (a plain recurrence) against two independent float64 forms of the op (the quadratic form with
// summed segment sums and a chunked form, tests/support/SsdForms.h), plus the properties the
// GPU op promises: a packed sequence equals its own call bitwise, states by slot, block states,
// sequence_decay, and context-parallel state passing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "runtime/ops/SsdCheck.h"
#include "ssmjit/error.h"
#include "ssmjit/ops.h"
#include "ssmjit/reference.h"
#include "tests/support/ExpectError.h"
#include "tests/support/HostTensors.h"
#include "tests/support/SsdForms.h"
#include "tools/problems/HostTensor.h"

using namespace ssmjit;
using namespace ssmjit::testing;

namespace {

// ---- helpers ----------------------------------------------------------------------------------

void setEntry(HostTensor& t, int64_t k, int64_t v) { storeElement(t.view(), k, double(v)); }

// Half an ulp of `t` relative (rounding to nearest), and half the smallest subnormal (values
// below the dtype's range round to it or to 0).
double halfUlp(DType t) { return t == DType::F32 ? 0x1p-24 : t == DType::BF16 ? 0x1p-8 : 0x1p-11; }
double halfSubnormal(DType t) { return t == DType::F32 ? 0x1p-150 : t == DType::BF16 ? 0x1p-134 : 0x1p-25; }

double rms(const std::vector<double>& v) {
  double s = 0;
  for (double e : v) s += e * e;
  return v.empty() ? 0.0 : std::sqrt(s / double(v.size()));
}

// max |a - b| / (|b| + rms(b)) over equal-length vectors.
double relDiff(const std::vector<double>& a, const std::vector<double>& b) {
  const double r = rms(b);
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]) / (std::abs(b[i]) + r));
  return worst;
}

// The elements `got[idx]` of a tensor the reference wrote must be `exact` rounded once to the
// tensor's dtype: within half an ulp (plus double noise). Returns the worst |got - exact| / ulp/2.
double expectRoundedOnce(const char* name, const TensorView& t, const std::vector<int64_t>& first,
                         const std::function<double(const std::vector<int64_t>&)>& exact, double scale) {
  double worst = 0;
  const double u = halfUlp(t.dtype), sub = halfSubnormal(t.dtype);
  for (int64_t f : first) {
    TensorView s = slice(t, 0, f, 1);
    forEachElement(s, [&](int64_t off, std::vector<int64_t> idx) {
      idx[0] = f;
      const double got = loadElement(s, off), e = exact(idx);
      const double tol = u * std::abs(e) + sub + 1e-12 * scale;
      EXPECT_LE(std::abs(got - e), tol) << name << " at first index " << f << ": got " << got << ", exact " << e;
      worst = std::max(worst, std::abs(got - e) / (u * std::abs(e) + sub + 1e-300));
    });
  }
  return worst;
}

std::vector<int64_t> iota(int64_t n) {
  std::vector<int64_t> v(size_t(n), 0);
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = i;
  return v;
}

// ---- the argument check -----------------------------------------------------------------------

// Dense: batch 2, L 6, H 4, P 3, G 2, N 5; bf16 x and out, fp16 dt, fp32 B/C/z; D (H, P);
// states in place through int64 slots (S = 4); block states every 64 tokens (kmax 1); decay.
SsdCase denseCase() {
  SsdCase c;
  c.batch = 2, c.L = 6;
  c.xType = c.outType = DType::BF16, c.dtType = DType::F16;
  c.dPerChannel = true;
  c.initial = c.final = c.inPlace = c.slotIndices = true;
  c.indexType = DType::I64;
  c.blockTokens = 64, c.decay = true;
  return c;
}
// Packed: one row of 3 sequences (2, 3, 1 tokens: cu_seqlens 0 2 5 6), S = 5.
SsdCase packedCase() {
  SsdCase c = denseCase();
  c.lens = {2, 3, 1};
  return c;
}

TEST(SsdCheck, ValidCallsPass) {
  using detail::checkSsdArgs;
  const SsdProblem dense(denseCase()), packed(packedCase());
  const detail::SsdDims d = checkSsdArgs(dense.args(), DeviceKind::CPU, "ssd");
  EXPECT_EQ(d.batch, 2);
  EXPECT_EQ(d.L, 6);
  EXPECT_EQ(d.H, 4);
  EXPECT_EQ(d.P, 3);
  EXPECT_EQ(d.G, 2);
  EXPECT_EQ(d.N, 5);
  EXPECT_EQ(d.headsPerGroup, 2);
  EXPECT_EQ(d.chunk, 64);
  EXPECT_EQ(d.nseq, 2);
  EXPECT_FALSE(d.packed);
  EXPECT_TRUE(d.dPerChannel);
  EXPECT_FALSE(d.clamp);
  EXPECT_EQ(d.initSlots, 4);
  EXPECT_EQ(d.finalSlots, 4);
  EXPECT_EQ(d.blockTokens, 64);
  EXPECT_EQ(d.blockSlots, 3);
  EXPECT_EQ(d.blocksPerSeq, 1);
  const detail::SsdDims p = checkSsdArgs(packed.args(), DeviceKind::CPU, "ssd");
  EXPECT_EQ(p.batch, 1);
  EXPECT_EQ(p.L, 6);
  EXPECT_EQ(p.nseq, 3);
  EXPECT_TRUE(p.packed);
  EXPECT_EQ(p.initSlots, 5);

  // Parameters may broadcast; P and N at their bounds; G = H; a clamp; no options at all but out.
  SsdArgs a = dense.args();
  a.A.strides[0] = a.D.strides[0] = a.D.strides[1] = a.dt_bias.strides[0] = 0;
  a.dt_min = 0.1f, a.dt_max = 1.0f;
  EXPECT_TRUE(checkSsdArgs(a, DeviceKind::CPU, "op").clamp);
  SsdCase c;
  c.P = kMaxSsdHeadDim, c.N = kMaxSsdState, c.G = c.H, c.L = 1;
  const detail::SsdDims m = checkSsdArgs(SsdProblem(c).args(), DeviceKind::CPU, "op");
  EXPECT_EQ(m.P, kMaxSsdHeadDim);
  EXPECT_EQ(m.N, kMaxSsdState);
  EXPECT_EQ(m.G, m.H);
  c = SsdCase{};
  c.hasD = c.hasZ = c.hasDtBias = false;
  EXPECT_EQ(checkSsdArgs(SsdProblem(c).args(), DeviceKind::CPU, "op").initSlots, 0);
  // States only (no out) with any one state output; a chunk of 128 or 256.
  for (int k = 0; k < 3; ++k) {
    SsdArgs s = dense.args();
    s.out = {};
    if (k != 0) s.final_states = {}, s.final_state_indices = {};
    if (k != 1) s.block_state_tokens = 0, s.block_states = {}, s.block_state_indices = {};
    if (k != 2) s.sequence_decay = {};
    EXPECT_NO_THROW(checkSsdArgs(s, DeviceKind::CPU, "op")) << k;
  }
  a = dense.args();
  a.chunk_size = 256, a.block_state_tokens = 256;
  EXPECT_NO_THROW(checkSsdArgs(a, DeviceKind::CPU, "op"));
  a.chunk_size = 128;
  EXPECT_NO_THROW(checkSsdArgs(a, DeviceKind::CPU, "op"));
}

// What a bad call is wrong in: the arguments (the device check throws the same), or the values
// of cu_seqlens or the slot indices (read by the reference only).
enum class Wrong { Args, Values };

struct Bad {
  const SsdProblem* base;
  std::function<void(SsdProblem&, SsdArgs&)> mutate;
  std::vector<std::string> parts;
  Wrong wrong = Wrong::Args;
};

// Each bad call: the reference refuses it with every part in its message and writes nothing;
// for bad arguments the device check (reading no data) gives the same message.
void expectRefused(const std::vector<Bad>& bad) {
  for (size_t i = 0; i < bad.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i) + ": " + bad[i].parts[0]);
    SsdProblem p = *bad[i].base;
    SsdArgs a = p.args();
    bad[i].mutate(p, a);
    const std::string m = expectRefusedUnwritten(p, "reference::ssd", bad[i].parts, [&] { reference::ssd(a); });
    std::string dm;
    try {
      detail::checkSsdArgs(a, DeviceKind::CPU, "ssd");
    } catch (const Error& e) {
      dm = e.what();
    }
    if (bad[i].wrong == Wrong::Values)
      EXPECT_EQ(dm, "") << "the check reads no values";
    else
      EXPECT_EQ(dm, "ssd: " + m.substr(std::string("reference::ssd: ").size()));
  }
}

using P = SsdProblem;
using A = SsdArgs;

TEST(SsdCheck, ShapesAndGroups) {
  const SsdProblem dense(denseCase());
  expectRefused({
      {&dense, [](P&, A& a) { a.x = {}; }, {"x is required"}},
      {&dense, [](P&, A& a) { a.x.ndim = 3; }, {"x has rank 3", "expected rank 4 (batch, seqlen, nheads, headdim)"}},
      {&dense, [](P&, A& a) { a.dt.shape[2] = 5; }, {"dt has shape (2, 6, 5)", "dim 2 (nheads) is 5, expected 4"}},
      {&dense, [](P&, A& a) { a.dt = {}; }, {"dt is required"}},
      {&dense, [](P&, A& a) { a.z.shape[1] = 5; }, {"z has shape (2, 5, 4, 3)", "dim 1 (seqlen) is 5, expected 6"}},
      {&dense, [](P&, A& a) { a.out.shape[3] = 2; }, {"out has shape (2, 6, 4, 2)", "dim 3 (headdim) is 2"}},
      {&dense, [](P&, A& a) { a.A = {}; }, {"A is required"}},
      {&dense, [](P&, A& a) { a.A.shape[0] = 3; }, {"A has shape (3)", "expected (4) [nheads]"}},
      {&dense, [](P&, A& a) { a.dt_bias.shape[0] = 5; }, {"dt_bias has shape (5)", "expected (4) [nheads]"}},
      {&dense,
       [](P&, A& a) { a.D.ndim = 3; },
       {"D has rank 3", "expected rank 1 (nheads) or rank 2 (nheads, headdim)"}},
      {&dense, [](P&, A& a) { a.D.shape[1] = 4; }, {"D has shape (4, 4)", "dim 1 (headdim) is 4, expected 3"}},
      {&dense, [](P&, A& a) { a.D.ndim = 1, a.D.shape[0] = 12; }, {"D has shape (12)", "expected (4) [nheads]"}},
      {&dense, [](P&, A& a) { a.B = {}; }, {"B is required"}},
      {&dense,
       [](P&, A& a) { a.B.shape[2] = 3; },
       {"B has 3 groups (dim 2 of shape (2, 6, 3, 5))", "dividing nheads H = 4"}},
      {&dense, [](P&, A& a) { a.B.shape[0] = 1; }, {"B has shape (1, 6, 2, 5)", "dim 0 (batch) is 1, expected 2"}},
      {&dense, [](P&, A& a) { a.C.shape[2] = 1; }, {"C has shape (2, 6, 1, 5)", "dim 2 (ngroups) is 1, expected 2"}},
      {&dense, [](P&, A& a) { a.C.shape[3] = 4; }, {"C has shape (2, 6, 2, 4)", "dim 3 (dstate) is 4, expected 5"}},
  });
}

TEST(SsdCheck, SizeBounds) {
  const SsdProblem dense(denseCase());
  expectRefused({
      {&dense,
       [](P&, A& a) { a.x.shape[3] = 257; },
       {"x has headdim 257 (dim 3 of shape (2, 6, 4, 257))", "1 <= P <= 256 (kMaxSsdHeadDim)"}},
      {&dense, [](P&, A& a) { a.x.shape[3] = 0; }, {"x has headdim 0", "1 <= P <= 256"}},
      {&dense, [](P&, A& a) { a.x.shape[1] = 0; }, {"x has shape (2, 0, 4, 3)", "seqlen and nheads >= 1"}},
      {&dense, [](P&, A& a) { a.B.shape[3] = 257; }, {"B has dstate 257", "1 <= N <= 256 (kMaxSsdState)"}},
      {&dense, [](P&, A& a) { a.B.shape[3] = 0; }, {"B has dstate 0", "1 <= N <= 256"}},
      {&dense, [](P&, A& a) { a.B.shape[2] = 0; }, {"B has 0 groups", "expected G >= 1"}},
  });
}

TEST(SsdCheck, Dtypes) {
  const SsdProblem dense(denseCase());
  expectRefused({
      {&dense,
       [](P&, A& a) { a.x.dtype = DType::I32; },
       {"x has dtype int32", "expected float32, bfloat16 or float16"}},
      {&dense, [](P&, A& a) { a.dt.dtype = DType::I64; }, {"dt has dtype int64"}},
      {&dense, [](P&, A& a) { a.A.dtype = DType::BF16; }, {"A has dtype bfloat16", "expected float32"}},
      {&dense, [](P&, A& a) { a.B.dtype = DType::I32; }, {"B has dtype int32"}},
      {&dense, [](P&, A& a) { a.C.dtype = DType::I32; }, {"C has dtype int32"}},
      {&dense, [](P&, A& a) { a.D.dtype = DType::F16; }, {"D has dtype float16", "expected float32"}},
      {&dense, [](P&, A& a) { a.dt_bias.dtype = DType::BF16; }, {"dt_bias has dtype bfloat16", "expected float32"}},
      {&dense, [](P&, A& a) { a.z.dtype = DType::I32; }, {"z has dtype int32"}},
      {&dense, [](P&, A& a) { a.out.dtype = DType::I64; }, {"out has dtype int64"}},
      {&dense, [](P&, A& a) { a.initial_states.dtype = DType::I32; }, {"initial_states has dtype int32"}},
      {&dense,
       [](P&, A& a) { a.initial_state_indices.dtype = DType::F32; },
       {"initial_state_indices has dtype float32", "expected int32 or int64"}},
      {&dense,
       [](P&, A& a) { a.block_state_indices.dtype = DType::F32; },
       {"block_state_indices has dtype float32", "expected int32 or int64"}},
      {&dense,
       [](P&, A& a) { a.sequence_decay.dtype = DType::BF16; },
       {"sequence_decay has dtype bfloat16", "expected float32"}},
      {&dense, [](P&, A& a) { a.A.device = DeviceKind::CUDA; }, {"A is a CUDA tensor, expected a CPU tensor"}},
  });
}

TEST(SsdCheck, StridesAndAlignment) {
  const SsdProblem dense(denseCase());
  expectRefused({
      {&dense,
       [](P&, A& a) { a.x.strides[3] = 2; },
       {"x has stride 2 along its last axis (dim 3 of shape (2, 6, 4, 3))", "expected 1"}},
      {&dense, [](P&, A& a) { a.z.strides[3] = 4; }, {"z has stride 4 along its last axis", "expected 1"}},
      {&dense, [](P&, A& a) { a.out.strides[3] = 3; }, {"out has stride 3 along its last axis"}},
      {&dense, [](P&, A& a) { a.B.strides[3] = 2; }, {"B has stride 2 along its last axis"}},
      {&dense, [](P&, A& a) { a.C.strides[3] = 2; }, {"C has stride 2 along its last axis"}},
      {&dense, [](P&, A& a) { a.x.strides[1] = 0; }, {"x has strides", "dim 1 (seqlen, size 6) has stride 0"}},
      {&dense, [](P&, A& a) { a.dt.strides[0] = -3; }, {"dt has strides", "expected a stride >= 0"}},
      {&dense, [](P&, A& a) { a.out.strides[0] = 0; }, {"out has strides", "has stride 0"}},
      {&dense,
       [](P&, A& a) { a.final_states.strides[1] = 0; },
       {"final_states has strides", "(nheads, size 4) has stride 0"}},
      {&dense,
       [](P&, A& a) { a.x.data = static_cast<char*>(a.x.data) + 1; },
       {"x has data pointer 0x", "(bfloat16: 2 bytes)"}},
  });
}

TEST(SsdCheck, ChunkSize) {
  const SsdProblem dense(denseCase());
  expectRefused({
      {&dense,
       [](P&, A& a) { a.chunk_size = 32, a.block_state_tokens = 64; },
       {"chunk_size is 32, expected 64, 128 or 256"}},
      {&dense, [](P&, A& a) { a.chunk_size = 100; }, {"chunk_size is 100, expected 64, 128 or 256"}},
      {&dense, [](P&, A& a) { a.chunk_size = 512; }, {"chunk_size is 512"}},
  });
}

TEST(SsdCheck, Packing) {
  const SsdProblem dense(denseCase()), packed(packedCase());
  expectRefused({
      {&dense,
       [](P&, A& a) { a.cu_seqlens = a.initial_state_indices; },
       {"cu_seqlens is given and x has batch 2", "expected batch 1 (one packed row)"}},
      {&packed, [](P&, A& a) { a.cu_seqlens.ndim = 2; }, {"cu_seqlens has rank 2", "expected rank 1 (nseq + 1)"}},
      {&packed, [](P&, A& a) { a.cu_seqlens.shape[0] = 1; }, {"cu_seqlens has shape (1)", "at least 2 entries"}},
      {&packed,
       [](P&, A& a) { a.cu_seqlens.dtype = DType::F32; },
       {"cu_seqlens has dtype float32", "expected int32 or int64"}},
      {&packed,
       [](P&, A& a) { a.initial_state_indices.shape[0] = 2; },
       {"initial_state_indices has shape (2)", "dim 0 (nseq) is 2, expected 3"}},
      // Values, read by the reference before anything is written.
      {&packed, [](P& p, A&) { setEntry(p.cu, 0, 1); }, {"cu_seqlens[0] = 1, expected 0"}, Wrong::Values},
      {&packed,
       [](P& p, A&) { setEntry(p.cu, 2, 2); },
       {"cu_seqlens[2] = 2 after cu_seqlens[1] = 2", "strictly increasing"},
       Wrong::Values},
      {&packed,
       [](P& p, A&) { setEntry(p.cu, 3, 7); },
       {"cu_seqlens[3] = 7 (the last entry)", "expected T = 6 (x's seqlen)"},
       Wrong::Values},
  });
}

TEST(SsdCheck, StatesAndSlots) {
  const SsdProblem dense(denseCase()), packed(packedCase());
  SsdCase sep = packedCase();  // separate initial and final tensors
  sep.inPlace = false;
  const SsdProblem separate(sep);
  expectRefused({
      {&dense,
       [](P&, A& a) { a.initial_states = {}; },
       {"initial_state_indices is given (shape (2))", "initial_states is not given"}},
      {&dense, [](P&, A& a) { a.final_states = {}; }, {"final_state_indices is given", "final_states is not given"}},
      {&dense,
       [](P&, A& a) { a.initial_states.ndim = 3; },
       {"initial_states has rank 3", "expected rank 4 (slots, nheads, headdim, dstate)"}},
      {&dense,
       [](P&, A& a) { a.final_states.shape[3] = 4; },
       {"final_states has shape (4, 4, 3, 4)", "dim 3 (dstate) is 4, expected 5"}},
      {&dense,
       [](P&, A& a) { a.final_states.shape[2] = 2; },
       {"final_states has shape (4, 4, 2, 5)", "dim 2 (headdim) is 2, expected 3"}},
      {&dense,
       [](P&, A& a) { a.initial_state_indices.shape[0] = 3; },
       {"initial_state_indices has shape (3)", "expected (2) [nseq]"}},
      {&packed,
       [](P&, A& a) { a.initial_state_indices = {}, a.initial_states.shape[0] = 2; },
       {"initial_states has 2 slots", "expected at least nseq = 3", "sequence i uses slot i"}},
      // Slot values: in range, one writer per slot, no slot read by one sequence and written by another.
      {&packed,
       [](P& p, A&) { setEntry(p.initIdx, 2, 5); },
       {"initial_state_indices[2] = 5", "expected -1 or a slot in [0, 5)"},
       Wrong::Values},
      {&packed, [](P& p, A&) { setEntry(p.finIdx, 0, -2); }, {"final_state_indices[0] = -2", "[0, 5)"}, Wrong::Values},
      {&separate,
       [](P& p, A&) { setEntry(p.finIdx, 1, p.finalSlot[0]); },
       {"final_state_indices[1] = ", "the slot final_state_indices[0] writes too", "expected distinct slots"},
       Wrong::Values},
      {&packed,
       [](P& p, A&) { setEntry(p.initIdx, 0, p.finalSlot[1]); },
       {"initial_state_indices[0] = ", "the slot final_state_indices[1] writes", "a slot no other sequence writes"},
       Wrong::Values},
  });
  // Two sequences may read one slot when no sequence writes it.
  SsdProblem p = separate;
  setEntry(p.initIdx, 2, p.initSlot[0]);
  EXPECT_NO_THROW(reference::ssd(p.args()));
}

TEST(SsdCheck, BlockStates) {
  SsdCase c = denseCase();
  c.L = 130;  // two blocks of 64
  const SsdProblem dense(c);
  c.lens = {130, 64, 7};
  c.L = 0;
  const SsdProblem packed(c);
  expectRefused({
      {&dense, [](P&, A& a) { a.block_state_tokens = -64; }, {"block_state_tokens is -64, expected >= 0"}},
      {&dense,
       [](P&, A& a) { a.block_state_tokens = 96; },
       {"block_state_tokens is 96, expected a multiple of chunk_size = 64"}},
      {&dense,
       [](P&, A& a) { a.block_state_tokens = 0; },
       {"block_states is given", "expected none: block_state_tokens is 0"}},
      {&dense,
       [](P&, A& a) { a.block_state_tokens = 0, a.block_states = {}; },
       {"block_state_indices is given", "block_state_tokens is 0"}},
      {&dense, [](P&, A& a) { a.block_states = {}; }, {"block_states is not given", "block_state_tokens is 64"}},
      {&dense, [](P&, A& a) { a.block_state_indices = {}; }, {"block_state_indices is not given", "(nseq, kmax)"}},
      {&dense,
       [](P&, A& a) { a.block_states.shape[1] = 3; },
       {"block_states has shape", "dim 1 (nheads) is 3, expected 4"}},
      {&dense,
       [](P&, A& a) { a.block_state_indices.shape[0] = 3; },
       {"block_state_indices has shape (3, 2)", "dim 0 (nseq) is 3, expected 2"}},
      {&dense,
       [](P&, A& a) { a.block_state_indices.ndim = 1; },
       {"block_state_indices has rank 1", "expected rank 2 (nseq, kmax)"}},
      {&dense,
       [](P&, A& a) { a.block_state_indices.shape[1] = 1; },
       {"block_state_indices has kmax 1", "expected at least seqlen / block_state_tokens = 130 / 64 = 2"}},
      {&packed,
       [](P&, A& a) { a.block_state_indices.shape[1] = 1; },
       {"sequence 0 has 130 tokens, 2 blocks", "expected at most block_state_indices' kmax = 1"},
       Wrong::Values},
      {&packed,
       [](P& p, A&) { setEntry(p.blkIdx, 2, 7); },
       {"block_state_indices[1, 0] = 7", "expected -1 or a slot in [0, 7)"},
       Wrong::Values},
      {&packed,
       [](P& p, A&) { setEntry(p.blkIdx, 2, p.blockSlot[1]); },
       {"block_state_indices[1, 0] = ", "the slot block_state_indices[0, 1] writes too"},
       Wrong::Values},
      {&dense,
       [](P&, A& a) { a.sequence_decay.shape[1] = 2; },
       {"sequence_decay has shape (2, 2)", "dim 1 (nheads) is 2, expected 4"}},
      {&dense,
       [](P&, A& a) { a.sequence_decay.shape[0] = 3; },
       {"sequence_decay has shape (3, 4)", "dim 0 (nseq) is 3, expected 2"}},
  });
  // Block columns past a sequence's blocks are not read (they hold -7 here).
  SsdProblem p = packed;
  EXPECT_NO_THROW(reference::ssd(p.args()));
}

TEST(SsdCheck, OutputsAndAliasing) {
  const SsdProblem dense(denseCase());
  expectRefused({
      {&dense,
       [](P&, A& a) {
         a.out = {}, a.final_states = {}, a.final_state_indices = {}, a.block_state_tokens = 0, a.block_states = {},
         a.block_state_indices = {}, a.sequence_decay = {};
       },
       {"out is not given, expected out or at least one of final_states, block_states and sequence_decay"}},
      {&dense,
       [](P&, A& a) { a.out.data = a.x.data; },
       {"out has data pointer 0x", "the same as x's", "expected a separate tensor"}},
      {&dense, [](P&, A& a) { a.out.data = a.z.data, a.out.dtype = a.z.dtype; }, {"the same as z's"}},
  });
  SsdCase k = denseCase();
  k.keepY = true;
  const SsdProblem kept(k);
  expectRefused({
      {&kept, [](P&, A& a) { a.out = {}; }, {"y is given without out", "expected out with it"}},
      {&kept, [](P&, A& a) { a.y.dtype = DType::BF16; }, {"y has dtype bfloat16", "expected float32"}},
      {&kept, [](P&, A& a) { a.y.shape[2] = 3; }, {"y has shape (2, 6, 3, 3)", "dim 2 (nheads) is 3, expected 4"}},
      {&kept, [](P&, A& a) { a.y.strides[3] = 2; }, {"y has stride 2 along its last axis"}},
      {&kept, [](P&, A& a) { a.y.data = a.x.data; }, {"y has data pointer 0x", "the same as x's"}},
      {&kept, [](P&, A& a) { a.y.data = a.out.data; }, {"y has data pointer 0x", "the same as out's"}},
  });
}

// y, kept beside out, is the output before the gate: out = y silu(z), each rounded once.
TEST(SsdReference, KeptYIsTheOutputBeforeTheGate) {
  SsdCase c;
  c.lens = {70, 1, 9}, c.keepY = true, c.seed = 12;
  SsdProblem p(c);
  reference::ssd(p.args());
  const TensorView out = p.out.view(), y = p.y.view(), z = p.z.view();
  int64_t n = 0;
  forEachElement(y, [&](int64_t off, const std::vector<int64_t>&) {
    const double zv = loadElement(z, off), gated = loadElement(y, off) * zv / (1.0 + std::exp(-zv));
    EXPECT_NEAR(loadElement(out, off), gated, 1e-6 * (std::abs(gated) + 1e-3)) << "element " << off;
    ++n;
  });
  EXPECT_EQ(n, 80 * c.H * c.P);
  c.hasZ = false;
  SsdProblem q(c);
  reference::ssd(q.args());
  EXPECT_EQ(q.out.bytes, q.y.bytes);  // both fp32, no gate: the same value rounded once
}

// The GPU op's own host-side checks, which throw before anything is launched (so they run here
// on host memory labelled as device 0): the check the reference shares, then the workspace,
// named "workspace" with the size function, on x's device.
TEST(SsdOpCheck, SharedCheckThenWorkspace) {
  SsdProblem p(denseCase());
  auto onDevice = [](TensorView t) {
    if (t.defined()) t.device = DeviceKind::CUDA;
    return t;
  };
  SsdArgs a = p.args();
  for (TensorView* t :
       {&a.x, &a.dt, &a.A, &a.B, &a.C, &a.D, &a.z, &a.dt_bias, &a.out, &a.initial_states, &a.initial_state_indices,
        &a.final_states, &a.final_state_indices, &a.block_states, &a.block_state_indices, &a.sequence_decay})
    *t = onDevice(*t);
  const int64_t need = ssd_workspace_size(a);
  ASSERT_GT(need, 0);
  std::vector<float> ws(size_t(need + 16));
  auto withWorkspace = [&](int64_t n, DType t) {
    SsdArgs w = a;
    w.workspace = onDevice(TensorView::contiguous(ws.data(), t, {n}));
    return w;
  };
  std::string m = invalidArgMessage([&] { ssd(a); });
  EXPECT_EQ(m, "ssd: workspace is not given, expected a float32 buffer of at least " + std::to_string(need) +
                   " elements (ssd_workspace_size: per-chunk dt, cumsums, states and C.B)");
  m = invalidArgMessage([&] { ssd(withWorkspace(need - 1, DType::F32)); });
  EXPECT_EQ(m, "ssd: workspace has " + std::to_string(need - 1) + " elements (shape (" + std::to_string(need - 1) +
                   ")), expected at least " + std::to_string(need) + " (ssd_workspace_size)");
  m = invalidArgMessage([&] { ssd(withWorkspace(need, DType::BF16)); });
  EXPECT_NE(m.find("ssd: workspace has dtype bfloat16"), std::string::npos) << m;
  SsdArgs other = withWorkspace(need, DType::F32);
  other.workspace.deviceId = 1;
  m = invalidArgMessage([&] { ssd(other); });
  EXPECT_EQ(m, "ssd: workspace is on CUDA device 1, expected device 0 (where x is)");
  // The shared check runs first and says what the reference says.
  SsdArgs bad = withWorkspace(need, DType::F32);
  bad.B.shape[2] = 3;
  m = invalidArgMessage([&] { ssd(bad); });
  EXPECT_EQ(m.rfind("ssd: B has 3 groups (dim 2 of shape (2, 6, 3, 5))", 0), 0u) << m;
  bad = withWorkspace(need, DType::F32);
  bad.out = {}, bad.final_states = {}, bad.final_state_indices = {}, bad.sequence_decay = {};
  bad.block_state_tokens = 0, bad.block_states = {}, bad.block_state_indices = {};
  m = invalidArgMessage([&] { ssd(bad); });
  EXPECT_EQ(m.rfind("ssd: out is not given, expected out or at least one of", 0), 0u) << m;
}

// ---- the reference against the quadratic and chunked forms ------------------------------------

struct FormCase {
  const char* name;
  SsdCase c;
  int64_t Q;  // the chunked form's chunk size
};

std::vector<FormCase> formCases() {
  std::vector<FormCase> v;
  for (int64_t l : {1, 7, 64, 65, 130}) {
    SsdCase c;
    c.L = l, c.batch = 2, c.G = 2, c.seed = uint64_t(10 + l);
    c.initial = c.final = true, c.decay = true;
    v.push_back({"dense, G 2, D (H), z, softplus, bias", c, 16});
  }
  SsdCase c;
  c.L = 65, c.G = 1, c.dPerChannel = true, c.hasZ = false, c.bigDt = true, c.seed = 20;
  c.final = c.decay = true;
  v.push_back({"G 1, D (H, P), no z, dt > 20 through softplus", c, 64});
  c = SsdCase{};
  c.L = 64, c.G = c.H, c.softplus = false, c.hasD = false, c.dtMin = 0.05f, c.dtMax = 0.3f, c.seed = 21;
  c.initial = c.final = true;
  v.push_back({"G H, no D, no softplus, clamp", c, 7});
  c = SsdCase{};
  c.lens = {7, 1, 65, 64, 3}, c.G = 2, c.aLo = -16, c.aHi = -8, c.bigDt = true, c.dtMin = 0.01f, c.dtMax = 30.0f;
  c.initial = c.final = c.slotIndices = true, c.decay = true, c.seed = 22;
  v.push_back({"packed, strong decays, clamp, slots", c, 5});
  c = SsdCase{};
  c.L = 130, c.H = 2, c.P = 2, c.N = 3, c.G = 1, c.hasDtBias = false, c.seed = 23;
  c.xType = DType::F16, c.bcType = DType::BF16, c.dtType = DType::BF16, c.zType = DType::F16;
  c.outType = DType::BF16, c.stateType = DType::F16, c.initial = c.final = c.inPlace = true;
  v.push_back({"16-bit inputs and outputs, in place", c, 64});
  return v;
}

TEST(SsdReference, AgreesWithQuadraticAndChunkedForms) {
  for (const FormCase& fc : formCases()) {
    SCOPED_TRACE(std::string(fc.name) + ", L " + std::to_string(fc.c.L));
    SsdProblem p(fc.c);
    const SsdInputs in(p);  // read before the reference writes states in place
    const SsdResult q = quadraticForm(in), k = chunkedForm(in, fc.Q);
    // The two float64 forms agree with each other to double rounding.
    const double dy = relDiff(k.y, q.y), df = relDiff(k.final, q.final), dd = relDiff(k.decay, q.decay);
    EXPECT_LE(dy, 1e-12);
    EXPECT_LE(df, 1e-12);
    EXPECT_LE(dd, 1e-12);
    reference::ssd(p.args());
    // The reference's outputs are the exact values rounded once.
    const double wy = expectRoundedOnce(
        "out", p.out.view(), iota(p.c.batch),
        [&](const std::vector<int64_t>& i) { return q.y[in.xi(i[0], i[1], i[2], i[3])]; }, rms(q.y));
    double wf = 0;
    for (int64_t s = 0; s < p.nseq; ++s) {
      const int64_t slot = p.finalSlot[size_t(s)];
      if (slot < 0) continue;
      wf = std::max(wf, expectRoundedOnce(
                            "final_states", p.finalHolder().view(), {slot},
                            [&](const std::vector<int64_t>& i) {
                              return q.final[size_t(((s * p.c.H + i[1]) * p.c.P + i[2]) * p.c.N + i[3])];
                            },
                            rms(q.final)));
    }
    double wd = 0;
    if (p.c.decay)
      wd = expectRoundedOnce(
          "sequence_decay", p.decay.view(), iota(p.nseq),
          [&](const std::vector<int64_t>& i) { return q.decay[size_t(i[0] * p.c.H + i[1])]; }, 0.0);
    // Final slots no sequence writes are untouched (still poisoned).
    if (p.c.final && !p.c.inPlace)
      for (int64_t slot = 0; slot < p.S; ++slot) {
        if (std::find(p.finalSlot.begin(), p.finalSlot.end(), slot) != p.finalSlot.end()) continue;
        TensorView s = slice(p.fin.view(), 0, slot, 1);
        forEachElement(s,
                       [&](int64_t off, const std::vector<int64_t>&) { EXPECT_TRUE(std::isnan(loadElement(s, off))); });
      }
    std::printf(
        "  %s, L %lld: chunked vs quadratic y %.2g final %.2g decay %.2g; reference rounding (ulp/2) out %.3f final "
        "%.3f decay %.3f\n",
        fc.name, static_cast<long long>(p.c.L), dy, df, dd, wy, wf, wd);
  }
}

// Block states: the state after every K tokens of each sequence, against the quadratic form's
// state after that token; slot -1 and slots no block names stay poisoned.
TEST(SsdReference, BlockStatesAreTheStatesAfterEveryKTokens) {
  SsdCase c;
  c.lens = {130, 64, 7, 200}, c.blockTokens = 64, c.initial = c.final = c.slotIndices = true, c.seed = 30;
  SsdProblem p(c);
  const SsdInputs in(p);
  const SsdResult q = quadraticForm(in);
  reference::ssd(p.args());
  std::vector<char> written(size_t(p.blockSlots), 0);
  int blocks = 0;
  for (int64_t i = 0; i < p.nseq; ++i)
    for (int64_t k = 0; k < p.kmax; ++k) {
      const int64_t slot = p.blockSlot[size_t(i * p.kmax + k)];
      if (slot < 0) continue;
      written[size_t(slot)] = 1, ++blocks;
      const int64_t t = (k + 1) * c.blockTokens - 1;
      expectRoundedOnce(
          "block_states", p.blk.view(), {slot},
          [&](const std::vector<int64_t>& x) {
            return q.states[size_t(i)][size_t(((t * c.H + x[1]) * c.P + x[2]) * c.N + x[3])];
          },
          1.0);
    }
  EXPECT_EQ(blocks, 2 + 1 + 0 + 3 - 1);  // block (0, 0) is -1
  for (int64_t s = 0; s < p.blockSlots; ++s) {
    if (written[size_t(s)]) continue;
    TensorView v = slice(p.blk.view(), 0, s, 1);
    forEachElement(v, [&](int64_t off, const std::vector<int64_t>&) {
      EXPECT_TRUE(std::isnan(loadElement(v, off))) << "slot " << s;
    });
  }
}

// ---- packing, batching, states ----------------------------------------------------------------

// A packed row gives, bit for bit, what running each sequence alone gives (views of its tokens,
// its own slots): out, final states, block states and sequence_decay.
TEST(SsdReference, PackedSequenceEqualsItsOwnCall) {
  SsdCase c;
  c.lens = {7, 1, 130, 64, 3}, c.G = 2, c.dPerChannel = true, c.blockTokens = 64, c.decay = true;
  c.initial = c.final = c.inPlace = c.slotIndices = true, c.xType = DType::BF16, c.outType = DType::F16;
  c.seed = 40;
  SsdProblem packed(c), alone(c);
  reference::ssd(packed.args());
  const SsdArgs a = alone.args();
  for (int64_t i = 0; i < alone.nseq; ++i) {
    SsdArgs s = a;
    const int64_t t0 = alone.start[size_t(i)], T = alone.len[size_t(i)];
    for (TensorView* t : {&s.x, &s.dt, &s.B, &s.C, &s.z, &s.out}) *t = slice(*t, 1, t0, T);
    s.cu_seqlens = {};
    for (TensorView* t : {&s.initial_state_indices, &s.final_state_indices, &s.block_state_indices, &s.sequence_decay})
      *t = slice(*t, 0, i, 1);
    reference::ssd(s);
  }
  for (size_t k = 0; k < packed.all().size(); ++k)
    EXPECT_EQ(packed.all()[k]->bytes, alone.all()[k]->bytes) << "tensor " << k << " of SsdProblem::all()";
  EXPECT_NE(packed.out.bytes, SsdProblem(c).out.bytes) << "out was written";
}

// Context parallelism by state passing: a sequence cut in two, each part run from a zero start
// without out (final state and decay), the pairs combined, S_in = decay(1) h0 + S_final(1), and
// part two run again from S_in: its out and final state equal the unsplit run's (to the fp32
// rounding of the passed states); the combined final, decay(2) S_in + S_final(2), too.
TEST(SsdReference, ContextParallelStatePassingEqualsTheUnsplitRun) {
  SsdCase c;
  c.L = 130, c.G = 2, c.initial = c.final = true, c.seed = 50;
  c.aLo = -0.2, c.aHi = -0.02;  // weak decays: part one's state still matters at the end
  SsdProblem full(c);
  reference::ssd(full.args());
  const int64_t cut = 57, H = c.H, P = c.P, N = c.N;
  std::mt19937_64 rng(0);
  auto f32 = [&](std::vector<int64_t> shape) { return makeTensor(DType::F32, shape, Layout{}, rng); };
  auto partArgs = [&](int64_t t0, int64_t T) {
    SsdArgs a = full.args();
    for (TensorView* t : {&a.x, &a.dt, &a.B, &a.C, &a.z}) *t = slice(*t, 1, t0, T);
    a.out = {}, a.initial_states = {};
    return a;
  };
  // Phase 1: each part from a zero start, states only.
  HostTensor fin[2] = {f32({1, H, P, N}), f32({1, H, P, N})}, decay[2] = {f32({1, H}), f32({1, H})};
  for (int r = 0; r < 2; ++r) {
    SsdArgs a = partArgs(r ? cut : 0, r ? c.L - cut : cut);
    a.final_states = fin[r].view(), a.sequence_decay = decay[r].view();
    reference::ssd(a);
  }
  // The exclusive scan: part two's initial state from the true h0 and part one's pair.
  auto at4 = [&](int64_t h, int64_t p, int64_t n) { return std::vector<int64_t>{0, h, p, n}; };
  auto val = [](const HostTensor& t, const std::vector<int64_t>& i) {
    int64_t off = 0;
    for (size_t k = 0; k < i.size(); ++k) off += i[k] * t.meta.strides[k];
    return loadElement(t.view(), off);
  };
  HostTensor sIn = f32({1, H, P, N});
  std::vector<double> combined, unsplit;
  for (int64_t h = 0; h < H; ++h)
    for (int64_t p = 0; p < P; ++p)
      for (int64_t n = 0; n < N; ++n) {
        const double s = val(decay[0], {0, h}) * val(full.init, at4(h, p, n)) + val(fin[0], at4(h, p, n));
        storeElement(sIn.view(), ((h * P) + p) * N + n, s);
        combined.push_back(val(decay[1], {0, h}) * s + val(fin[1], at4(h, p, n)));
        unsplit.push_back(val(full.fin, at4(h, p, n)));
      }
  EXPECT_LE(relDiff(combined, unsplit), 1e-6) << "decay(2) S_in + S_final(2) vs the unsplit final state";
  // Phase 2: part two from S_in, with out.
  HostTensor out2 = f32({1, c.L - cut, H, P}), fin2 = f32({1, H, P, N});
  SsdArgs a = partArgs(cut, c.L - cut);
  a.initial_states = sIn.view(), a.out = out2.view(), a.final_states = fin2.view();
  reference::ssd(a);
  std::vector<double> got, want, gotFin;
  forEachElement(out2.view(), [&](int64_t off, const std::vector<int64_t>& i) {
    got.push_back(loadElement(out2.view(), off));
    want.push_back(val(full.out, {0, cut + i[1], i[2], i[3]}));
  });
  gotFin = valuesOf(fin2);
  const double dOut = relDiff(got, want), dFin = relDiff(gotFin, unsplit);
  EXPECT_LE(dOut, 1e-6);
  EXPECT_LE(dFin, 1e-6);
  EXPECT_GT(relDiff(valuesOf(fin[1]), unsplit), 1e-3) << "the zero-start part's state must differ";
  std::printf("  CP split at %lld of %lld: out %.2g, final %.2g, combined final %.2g (relative)\n",
              static_cast<long long>(cut), static_cast<long long>(c.L), dOut, dFin, relDiff(combined, unsplit));
}

// The same tensor as initial and final states: every initial state is read before any final
// state is written, so an in-place packed call equals one with separate tensors.
TEST(SsdReference, InPlaceStatesEqualSeparateOnes) {
  SsdCase c;
  c.lens = {5, 9, 2}, c.initial = c.final = c.slotIndices = true, c.seed = 60;
  c.inPlace = true;
  SsdProblem inPlace(c);
  c.inPlace = false;
  SsdProblem separate(c);
  reference::ssd(inPlace.args());
  reference::ssd(separate.args());
  EXPECT_EQ(inPlace.out.bytes, separate.out.bytes);
  for (int64_t i = 0; i < separate.nseq; ++i) {
    const int64_t s = separate.finalSlot[size_t(i)];
    if (s < 0) continue;
    const TensorView a = slice(inPlace.init.view(), 0, s, 1), b = slice(separate.fin.view(), 0, s, 1);
    forEachElement(
        a, [&](int64_t off, const std::vector<int64_t>&) { EXPECT_EQ(loadElement(a, off), loadElement(b, off)); });
  }
}

}  // namespace
