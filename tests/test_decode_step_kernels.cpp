// The Mamba-2 decode-step kernel on the CPU: every variant the op can build (the three parts,
// fp32 and 16-bit states and drafts, widths 2..8, optional bias/D/z/dt_bias, the dt clamp, slot
// indices, odd head dims and state sizes, several groups) goes through the whole pipeline and
// NVRTC for sm_90a (and a subset for sm_80) without spilling the state tile. Tensors are fake
// device addresses: only their alignment classes are read.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "GpuTest.h"  // SSMJIT_REQUIRE_NVRTC
#include "kernels_dsl/CompileKernel.h"
#include "kernels_dsl/decode/Mamba2DecodeStep.h"
#include "runtime/ops/Mamba2DecodeStepSpec.h"
#include "ssmjit/ops.h"
#include "tests/support/CompileEach.h"
#include "tests/support/FakeTensors.h"
#include "tests/support/GeneratedCuda.h"

using namespace ssmjit;
using ssmjit::testing::fakeView;
using ssmjit::testing::generatedCuda;

namespace {

struct Variant {
  int64_t H = 8, P = 64, N = 128, G = 1, W = 4, L = 8;
  DType state = DType::F32, x = DType::F32;
  DecodeStepParts parts = DecodeStepParts::ReplayAndVerify;
  bool extras = true;  // conv bias, D, z, dt_bias, slot indices
  bool clamp = false;
  int64_t B = 3;  // batch: B * H >= kDecodeLargeBatchHeads takes the large-batch tiles
  int64_t R = 0;  // ring depth: > 0 deferred commit
};

struct Call {
  Mamba2DecodeState s;
  Mamba2MixerWeights w;
  Mamba2DecodeStepArgs a;
};

Call make(const Variant& v) {
  const int64_t B = v.B, S = 5, Lc = 8, Dc = v.H * v.P + 2 * v.G * v.N;
  Call c;
  c.s.conv_state = fakeView(1, v.state, {S, Dc, v.W - 1});
  c.s.ssm_state = fakeView(2, v.state, {S, v.H, v.P, v.N});
  c.s.xbc_cache = fakeView(3, v.x, {S, Lc, Dc});
  c.s.dt_cache = fakeView(4, v.x, {S, Lc, v.H});
  c.s.cached_tokens = fakeView(5, DType::I32, {S});
  c.s.arrivals = fakeView(6, DType::I32, {S});
  c.w.conv_weight = fakeView(7, DType::F32, {Dc, v.W});
  c.w.A = fakeView(8, DType::F32, {v.H});
  if (v.extras) {
    c.w.conv_bias = fakeView(9, DType::F32, {Dc});
    c.w.D = fakeView(10, DType::F32, {v.H});
    c.w.dt_bias = fakeView(11, DType::F32, {v.H});
  }
  if (v.clamp) {
    c.w.dt_min = 0.001f;
    c.w.dt_max = 0.1f;
  }
  c.a.parts = v.parts;
  if (v.extras) c.a.state_indices = fakeView(12, DType::I32, {B});
  if (v.parts != DecodeStepParts::VerifyOnly) c.a.num_accepted = fakeView(13, DType::I32, {B});
  if (v.parts != DecodeStepParts::ReplayOnly) {
    c.a.xBC = fakeView(14, v.x, {B, v.L, Dc});
    c.a.dt = fakeView(15, v.x, {B, v.L, v.H});
    c.a.y = fakeView(16, v.x, {B, v.L, v.H, v.P});
    if (v.extras) c.a.z = fakeView(17, v.x, {B, v.L, v.H, v.P});
  }
  if (!v.extras)
    c.s.ssm_state = fakeView(2, v.state, {B, v.H, v.P, v.N}), c.s.conv_state = fakeView(1, v.state, {B, Dc, v.W - 1}),
    c.s.xbc_cache = fakeView(3, v.x, {B, Lc, Dc}), c.s.dt_cache = fakeView(4, v.x, {B, Lc, v.H}),
    c.s.cached_tokens = fakeView(5, DType::I32, {B}), c.s.arrivals = fakeView(6, DType::I32, {B});
  if (v.R > 0) {
    const int64_t slots = c.s.ssm_state.shape[0];
    c.s.xbc_ring = fakeView(18, v.x, {slots, v.R, Dc});
    c.s.dt_ring = fakeView(19, v.x, {slots, v.R, v.H});
    c.s.ring_tokens = fakeView(20, DType::I32, {slots});
  }
  return c;
}

// maxStore / maxLoad: spill bytes allowed.
void expectCompiles(const Variant& v, const char* arch, int64_t maxStore = 40, int64_t maxLoad = 48) {
  const Call c = make(v);
  ssmjit::testing::expectEachCompiles({detail::decodeStepSpecialization(c.s, c.w, c.a, arch)}, 1, [&](auto&, auto& k) {
    // The state tile and the conv windows live in registers across the tokens; ptxas puts a few
    // words of some variants on the stack (up to 36 bytes stored, the bf16 large-batch fused step,
    // 40 loaded), more means the tiles no longer fit.
    EXPECT_LE(k.resources.spillStoreBytes, maxStore) << k.compileLog;
    EXPECT_LE(k.resources.spillLoadBytes, maxLoad) << k.compileLog;
  });
}

}  // namespace

// The batch and the slot count are only bounds to the kernel: calls that differ in them (a serving
// batch changes every step) share one specialisation, so one compile.
TEST(DecodeStepKernels, BatchAndSlotCountDoNotSpecialise) {
  std::string key;
  for (int64_t B : {1, 3, 8, 12}) {  // every one below the large-batch tiles at H 8
    Variant v;
    v.B = B;
    v.extras = false;  // state slots = batch
    const Call c = make(v);
    const std::string k = detail::decodeStepSpecialization(c.s, c.w, c.a, "sm_90a").canonical();
    if (key.empty()) key = k;
    EXPECT_EQ(k, key) << "batch " << B;
  }
}

TEST(DecodeStepKernels, EveryPartAndDtypeCompiles) {
  SSMJIT_REQUIRE_NVRTC();
  for (DecodeStepParts parts :
       {DecodeStepParts::ReplayAndVerify, DecodeStepParts::ReplayOnly, DecodeStepParts::VerifyOnly})
    for (DType st : {DType::F32, DType::BF16})
      for (DType x : {DType::F32, DType::BF16, DType::F16})
        for (bool extras : {true, false}) {
          Variant v;
          v.parts = parts;
          v.state = st;
          v.x = x;
          v.extras = extras;
          expectCompiles(v, "sm_90a");
        }
}

// Large batches take half the rows a program at 5 programs an SM (96 registers; 4 with fp32 drafts).
TEST(DecodeStepKernels, LargeBatchTilesCompile) {
  SSMJIT_REQUIRE_NVRTC();
  for (DecodeStepParts parts :
       {DecodeStepParts::ReplayAndVerify, DecodeStepParts::ReplayOnly, DecodeStepParts::VerifyOnly})
    for (DType st : {DType::F32, DType::BF16})
      for (DType x : {DType::F32, DType::BF16}) {
        Variant v;
        v.parts = parts, v.state = st, v.x = x, v.B = 128;
        const Call c = make(v);
        const Specialization spec = detail::decodeStepSpecialization(c.s, c.w, c.a, "sm_90a");
        EXPECT_EQ(spec.get("meta:BLOCK_P"), 32);
        EXPECT_EQ(spec.get("meta:min_blocks"), x == DType::F32 ? 4 : 5);
        expectCompiles(v, "sm_90a");
      }
  Variant v;  // one sequence short of the bound: the small-batch tiles
  v.B = kernels::kDecodeLargeBatchHeads / v.H - 1;
  const Call c = make(v);
  EXPECT_EQ(detail::decodeStepSpecialization(c.s, c.w, c.a, "sm_90a").get("meta:BLOCK_P"), 64);
  Variant wide;  // a wide conv keeps its tiles at any batch, and the spec says so (the op reads it)
  wide.B = 128, wide.W = 8;
  const Call cw = make(wide);
  const Specialization sw = detail::decodeStepSpecialization(cw.s, cw.w, cw.a, "sm_90a");
  EXPECT_EQ(sw.get("meta:large_batch"), 0);
  EXPECT_EQ(sw.get("meta:min_blocks"), 3);
}

TEST(DecodeStepKernels, WidthsShapesAndClampCompile) {
  SSMJIT_REQUIRE_NVRTC();
  for (int W : {2, 3, 5, 8}) {
    Variant v;
    v.W = W;
    expectCompiles(v, "sm_90a");
  }
  for (auto [H, P, N, G] :
       {std::tuple<int, int, int, int>{6, 24, 20, 3}, {4, 7, 13, 2}, {2, 128, 256, 1}, {1, 1, 1, 1}}) {
    Variant v;
    v.H = H, v.P = P, v.N = N, v.G = G, v.L = 1, v.clamp = true;
    expectCompiles(v, "sm_90a");
  }
}

// Deferred commit: its own kernel, every part and dtype, both tile sizes, a wide conv and a ring
// deep enough that the tokens no longer fit one staged chunk.
TEST(DecodeStepKernels, DeferredCommitCompiles) {
  SSMJIT_REQUIRE_NVRTC();
  for (DecodeStepParts parts :
       {DecodeStepParts::ReplayAndVerify, DecodeStepParts::ReplayOnly, DecodeStepParts::VerifyOnly})
    for (DType st : {DType::F32, DType::BF16})
      for (DType x : {DType::F32, DType::BF16})
        for (int64_t B : {3, 128}) {
          Variant v;
          v.parts = parts, v.state = st, v.x = x, v.B = B, v.R = 4, v.L = 4;
          const Call c = make(v);
          const Specialization spec = detail::decodeStepSpecialization(c.s, c.w, c.a, "sm_90a");
          EXPECT_EQ(spec.kernel, kernels::kDecodeStepDeferred.kernel);
          EXPECT_EQ(spec.get("R"), 4);
          expectCompiles(v, "sm_90a");
        }
  Variant wide;  // R + Lc + L = 24 tokens: one staged chunk past 48 KiB (dynamic shared memory),
  wide.R = 8;    // 36 bytes spilled on sm_90a
  const Call cw = make(wide);
  const Specialization ws = detail::decodeStepSpecialization(cw.s, cw.w, cw.a, "sm_90a");
  EXPECT_EQ(ws.get("meta:BLOCK_T"), 32);
  EXPECT_NE(generatedCuda(ws).find("extern __shared__"), std::string::npos) << "not in dynamic shared memory";
  expectCompiles(wide, "sm_90a", 64, 96);
  Variant chunked;  // R + Lc + L = 48 tokens: staged in chunks, the state carried across them
  chunked.R = 32;
  const Call cc = make(chunked);
  EXPECT_LT(detail::decodeStepSpecialization(cc.s, cc.w, cc.a, "sm_90a").get("meta:BLOCK_T"), 48);
  expectCompiles(chunked, "sm_90a", 64, 96);
  Variant odd;  // odd sizes, no extras, a wide conv
  odd.H = 6, odd.P = 24, odd.N = 20, odd.G = 3, odd.W = 8, odd.L = 3, odd.R = 5, odd.extras = false;
  expectCompiles(odd, "sm_90a");
  Variant sm80;
  sm80.R = 4, sm80.L = 4, sm80.state = sm80.x = DType::BF16;
  expectCompiles(sm80, "sm_80");
}

// One staged chunk takes the rows its tokens can fill, not its tiles' power of two: at R 8, L 8,
// Lc 8 (24 tokens in tiles of 32) a block takes less shared memory than at R 16 (32 tokens), which
// lets more programs share an SM.
TEST(DecodeStepKernels, DeferredStagesOnlyTheRowsItsTokensFill) {
  SSMJIT_REQUIRE_NVRTC();
  auto sharedBytes = [](int64_t R) {
    Variant v;
    v.R = R;
    const Call c = make(v);
    const Specialization spec = detail::decodeStepSpecialization(c.s, c.w, c.a, "sm_90a");
    EXPECT_EQ(spec.get("meta:BLOCK_T"), 32) << "R " << R;
    const CompiledKernel k = compileKernel(spec);
    return k.resources.sharedBytes + k.dynamicSharedBytes;
  };
  EXPECT_LT(sharedBytes(8), sharedBytes(16));
}

TEST(DecodeStepKernels, CompilesForSm80) {
  SSMJIT_REQUIRE_NVRTC();
  Variant v;
  v.state = DType::BF16;
  v.x = DType::BF16;
  expectCompiles(v, "sm_80");
}

// No program of a row waits for another: each stages the B/C conv it needs itself. What the
// row's programs share (the B/C conv state columns, the cached B/C and dt drafts, the count) is
// written only by the last of them to arrive, so in the generated code every read of the dt
// cache and the count comes before ssm_arrive_last and every write after it. A reordering would
// be a race that the GPU tests may not catch.
TEST(DecodeStepKernels, GeneratedCodeWritesSharedDataAfterTheLastArrival) {
  const Call c = make(Variant{});
  const std::string cuda = generatedCuda(detail::decodeStepSpecialization(c.s, c.w, c.a, "sm_90a"));
  const size_t arrive = cuda.find("ssm_arrive_last(");
  ASSERT_NE(arrive, std::string::npos) << cuda;
  for (const char* read : {", p_dt_cache + ", "ssm_load(p_cached + "}) {
    ASSERT_NE(cuda.find(read), std::string::npos) << read;
    EXPECT_LT(cuda.rfind(read), arrive) << read;
  }
  for (const char* write : {"(p_dt_cache + ", "ssm_store(p_cached + "}) {
    ASSERT_NE(cuda.find(write), std::string::npos) << write;
    EXPECT_GT(cuda.find(write), arrive) << write;
  }
}

// The conv weights and biases (B's, C's and a head's x) are staged into shared memory with their
// raw rows, before the barrier that the convs wait at, so their loads overlap the rows' loads:
// one load site each, whatever the width, and each followed by a barrier before any conv reads it.
TEST(DecodeStepKernels, ConvWeightsAreStagedWithTheRawRows) {
  for (int64_t width : {2, 4}) {
    Variant v;
    v.W = width;
    const Call c = make(v);
    const std::string cuda = generatedCuda(detail::decodeStepSpecialization(c.s, c.w, c.a, "sm_90a"));
    std::vector<size_t> sites;
    for (size_t at = cuda.find("p_conv_w + "); at != std::string::npos; at = cuda.find("p_conv_w + ", at + 1))
      sites.push_back(at);
    ASSERT_EQ(sites.size(), 3u) << "W " << width << "\n" << cuda;
    // B's and C's before the first barrier, x's in the head's staging.
    EXPECT_LT(sites[1], cuda.find("__syncthreads();")) << "W " << width;
  }
}

// Deferred commit: every program reads the ring's count before the row's last program writes it
// (after ssm_arrive_last), as with the cache's count; the ring's rows are appended by the program
// that owns their channels (x) or by the last one (B/C and dt, read from the dt cache before the
// cache is refilled).
TEST(DecodeStepKernels, DeferredWritesTheRingCountAfterTheLastArrival) {
  for (int64_t R : {4, 32}) {  // one staged chunk, then chunks
    Variant v;
    v.R = R;
    const Call c = make(v);
    const std::string cuda = generatedCuda(detail::decodeStepSpecialization(c.s, c.w, c.a, "sm_90a"));
    const size_t arrive = cuda.find("ssm_arrive_last(");
    ASSERT_NE(arrive, std::string::npos) << cuda;
    ASSERT_NE(cuda.find("ssm_load(p_ring + "), std::string::npos) << cuda;
    EXPECT_LT(cuda.rfind("ssm_load(p_ring + "), arrive) << "R " << R;
    ASSERT_NE(cuda.find("ssm_store(p_ring + "), std::string::npos) << cuda;
    EXPECT_GT(cuda.find("ssm_store(p_ring + "), arrive) << "R " << R;
    ASSERT_NE(cuda.find("(p_dt_ring + "), std::string::npos) << cuda;
    EXPECT_NE(cuda.find("p_xbc_ring + "), std::string::npos) << cuda;
  }
}
