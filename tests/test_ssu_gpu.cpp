// Selective state update on the GPU, against the float64 CPU reference: fresh random inputs
// (seeded per case; SSMJIT_TEST_SEED changes the base), outputs and layout gaps poisoned with NaN
// bytes before each run, a shape matrix over both model forms, every state and input dtype, the
// optional inputs, pad slots, L = 1..32 and the three write modes; then L-token call == L one-token
// calls, a bad slot reported by checkDeviceErrors() with nothing written for it, and CUDA graph
// capture and replay. Skips (with the reason) where there is no GPU.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "GpuTest.h"
#include "SsuTestUtil.h"
#include "runtime/CudaGraph.h"
#include "runtime/Driver.h"
#include "ssmjit/error.h"
#include "ssmjit/ops.h"
#include "ssmjit/reference.h"

using ssmjit::DType;
using ssmjit::SelectiveStateUpdateArgs;
using ssmjit::StateWrite;
using ssmjit::TensorView;
using namespace ssutest;

namespace {

uint64_t baseSeed() {
  static const uint64_t s = [] {
    const char* v = std::getenv("SSMJIT_TEST_SEED");
    return v ? std::strtoull(v, nullptr, 10) : uint64_t{20250101};
  }();
  return s;
}

// ----------------------------------------------------------------------------------------------
// The shape matrix

std::vector<SsuCase> matrixCases() {
  std::vector<SsuCase> v;
  auto add = [&](SsuCase c) {
    c.seed = baseSeed() + 7919 * (v.size() + 1);  // distinct inputs per case
    v.push_back(c);
  };
  const DType fp[] = {DType::F32, DType::BF16, DType::F16};

  const SsuCase big = mamba2_2p7bHeads();
  {
    SsuCase c = big;  // one token, fp32 everything, D, z, dt_bias, softplus
    c.tokens = false;
    c.batch = 3;
    add(c);
  }
  {
    SsuCase c = big;  // the verify shape: bf16 everywhere, 16 tokens, pads
    c.batch = 16;
    c.L = 16;
    c.stateT = c.inT = c.outT = DType::BF16;
    c.pads = 2;
    add(c);
  }
  {
    SsuCase c = big;  // batch 64, fp16, clamp, pads, int64 indices (batch 257: smaller heads below)
    c.tokens = false;
    c.batch = 64;
    c.stateT = c.inT = c.outT = DType::F16;
    c.clamp = true;
    c.pads = 3;
    c.idxT = DType::I64;
    add(c);
  }
  {
    SsuCase c = big;  // per-token snapshots
    c.batch = 3;
    c.L = 5;
    c.write = StateWrite::PerToken;
    c.inT = DType::BF16;
    add(c);
  }
  {
    SsuCase c = big;  // one-token op with a destination slot per row
    c.tokens = false;
    c.batch = 4;
    c.write = StateWrite::PerToken;
    c.stateT = DType::BF16;
    add(c);
  }

  // Odd sizes (head dim and state size not powers of two, 3 groups): every state dtype x write
  // mode, with L, batch, input/output dtypes, optional inputs and layouts varied across them.
  const int64_t Ls[] = {1, 2, 5, 16, 32};
  const int64_t batches[] = {1, 3, 257};
  int k = 0;
  for (DType st : fp) {
    for (StateWrite w : {StateWrite::Final, StateWrite::None, StateWrite::PerToken}) {
      SsuCase c = oddSizes();
      c.stateT = st;
      c.write = w;
      c.L = Ls[k % 5];
      c.batch = batches[k % 3];
      if (w == StateWrite::PerToken && c.batch * c.L > 2048) c.batch = 3;  // slots: batch * L
      c.inT = fp[(k + 1) % 3];
      c.outT = fp[(k / 3 + 2) % 3];
      c.hasD = k % 2 == 0;
      c.hasZ = k % 3 != 1;
      c.hasDtBias = k % 4 != 3;
      c.softplus = k % 2 == 1;
      c.clamp = k % 3 == 2;
      c.stateIdx = k % 2 == 0;
      c.pads = (c.stateIdx && c.batch > 1) ? 1 + k % 2 : 0;
      c.idxT = k % 4 < 2 ? DType::I32 : DType::I64;
      c.strided = k % 3 == 0;
      add(c);
      ++k;
    }
  }
  {
    SsuCase c = oddSizes();  // the one-token op on odd sizes, strided
    c.tokens = false;
    c.batch = 3;
    c.strided = true;
    c.stateIdx = true;
    c.pads = 1;
    add(c);
  }
  // Heads wider than a program's rows (P > BLOCK_P) with staged tokens: every program of a head
  // stages its own rows.
  {
    SsuCase c = mamba2Heads(/*H=*/4, /*P=*/96, /*N=*/128, /*G=*/2);  // BLOCK_P 64: a full and a part
    c.L = 8;
    c.batch = 3;
    c.inT = DType::BF16;
    add(c);
  }
  {
    SsuCase c = mamba2Heads(/*H=*/2, /*P=*/128, /*N=*/256, /*G=*/1);  // BLOCK_P 16: eight a head
    c.L = 4;
    c.batch = 2;
    c.write = StateWrite::PerToken;
    add(c);
  }
  // The chunked form (Mamba-2, L >= 8 with 16-bit state, >= 13 with fp32; SsuChunkedTokens):
  // rows and columns masked with one row a thread, f32 inputs (three-term operands), fp16 (two),
  // no state write, P wider than a program's 64 rows, N at the mma's 16, pads and strides.
  {
    SsuCase c = oddSizes();  // all fp32, L 13
    c.L = 13;
    c.batch = 3;
    c.stateIdx = true;
    c.pads = 1;
    c.strided = true;
    add(c);
  }
  {
    SsuCase c = oddSizes();  // fp16 state and inputs, verify only, batch 257
    c.L = 8;
    c.batch = 257;
    c.stateT = c.inT = c.outT = DType::F16;
    c.write = StateWrite::None;
    c.clamp = true;
    add(c);
  }
  {
    SsuCase c = mamba2Heads(/*H=*/4, /*P=*/96, /*N=*/128, /*G=*/2);  // a full and a part program
    c.L = 12;
    c.batch = 3;
    c.stateT = c.inT = DType::BF16;
    c.hasZ = false;
    add(c);
  }
  {
    SsuCase c = mamba2Heads(/*H=*/2, /*P=*/64, /*N=*/256, /*G=*/1);  // N 256: 32 rows a program
    c.L = 12;
    c.batch = 2;
    c.inT = DType::BF16;
    add(c);
  }
  {
    SsuCase c = mamba2Heads(/*H=*/2, /*P=*/8, /*N=*/16, /*G=*/1);  // 16 rows a program: replicated
    c.L = 16;
    c.batch = 1;
    c.inT = DType::BF16;
    c.softplus = false;
    add(c);
  }
  {
    SsuCase c;  // no optional input at all
    c.L = 2;
    c.batch = 3;
    c.hasD = c.hasZ = c.hasDtBias = c.softplus = false;
    add(c);
  }

  // Mamba-1 (state (slots, dim, dstate), A per element).
  SsuCase m1;
  m1.mamba2 = false;
  m1.N = 16;
  {
    SsuCase c = m1;  // D 5, one token, fp32
    c.P = 5;
    c.tokens = false;
    c.batch = 3;
    add(c);
  }
  {
    SsuCase c = m1;  // D 5, two tokens, bf16 inputs, strided
    c.P = 5;
    c.L = 2;
    c.batch = 1;
    c.inT = DType::BF16;
    c.strided = true;
    add(c);
  }
  {
    SsuCase c = m1;  // D 1536, one token, fp16 state
    c.P = 1536;
    c.tokens = false;
    c.batch = 3;
    c.stateT = DType::F16;
    c.outT = DType::F16;
    add(c);
  }
  {
    SsuCase c = m1;  // D 1536, batch 257, 5 tokens, pads, clamp
    c.P = 1536;
    c.batch = 257;
    c.L = 5;
    c.inT = DType::BF16;
    c.pads = 3;
    c.clamp = true;
    add(c);
  }
  {
    SsuCase c = m1;  // D 1536, per-token snapshots, bf16 state
    c.P = 1536;
    c.batch = 2;
    c.L = 16;
    c.stateT = DType::BF16;
    c.write = StateWrite::PerToken;
    add(c);
  }
  // Mamba-2 heads whose decays underflow within a few tokens (staged tokens and tokens from memory;
  // fp32 and bf16 state; final and no write).
  {
    SsuCase c = mamba2Heads(/*H=*/4, /*P=*/16, /*N=*/64, /*G=*/2);
    c.L = 16;
    c.batch = 3;
    c.decayScale = 10;
    c.stateIdx = true;
    c.pads = 1;
    add(c);
  }
  {
    SsuCase c = mamba2Heads(/*H=*/2, /*P=*/64, /*N=*/128, /*G=*/1);  // L 32 does not fit: from memory
    c.L = 32;
    c.batch = 2;
    c.decayScale = 10;
    c.stateT = DType::BF16;
    c.inT = DType::BF16;
    add(c);
  }
  {
    SsuCase c = mamba2Heads(/*H=*/4, /*P=*/24, /*N=*/96, /*G=*/1);
    c.L = 8;
    c.batch = 2;
    c.decayScale = 10;
    c.write = StateWrite::None;
    add(c);
  }
  return v;
}

class SsuGpuMatrix : public ::testing::TestWithParam<SsuCase> {
 protected:
  void SetUp() override { SSMJIT_REQUIRE_GPU(); }
};

TEST_P(SsuGpuMatrix, MatchesFloat64Reference) {
  const SsuCase& c = GetParam();
  SCOPED_TRACE("seed " + std::to_string(c.seed) + " (SSMJIT_TEST_SEED=" + std::to_string(baseSeed()) + ")");
  const SsuProblem p = makeProblem(c);
  SsuProblem ref = p;
  runReference(ref);

  DeviceProblem dp(p);
  ssmjit::checkDeviceErrors();  // nothing stale from earlier tests
  runOp(c.tokens, dp.args);
  ASSERT_NO_THROW(ssmjit::checkDeviceErrors());  // synchronises; no bad slot here
  expectMatches(p, ref, dp.download(kOut), dp.download(kState), rowsWritten(p), p.slotMayBeWritten);
  // Inputs are read only.
  const auto host = p.all();
  for (size_t k = 1; k < host.size(); ++k) {
    if (host[k]->defined && k != static_cast<size_t>(kOut)) {
      EXPECT_EQ(dp.download(k), host[k]->bytes) << "input #" << k << " was written";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, SsuGpuMatrix, ::testing::ValuesIn(matrixCases()),
                         [](const ::testing::TestParamInfo<SsuCase>& info) {
                           return "c" + std::to_string(info.index) + "_" + info.param.name();
                         });

// ----------------------------------------------------------------------------------------------
// One L-token call == L one-token calls

// Runs the one-token op once per token on `dp`, each on token t's slice of the inputs and out.
void runAsOneTokenCalls(const SsuCase& c, const DeviceProblem& dp) {
  for (int64_t t = 0; t < c.L; ++t) ssmjit::selective_state_update(oneTokenArgs(dp.args, t));
}

TEST(SsuGpu, TokensCallEqualsOneTokenCalls) {
  SSMJIT_REQUIRE_GPU();
  // fp32 state: the one-token calls store and reload the state in fp32 between tokens, which is
  // exact, so only instruction-level differences remain (kFp32Reordered). bf16 state: the
  // one-token calls round the state to bf16 after every token, the fused call once at the end
  // (chainedStateRounding over L tokens). Mamba-2 also with decays that underflow within a few tokens.
  // L 8 and 16: Mamba-2 runs the token loop and the chunked form (fp32 state from L 13, bf16
  // from 8), whose products are exact and whose sums only differ in order.
  int n = 0;
  for (auto [m2, decayScale] : {std::pair{true, 1.0}, std::pair{true, 10.0}, std::pair{false, 1.0}}) {
    for (DType st : {DType::F32, DType::BF16}) {
      for (int64_t L : {8, 16}) {
        SsuCase c;
        c.mamba2 = m2;
        c.decayScale = decayScale;
        c.H = 8;
        c.G = 2;
        c.P = m2 ? 16 : 40;
        c.N = m2 ? 64 : 32;  // Mamba-2 N 64: the tokens staged through shared memory
        c.batch = 5;
        c.L = L;
        c.stateT = st;
        c.inT = DType::BF16;
        c.clamp = true;
        c.stateIdx = true;
        c.pads = 1;
        c.seed = baseSeed() + 101 + n++;
        SCOPED_TRACE(c.name());
        const SsuProblem p = makeProblem(c);
        DeviceProblem fused(p), chain(p);
        runOp(true, fused.args);
        runAsOneTokenCalls(c, chain);
        ssmjit::checkDeviceErrors();
        // The one-token results are the reference here; the fused ones are compared to them.
        SsuProblem oneTok = p;
        oneTok.out.bytes = chain.download(kOut);
        oneTok.state.bytes = chain.download(kState);
        expectMatches(p, oneTok, fused.download(kOut), fused.download(kState), rowsWritten(p), p.slotMayBeWritten,
                      st == DType::F32 ? kFp32Reordered : chainedStateRounding(st, L));
      }
    }
  }
}

// ----------------------------------------------------------------------------------------------
// Repeat calls: a call that differs from a recent one in its data pointers only reuses that
// call's checked arguments (the hot path); anything else about it must still be seen.

TEST(SsuGpu, RepeatCallsOnOtherBuffersUseTheirOwnBuffers) {
  SSMJIT_REQUIRE_GPU();
  SsuCase c = mamba2Heads(8, 64, 128, 2);
  c.tokens = false;
  c.batch = 3;
  c.stateIdx = true;
  c.pads = 1;
  // Three problems of one shape on their own buffers, in turn, then the first's shape with z and
  // the clamp changed: each call's outputs and state are its own problem's.
  auto run = [&](SsuCase k) {
    SCOPED_TRACE(k.name() + " seed " + std::to_string(k.seed));
    const SsuProblem p = makeProblem(k);
    SsuProblem ref = p;
    runReference(ref);
    DeviceProblem dp(p);
    runOp(k.tokens, dp.args);
    ASSERT_NO_THROW(ssmjit::checkDeviceErrors());
    expectMatches(p, ref, dp.download(kOut), dp.download(kState), rowsWritten(p), p.slotMayBeWritten);
  };
  for (int i = 0; i < 3; ++i) {
    c.seed = baseSeed() + 401 + i;
    run(c);
  }
  SsuCase noZ = c;
  noZ.hasZ = false;
  run(noZ);
  SsuCase clamped = c;
  clamped.clamp = true;
  run(clamped);

  // A misaligned pointer after equal calls: the full check names it, and nothing runs.
  const SsuProblem p = makeProblem(c);
  DeviceProblem dp(p);
  runOp(false, dp.args);
  ssmjit::checkDeviceErrors();
  SelectiveStateUpdateArgs bad = dp.args;
  bad.x.data = static_cast<char*>(bad.x.data) + 2;
  const auto stateBefore = dp.download(kState);
  try {
    ssmjit::selective_state_update(bad);
    ADD_FAILURE() << "a misaligned x was accepted";
  } catch (const ssmjit::Error& e) {
    EXPECT_EQ(e.kind(), ssmjit::Error::Kind::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("x has data pointer"), std::string::npos) << e.what();
  }
  ssmjit::checkDeviceErrors();
  EXPECT_EQ(dp.download(kState), stateBefore) << "the rejected call wrote the state";
}

// ----------------------------------------------------------------------------------------------
// Slots out of range: reported, and nothing written for them

SsuCase badSlotCase(StateWrite w, uint64_t seed) {
  SsuCase c = oddSizes();
  c.batch = 6;
  c.L = 4;
  c.stateIdx = true;
  c.pads = 1;
  c.write = w;
  c.seed = seed;
  return c;
}

// Both ops: the multi-token op (L = 4) and the one-token op.
TEST(SsuGpu, BadStateSlotIsReportedAndItsRowSkipped) {
  SSMJIT_REQUIRE_GPU();
  for (const bool tokens : {true, false})
    for (int64_t bad : {int64_t{1000}, int64_t{-3}}) {
      SsuCase c = badSlotCase(StateWrite::Final, baseSeed() + 201 + (bad < 0) + (tokens ? 0 : 2));
      c.tokens = tokens;
      c.L = tokens ? c.L : 1;
      SCOPED_TRACE(c.name() + " slot " + std::to_string(bad));
      SsuProblem p = makeProblem(c);
      const int64_t row = 2;  // not a pad (pads are rows 0 and batch - 1)
      ASSERT_GE(p.readSlot[row], 0);
      // Expected: the reference with that row as a pad; its original slot is not written.
      SsuProblem expected = p;
      storeElement(expected.idx.view(), row * expected.idx.meta.strides[0], -1);
      runReference(expected);
      std::vector<char> rows = rowsWritten(p), slots = p.slotMayBeWritten;
      rows[row] = 0;
      slots[p.readSlot[row]] = 0;

      storeElement(p.idx.view(), row * p.idx.meta.strides[0], double(bad));
      DeviceProblem dp(p);
      if (const auto e = reportedDeviceError(dp, "the bad slot", tokens)) {
        const std::string m = e->what();
        EXPECT_EQ(e->kind(), ssmjit::Error::Kind::InvalidArgument) << m;
        const std::string want = "state_batch_indices[" + std::to_string(row) + "] = " + std::to_string(bad);
        EXPECT_NE(m.find(want), std::string::npos) << "missing \"" << want << "\" in: " << m;
        EXPECT_NE(m.find(std::to_string(p.S)), std::string::npos) << "the bound in: " << m;
      }
      EXPECT_NO_THROW(ssmjit::checkDeviceErrors()) << "the record is reset after a report";
      expectMatches(p, expected, dp.download(kOut), dp.download(kState), rows, slots);
    }
}

TEST(SsuGpu, BadDestinationSlotIsReportedAndItsWriteSkipped) {
  SSMJIT_REQUIRE_GPU();
  SsuCase c = badSlotCase(StateWrite::PerToken, baseSeed() + 211);
  SsuProblem p = makeProblem(c);
  const int64_t row = 3, tok = 2;
  ASSERT_GE(p.readSlot[row], 0);
  const TensorView dv = p.dst.view();
  const int64_t off = row * dv.strides[0] + tok * dv.strides[1];
  const int64_t oldSlot = int64_t(loadElement(dv, off));
  SsuProblem expected = p;
  storeElement(expected.dst.view(), off, -1);
  runReference(expected);
  std::vector<char> slots = p.slotMayBeWritten;
  if (oldSlot >= 0) slots[oldSlot] = 0;

  storeElement(dv, off, double(p.S + 5));
  DeviceProblem dp(p);
  if (const auto e = reportedDeviceError(dp, "the bad destination slot")) {
    const std::string m = e->what();
    EXPECT_NE(m.find("dst_state_indices[" + std::to_string(row)), std::string::npos) << m;
    EXPECT_NE(m.find(std::to_string(p.S + 5)), std::string::npos) << m;
  }
  // out is complete (only the one snapshot was skipped).
  expectMatches(p, expected, dp.download(kOut), dp.download(kState), rowsWritten(p), slots);
}

// ----------------------------------------------------------------------------------------------
// CUDA graphs

TEST(SsuGpu, GraphCaptureAndReplayMatchDirectLaunch) {
  SSMJIT_REQUIRE_GPU();
  SsuCase c = mamba2_2p7bHeads();
  c.batch = 4;
  c.L = 4;
  c.stateT = DType::BF16;
  c.inT = DType::BF16;
  c.stateIdx = true;
  c.pads = 1;
  c.seed = baseSeed() + 301;
  const SsuProblem p = makeProblem(c);
  DeviceProblem dp(p);
  ssmjit::OwnedStream stream;

  // Direct launch (this also compiles and loads the kernel: not allowed inside a capture).
  runOp(true, dp.args, stream);
  stream.synchronize();
  const auto directOut = dp.download(kOut);
  const auto directState = dp.download(kState);

  dp.upload(p);
  ssmjit::CudaGraph g = ssmjit::CudaGraph::capture(
      stream, [&](CUstream s) { runOp(true, dp.args, s); }, CU_STREAM_CAPTURE_MODE_GLOBAL);
  ASSERT_TRUE(g.valid());
  stream.synchronize();
  EXPECT_EQ(dp.download(kOut), p.out.bytes) << "capturing must not run the op";
  g.launch(stream);
  stream.synchronize();
  EXPECT_EQ(dp.download(kOut), directOut) << "replay == direct launch, bit for bit";
  EXPECT_EQ(dp.download(kState), directState);

  // A replay reads whatever the buffers hold now: new inputs give the new reference result.
  SsuProblem q = p;
  std::mt19937_64 rng(c.seed + 1);
  fillUniform(q.x, rng, -1, 1);
  fillUniform(q.B, rng, -1, 1);
  dp.upload(q);
  g.launch(stream);
  stream.synchronize();
  ssmjit::checkDeviceErrors(stream);
  SsuProblem ref = q;
  runReference(ref);
  expectMatches(q, ref, dp.download(kOut), dp.download(kState), rowsWritten(q), q.slotMayBeWritten);
}

}  // namespace
