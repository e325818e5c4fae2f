// The selective-scan kernel on the CPU: every variant the op can build (dense and packed rows,
// constant and time-varying B/C with groups, fp32 and 16-bit tensors, optional D/z/delta_bias,
// states with slot indices, the states pass of long sequences, N from 1 to 32)
// goes through the whole pipeline and NVRTC for sm_90a (a subset for sm_80) without spilling the
// states. Tensors are fake device addresses: only their alignment classes are read. Also pins
// the DSL scan's generated code: register chains within a thread, lane shuffles across.
#include <gtest/gtest.h>

#include <cstdint>
#include <regex>
#include <string>
#include <tuple>

#include "GpuTest.h"  // SSMJIT_REQUIRE_NVRTC
#include "kernels_dsl/CompileKernel.h"
#include "kernels_dsl/Registry.h"
#include "kernels_dsl/scan/ScanCheckpointFold.h"
#include "kernels_dsl/scan/ScanSequences.h"
#include "kernels_dsl/scan/SelectiveScanBackward.h"
#include "runtime/ops/Gradients.h"
#include "runtime/ops/SelectiveScanSpec.h"
#include "ssmjit/ops.h"
#include "tests/support/CompileEach.h"
#include "tests/support/ExpectError.h"
#include "tests/support/GeneratedCuda.h"
#include "tests/support/Occurrences.h"

using namespace ssmjit;
using ssmjit::testing::generatedCuda;
using ssmjit::testing::occurrences;

namespace {

void* fake(int k) { return reinterpret_cast<void*>(uintptr_t{0x10000} + uintptr_t(k) * 0x10000000); }
TensorView view(int k, DType t, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(fake(k), t, shape);
}

struct Variant {
  int64_t batch = 2, D = 256, N = 16, L = 4096, G = 1;
  DType x = DType::BF16, bc = DType::BF16, state = DType::F32;
  bool bVarying = true, cVarying = true, extras = true, packed = false, states = false;
  int64_t serial = 0;  // serial_seqlen
};

SelectiveScanArgs make(const Variant& v) {
  SelectiveScanArgs a;
  a.serial_seqlen = v.serial;
  const int64_t Bt = v.packed ? 1 : v.batch;
  a.u = view(1, v.x, {Bt, v.D, v.L});
  a.delta = view(2, v.x, {Bt, v.D, v.L});
  a.out = view(3, v.x, {Bt, v.D, v.L});
  a.A = view(4, DType::F32, {v.D, v.N});
  a.B = v.bVarying ? view(5, v.bc, {Bt, v.G, v.N, v.L}) : view(5, DType::F32, {v.D, v.N});
  a.C = v.cVarying ? view(6, v.bc, {Bt, v.G, v.N, v.L}) : view(6, DType::F32, {v.D, v.N});
  if (v.extras) {
    a.D = view(7, DType::F32, {v.D});
    a.z = view(8, v.x, {Bt, v.D, v.L});
    a.delta_bias = view(9, DType::F32, {v.D});
    a.delta_softplus = true;
  }
  if (v.packed) a.cu_seqlens = view(10, DType::I32, {v.batch + 1});
  if (v.states) {
    a.initial_states = view(11, v.state, {5, v.D, v.N});
    a.final_states = a.initial_states;
    a.initial_state_indices = view(12, DType::I32, {v.batch});
    a.final_state_indices = view(13, DType::I64, {v.batch});
  }
  return a;
}

// The N states stay in registers: at most two words spilled up to N = 16 (Mamba-1's; 8 bytes in
// one states-pass variant since --fmad=false), a few more at 32. A call with many programs is
// compiled for 4 or 5 blocks an SM (128 or 96 registers); at 5 it spills some loaded tiles by
// design (faster on the H100, SelectiveScan.cpp): up to 256 bytes there.
void expectCompiles(const Variant& v, const char* arch, size_t passes) {
  ssmjit::testing::expectEachCompiles(detail::scanSpecializations(make(v), arch), passes, [&](auto& spec, auto& k) {
    const int64_t bound = spec.get("meta:min_blocks", 0) > 0 ? 256 : v.N > 16 ? 64 : 8;
    EXPECT_LE(k.resources.spillStoreBytes, bound) << k.compileLog;
  });
}

}  // namespace

TEST(ScanKernels, DtypesAndOptionsCompile) {
  SSMJIT_REQUIRE_NVRTC();
  for (DType x : {DType::F32, DType::BF16, DType::F16})
    for (bool varying : {true, false})
      for (bool extras : {true, false}) {
        Variant v;
        v.x = v.bc = x;
        v.bVarying = v.cVarying = varying;
        v.extras = extras;
        v.L = 200;  // one span: the main pass only
        expectCompiles(v, "sm_90a", 1);
      }
}

TEST(ScanKernels, PackedStatesAndSpansCompile) {
  SSMJIT_REQUIRE_NVRTC();
  Variant v;
  v.packed = true, v.states = true, v.batch = 7;
  expectCompiles(v, "sm_90a", 2);  // 4096 tokens > the span of D 256: states pass + main pass
  v.state = DType::BF16, v.G = 4, v.bVarying = false;
  expectCompiles(v, "sm_90a", 2);
  v.D = 1024, v.L = 16384, v.batch = 1, v.packed = false, v.state = DType::F16;
  expectCompiles(v, "sm_80", 2);
}

TEST(ScanKernels, StateSizesCompile) {
  SSMJIT_REQUIRE_NVRTC();
  for (int64_t N : {1, 13, 16}) {
    Variant v;
    v.N = N, v.L = 100;
    expectCompiles(v, "sm_90a", 1);
  }
}

// Over 16 states the forward runs once per chunk of states (ScanStateChunks.h): N 256 is sixteen
// chunks of 16, whose first writes y to the workspace's plane, the middle ones add to it and the
// last adds D and z into out (three specialisations of the main pass, and one states pass for
// all: 300 tokens are two spans at D 256); N 100 six chunks of 16 and one of 4.
TEST(ScanKernels, LargeStateSizesCompileInChunks) {
  SSMJIT_REQUIRE_NVRTC();
  Variant v;
  v.N = 256, v.L = 300;
  std::vector<Specialization> specs = detail::scanSpecializations(make(v), "sm_90a");
  ASSERT_EQ(specs.size(), 4u);
  EXPECT_EQ(specs[0].get("meta:states_pass"), 1);
  specs.erase(specs.begin());
  EXPECT_EQ(specs[0].get("meta:dstate"), 16);
  EXPECT_EQ(specs[0].get("has_yacc"), 0);
  EXPECT_EQ(specs[0].get("has_D"), 0);
  EXPECT_EQ(specs[0].get("has_z"), 0);
  EXPECT_EQ(specs[0].get("dtype:out"), static_cast<int64_t>(DType::F32));
  EXPECT_EQ(specs[1].get("has_yacc"), 1);
  EXPECT_EQ(specs[1].get("dtype:out"), static_cast<int64_t>(DType::F32));
  EXPECT_EQ(specs[2].get("has_yacc"), 1);
  EXPECT_EQ(specs[2].get("has_D"), 1);
  EXPECT_EQ(specs[2].get("has_z"), 1);
  EXPECT_EQ(specs[2].get("dtype:out"), static_cast<int64_t>(DType::BF16));
  v.L = 100;
  v.N = 100;
  specs = detail::scanSpecializations(make(v), "sm_90a");
  ASSERT_EQ(specs.size(), 3u);
  EXPECT_EQ(specs[0].get("meta:dstate"), 16);
  EXPECT_EQ(specs[2].get("meta:dstate"), 4);
  expectCompiles(v, "sm_90a", 3);
}

// The scan of a time tile: each thread's run is a register chain, the time lanes (one warp) add
// log2(lanes) + 1 shuffles of each of the two components per state, and no warp waits for another.
TEST(ScanKernels, TimeTileScanIsRegisterChainsAndLaneShuffles) {
  Variant v;
  v.L = 100;
  const std::vector<Specialization> specs = detail::scanSpecializations(make(v), "sm_90a");
  const std::string cuda = generatedCuda(specs.back());
  const int64_t lanes = specs.back().get("meta:time_lanes");
  ASSERT_GT(lanes, 1);
  int64_t levels = 0;
  while ((int64_t{1} << levels) < lanes) ++levels;
  EXPECT_NE(cuda.find("ssm_comb"), std::string::npos);
  // Per state: the decays of a whole tile and of a partial one, and the spans' fold (each z gate's
  // sigmoid takes one exp2 and one __fdividef besides).
  EXPECT_EQ(occurrences(cuda, "ssm_exp2(") - occurrences(cuda, "__fdividef("), 3 * v.N);
  EXPECT_EQ(occurrences(cuda, "__shfl_up_sync"), 2 * v.N * 2 * (levels + 1));
}

// Time-varying B and C rows are staged through shared memory when a block's channels share one
// group (two barriers a tile, whole or partial), and read back as f32 vectors; with a block across
// groups (G 64: groups of 4 channels, blocks of 8 in this few-program call), or constant B/C, each
// thread loads its own and nothing is staged.
TEST(ScanKernels, VaryingBCStagedOncePerBlockWhenItsChannelsShareAGroup) {
  for (int64_t G : {1, 64}) {
    for (bool varying : {true, false}) {
      Variant v;
      v.L = 100;
      v.G = G;
      v.bVarying = v.cVarying = varying;
      const Specialization spec = detail::scanSpecializations(make(v), "sm_90a").back();
      const std::string cuda = generatedCuda(spec);
      const bool staged = varying && (v.D / G) % spec.get("meta:BLOCK_D") == 0;
      SCOPED_TRACE("G " + std::to_string(G) + (varying ? " varying" : " constant"));
      EXPECT_EQ(varying && G == 1, staged);
      EXPECT_EQ(occurrences(cuda, "__shared__ __align__(16) float"), staged ? 1 : 0);
      EXPECT_EQ(occurrences(cuda, "__syncthreads"), staged ? 4 : 0) << cuda;
      if (staged) {
        // B and C rows of BLOCK_T tokens, 4 floats of padding after every 32 (bank-conflict free).
        const int64_t BT = spec.get("meta:BLOCK_T");
        EXPECT_TRUE(std::regex_search(cuda, std::regex("__shared__ __align__\\(16\\) float v\\d+\\[" +
                                                       std::to_string(2 * v.N * (BT + BT / 32 * 4)) + "\\];")))
            << cuda.substr(0, 4000);
        EXPECT_NE(cuda.find("ssm_ld<4>"), std::string::npos) << "the staged rows are read back as 16-byte vectors";
      }
    }
  }
  // 64 states over 128-token tiles: B's rows fit the 48 KiB of static shared memory, C's no longer
  // (the kernel's limit; the op gives a program at most 16 states).
  Variant v;
  v.L = 100;
  Specialization spec = detail::scanSpecializations(make(v), "sm_90a").back();
  spec.set("meta:dstate", 64);
  spec.set("meta:time_lanes", 16);
  spec.set("meta:BLOCK_T", 128);
  spec.set("meta:BLOCK_D", spec.get("meta:num_warps") * 32 / 16);
  const std::string cuda = generatedCuda(spec);
  EXPECT_EQ(occurrences(cuda, "__shared__ __align__(16) float"), 1);
  EXPECT_TRUE(std::regex_search(cuda, std::regex("__shared__ __align__\\(16\\) float v\\d+\\[9216\\];")));
}

namespace {

// The backward of make(v): every gradient, fake addresses after the forward's.
SelectiveScanBackwardArgs makeBackward(const Variant& v, bool stateGrads) {
  SelectiveScanBackwardArgs b;
  b.forward = make(v);
  detail::setGradientsLikeInputs(b, 20, [](const TensorView&, int k) { return fake(k); });
  b.forward.out = {};
  if (v.states && stateGrads) {
    b.dinitial_states = view(29, v.state, {5, v.D, v.N});
    b.dfinal_states = view(30, v.state, {5, v.D, v.N});
  }
  return b;
}

void expectBackwardCompiles(const Variant& v, bool stateGrads, size_t launches) {
  const auto specs = detail::scanBackwardSpecializations(makeBackward(v, stateGrads), "sm_90a");
  ssmjit::testing::expectEachCompiles(specs, launches, [](auto&, auto& k) {
    // The backward keeps 3 N + 2 sums and N adjoints a channel besides the tile. At N <= 16 it is
    // capped at 128 registers (four blocks an SM) and spills up to ~800 bytes: measured faster
    // on an H100 than the compiler's own choice (6.6 against 8.7 ms at D 5120, 8x2048).
    EXPECT_LE(k.resources.spillStoreBytes, 1024) << k.compileLog;
  });
}

}  // namespace

// Checkpoints and their fold, the adjoint pass (300 tokens are two spans at these widths),
// backward, per-span sums, and the channel sums of time-varying B/C.
TEST(ScanKernels, BackwardVariantsCompile) {
  SSMJIT_REQUIRE_NVRTC();
  Variant v;
  v.L = 300;
  expectBackwardCompiles(v, false, 6);
  v.packed = true, v.states = true, v.batch = 5, v.G = 4, v.x = DType::F32, v.bVarying = false;
  expectBackwardCompiles(v, true, 6);
  v.cVarying = false, v.extras = false, v.N = 5, v.D = 100;
  expectBackwardCompiles(v, true, 5);
}

// Over 16 states the backward runs once per chunk of states: N 40 is chunks of 16, 16 and 8. The
// first writes the sums over its states of du, ddelta and y to the workspace's planes, the middle
// one adds to them and the last adds D's terms and writes the gradients; only the last one's sums
// kernel writes dD and ddelta_bias.
TEST(ScanKernels, BackwardLargeStateSizesCompileInChunks) {
  SSMJIT_REQUIRE_NVRTC();
  Variant v;
  v.N = 40, v.L = 100;
  const std::vector<Specialization> specs = detail::scanBackwardSpecializations(makeBackward(v, false), "sm_90a");
  std::vector<const Specialization*> bwd, sums;
  for (const Specialization& s : specs) {
    if (s.kernel == "selective_scan_bwd") bwd.push_back(&s);
    if (s.kernel == "selective_scan_bwd_sum" && s.get("meta:part") == 0) sums.push_back(&s);
  }
  ASSERT_EQ(bwd.size(), 3u);
  EXPECT_EQ(bwd[0]->get("meta:dstate"), 16);
  EXPECT_EQ(bwd[2]->get("meta:dstate"), 8);
  const int64_t flags[3][3] = {{0, 1, 0}, {1, 1, 0}, {1, 0, 1}};  // part_in, part_out, has_D
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(bwd[k]->get("part_in"), flags[k][0]) << k;
    EXPECT_EQ(bwd[k]->get("part_out"), flags[k][1]) << k;
    EXPECT_EQ(bwd[k]->get("has_D"), flags[k][2]) << k;
  }
  ASSERT_EQ(sums.size(), 2u);  // the first two chunks' are one
  EXPECT_EQ(sums[0]->get("has_D") + sums[0]->get("has_dbias"), 0);
  EXPECT_EQ(sums[1]->get("has_D") + sums[1]->get("has_dbias"), 2);
  for (const Specialization* s : {bwd[0], bwd[2]}) {
    SCOPED_TRACE(s->canonical());
    CompiledKernel k = compileKernel(*s);
    EXPECT_FALSE(k.cubin.empty());
    EXPECT_LE(k.resources.spillStoreBytes, 1024) << k.compileLog;
  }
}

// fp16 u with constant B and C and N 1: the backward's sums of products (weighted reductions
// after form-fma) read a loaded 16-bit tile as its storage bits, converted element by element.
TEST(ScanKernels, SixteenBitBackwardWithConstantBCCompiles) {
  SSMJIT_REQUIRE_NVRTC();
  Variant v;
  v.D = 33, v.N = 1, v.L = 129, v.x = DType::F16, v.bVarying = false, v.cVarying = false, v.extras = false;
  for (const Specialization& spec : detail::scanBackwardSpecializations(makeBackward(v, false), "sm_90a")) {
    SCOPED_TRACE(spec.canonical());
    EXPECT_FALSE(compileKernel(spec).cubin.empty());
  }
}

// A sequence longer than a span: the adjoint pass (a reverse scan only: no states, no forward
// scan, no per-token gradient, so no cross-warp sums: its only barriers stage C's rows, two a
// tile body) runs before the backward; shorter ones leave it out.
TEST(ScanKernels, BackwardSpansRunTheAdjointPassFirst) {
  Variant v;
  v.L = 300;
  std::vector<Specialization> specs = detail::scanBackwardSpecializations(makeBackward(v, false), "sm_90a");
  ASSERT_EQ(specs.size(), 6u);
  ASSERT_EQ(specs[2].get("meta:span"), 256);
  EXPECT_EQ(specs[2].get("meta:adjoint_pass"), 1);
  EXPECT_EQ(specs[3].get("meta:adjoint_pass"), 0);
  const std::string cuda = generatedCuda(specs[2]);
  EXPECT_EQ(occurrences(cuda, "__syncthreads"), 2 * 2) << cuda;
  v.L = 256;
  specs = detail::scanBackwardSpecializations(makeBackward(v, false), "sm_90a");
  ASSERT_EQ(specs.size(), 4u);
  EXPECT_EQ(specs[1].get("meta:adjoint_pass"), 0);
}

// A sequence longer than the backward's span: the checkpoint pass runs in those spans (so that one
// long sequence runs as many programs as dense rows), each span but the first from zeros, keeping
// each tile's summed dt and each span's end; the fold then adds the entering states. One span a
// sequence: the pass walks it whole, and no fold runs.
TEST(ScanKernels, CheckpointPassRunsInTheBackwardsSpans) {
  Variant v;
  v.L = 300;
  std::vector<Specialization> specs = detail::scanBackwardSpecializations(makeBackward(v, false), "sm_90a");
  ASSERT_EQ(specs[0].kernel, kernels::kScan.kernel);
  EXPECT_EQ(specs[0].get("meta:span"), 256);
  ASSERT_EQ(specs[1].kernel, kernels::kScanCkptFold.kernel);
  EXPECT_EQ(specs[1].get("meta:span"), 256);
  EXPECT_EQ(specs[1].get("meta:BLOCK_T"), specs[0].get("meta:BLOCK_T"));
  // The tiles' summed dt and, past the tile loop, the span's end: N states and its summed dt.
  const std::string cuda = generatedCuda(specs[0]);
  EXPECT_GE(occurrences(cuda, "p_ws + "), 1 + v.N + 1) << cuda;
  EXPECT_NE(generatedCuda(specs[1]).find("ssm_exp2"), std::string::npos);
  v.L = 256;
  specs = detail::scanBackwardSpecializations(makeBackward(v, false), "sm_90a");
  EXPECT_EQ(specs[0].get("meta:span"), int64_t{1} << 24);
  for (const Specialization& s : specs) EXPECT_NE(s.kernel, kernels::kScanCkptFold.kernel);
}

// The passes that keep only a tile's end (TileEnds.h) scan dt once for every state and sum each
// state along time: their scans' shuffles do not grow with N, and no (a, b) pairs are scanned in
// the other direction. The adjoint pass: dt forward (shfl_up), no reverse scan (shfl_down); the
// checkpoint pass: dt in reverse, no forward scan.
TEST(ScanKernels, TileEndPassesScanDtOnce) {
  auto cudaOf = [](int64_t N, size_t launch) {
    Variant v;
    v.L = 300, v.N = N;
    return generatedCuda(detail::scanBackwardSpecializations(makeBackward(v, false), "sm_90a").at(launch));
  };
  for (auto [launch, scanned, absent] :
       {std::tuple<size_t, const char*, const char*>{0, "__shfl_down_sync", "__shfl_up_sync"},
        {2, "__shfl_up_sync", "__shfl_down_sync"}}) {
    const std::string n16 = cudaOf(16, launch), n4 = cudaOf(4, launch);
    EXPECT_GT(occurrences(n16, scanned), 0) << "launch " << launch;
    EXPECT_EQ(occurrences(n16, scanned), occurrences(n4, scanned)) << "launch " << launch;
    EXPECT_EQ(n16.find(absent), std::string::npos) << "launch " << launch;
    EXPECT_GT(occurrences(n16, "__shfl_xor_sync"), occurrences(n4, "__shfl_xor_sync")) << "launch " << launch;
  }
}

// The adjoint is a reverse scan: the lanes pass their runs down (shfl_down), none up.
TEST(ScanKernels, BackwardAdjointIsAReverseScan) {
  Variant v;
  v.L = 100;
  const std::vector<Specialization> specs = detail::scanBackwardSpecializations(makeBackward(v, false), "sm_90a");
  const std::string cuda = generatedCuda(specs[1]);
  EXPECT_NE(cuda.find("__shfl_down_sync"), std::string::npos);
  EXPECT_NE(cuda.find("__shfl_up_sync"), std::string::npos);  // the states' forward scan
}

// The 2 N per-token channel sums of time-varying dB/dC are deferred cross-warp reductions: a tile
// passes one barrier before reading them and one at its end, not two a reduction. B/C's rows are
// staged in one more buffer (two barriers a tile).
TEST(ScanKernels, BackwardChannelSumsShareOneBarrier) {
  Variant v;
  v.L = 100;
  const std::vector<Specialization> specs = detail::scanBackwardSpecializations(makeBackward(v, false), "sm_90a");
  const std::string cuda = generatedCuda(specs[1]);
  EXPECT_EQ(occurrences(cuda, "__shared__"), 2 * 2 * v.N + 1) << cuda;  // two tile bodies
  EXPECT_EQ(occurrences(cuda, "__syncthreads"), 2 * (2 + 2)) << cuda;
}

// A packed row's whole backward tiles load u, delta, dout, z and the staged B/C rows as aligned
// vectors moved into place (PackedRuns), and store the per-token dB/dC sums as vectors at their
// tile's checkpoint key; only du, ddelta and dz (at the sequence's own tokens) store elements.
TEST(ScanKernels, PackedBackwardTilesAccessVectors) {
  Variant v;
  v.packed = true, v.batch = 3, v.L = 256;  // channel strides of 16 tokens: whole runs align
  const std::vector<Specialization> specs = detail::scanBackwardSpecializations(makeBackward(v, false), "sm_90a");
  ASSERT_EQ(specs[1].kernel, kernels::kScanBwd.kernel);
  ASSERT_EQ(specs[1].get("meta:adjoint_pass"), 0);
  const std::string cuda = generatedCuda(specs[1]);
  for (const char* p : {"p_u", "p_delta", "p_dout", "p_z", "p_B", "p_C"})
    EXPECT_TRUE(std::regex_search(cuda, std::regex(std::string("ssm_ld_words<4>\\(&v\\d+\\[r\\], ") + p + " "))) << p;
  EXPECT_EQ(occurrences(cuda, "ssm_st<4>(p_ws"), 2 * v.N);  // whole tiles
}

// A min_blocks the backward cannot take (set through SSMJIT_META) is named with what came.
TEST(ScanKernels, BackwardMinBlocksOutOfRangeIsNamed) {
  for (int64_t mb : {-1, 33}) {
    Specialization s;
    s.kernel = kernels::kScanBwd.kernel;
    s.set("D", 256), s.set("group", 256), s.set("meta:dstate", 16), s.set("meta:min_blocks", mb);
    const std::string msg = ssmjit::testing::invalidArgMessage([&] { dsl::completeSpecialization(s); });
    EXPECT_NE(msg.find("selective_scan_bwd: meta min_blocks (SSMJIT_META) is " + std::to_string(mb) +
                       ", expected 0 (the compiler's choice) or 1..32"),
              std::string::npos)
        << msg;
  }
}

// The other meta values any kernel takes from SSMJIT_META are checked where min_blocks is.
TEST(ScanKernels, UnrollBudgetAndInnerLanesOutOfRangeAreNamed) {
  auto message = [](const char* name, int64_t v) {
    Specialization s;
    s.kernel = kernels::kScanBwd.kernel;
    s.set("D", 256), s.set("group", 256), s.set("meta:dstate", 16), s.set(std::string("meta:") + name, v);
    return ssmjit::testing::invalidArgMessage([&] { dsl::completeSpecialization(s); });
  };
  std::string msg = message("unroll_ops", -1);
  EXPECT_NE(msg.find("selective_scan_bwd: meta unroll_ops (SSMJIT_META) is -1, expected >= 0"), std::string::npos)
      << msg;
  msg = message("unroll_lines", -1);
  EXPECT_NE(msg.find("selective_scan_bwd: meta unroll_lines (SSMJIT_META) is -1, expected 0..1048576"),
            std::string::npos)
      << msg;
  for (int64_t lanes : {0, 3, 64}) {
    msg = message("inner_lanes", lanes);
    EXPECT_NE(msg.find("selective_scan_bwd: meta inner_lanes (SSMJIT_META) is " + std::to_string(lanes) +
                       ", expected a power of two in 1..32"),
              std::string::npos)
        << msg;
  }
}

// The parallel class' tiles follow the grid: many programs (8x4096 at D 5120: 2560) keep 4 warps
// capped for 4 blocks an SM, or 5 in a packed row; few (one 16384-token sequence: 320) take 2 warps
// a program, capped for 5 blocks. N 32 runs as two chunks of 16 states, each with those tiles.
// Only at 4 blocks an SM do the tile's register loops unroll up to 64 lines of source.
TEST(ScanKernels, ForwardTilesFollowTheGrid) {
  using Tiles = std::tuple<int64_t, int64_t, int64_t>;  // min_blocks, num_warps, unroll_lines
  auto tiles = [](const Variant& v) {
    for (const Specialization& s : detail::scanSpecializations(make(v), "sm_90a"))
      if (s.get("meta:time_lanes") > 1)
        return Tiles{s.get("meta:min_blocks"), s.get("meta:num_warps"), s.get("meta:unroll_lines")};
    ADD_FAILURE() << "no parallel launch";
    return Tiles{};
  };
  Variant v;
  v.D = 5120, v.batch = 8, v.L = 4096;
  EXPECT_EQ(tiles(v), Tiles(4, 4, 64));
  v.packed = true, v.L = 16384;
  EXPECT_EQ(tiles(v), Tiles(5, 4, 0));
  v.packed = false, v.batch = 1;
  EXPECT_EQ(tiles(v), Tiles(5, 2, 0));
  v.batch = 8, v.L = 2048, v.N = 32;
  EXPECT_EQ(tiles(v), Tiles(4, 4, 64));
}

// The backward's checkpoint pass (the forward kernel keeping states) is capped for 5 blocks an SM,
// without unrolled register loops, whatever the grid: dense rows, one long sequence, a packed row.
TEST(ScanKernels, CheckpointPassHoldsFiveBlocksAnSM) {
  Variant v;
  v.D = 5120;
  for (const auto& [batch, L, packed] : {std::tuple{8, 2048, false}, {1, 16384, false}, {19, 16384, true}}) {
    v.batch = batch, v.L = L, v.packed = packed;
    int checkpointPasses = 0;
    for (const Specialization& s : detail::scanBackwardSpecializations(makeBackward(v, true), "sm_90a")) {
      if (s.kernel != kernels::kScan.kernel) continue;
      ++checkpointPasses;
      EXPECT_EQ(s.get("meta:checkpoints"), 1) << s.canonical();
      EXPECT_EQ(s.get("meta:min_blocks"), 5) << s.canonical();
      EXPECT_EQ(s.get("meta:unroll_lines"), 0) << s.canonical();
    }
    EXPECT_EQ(checkpointPasses, 1) << batch << "x" << L << (packed ? " packed" : "");
  }
}

// A packed row's launches take its sequences longest first (SelectiveScan.h), forward and backward,
// its checkpoint pass included, where a program scans whole sequences (the forward's spans bound a
// program's length otherwise), so the longest sequences do not finish last; dense rows keep their
// order.
TEST(ScanKernels, PackedLaunchesTakeTheLongestSequencesFirst) {
  Variant v;
  v.D = 5120, v.batch = 19, v.L = 16384;
  for (bool packed : {false, true}) {
    v.packed = packed;
    std::vector<Specialization> specs = detail::scanSpecializations(make(v), "sm_90a");
    for (const Specialization& s : detail::scanBackwardSpecializations(makeBackward(v, true), "sm_90a"))
      if (s.kernel != kernels::kScanBwdSum.kernel && s.kernel != kernels::kScanCkptFold.kernel) specs.push_back(s);
    ASSERT_GE(specs.size(), 3u);
    for (const Specialization& s : specs) EXPECT_EQ(s.get("meta:longest_first"), packed) << s.canonical();
  }
  v.D = 256, v.L = 4096;  // spans of 256 tokens: a states pass and a main pass
  const std::vector<Specialization> spans = detail::scanSpecializations(make(v), "sm_90a");
  ASSERT_EQ(spans.size(), 2u);
  for (const Specialization& s : spans) EXPECT_EQ(s.get("meta:longest_first"), 0) << s.canonical();
}

// Length classes at D 5120 with serial_seqlen 2048 (SelectiveScan.h; without it every sequence is
// parallel): a dense call runs in its length's class, a packed row in both, or in the serial one
// alone when max_seqlen rules the other out. The
// serial launch scans with one lane of 8-token tiles, 2 warps capped for 5 blocks an SM, a
// channel's states over 4 threads for up to 3 sequences, 2 for up to 7, else 1; a packed row's
// launches take the longest sequences first. Over 16 states each chunk of states runs the same
// classes.
TEST(ScanKernels, LengthClassesFollowTheCall) {
  struct Launch {
    int64_t cls, lanes, minBlocks, warps, longestFirst, parts;
    bool operator==(const Launch& o) const {
      return cls == o.cls && lanes == o.lanes && minBlocks == o.minBlocks && warps == o.warps &&
             longestFirst == o.longestFirst && (cls != 1 || parts == o.parts);
    }
  };
  auto launches = [](const SelectiveScanArgs& a) {
    std::vector<Launch> l;
    for (const Specialization& s : detail::scanSpecializations(a, "sm_90a"))
      l.push_back({s.get("meta:length_class"), s.get("meta:time_lanes"), s.get("meta:min_blocks"),
                   s.get("meta:num_warps"), s.get("meta:longest_first"), s.get("meta:state_parts")});
    return l;
  };
  Variant v;
  v.D = 5120, v.batch = 8, v.L = 2048;
  EXPECT_EQ(launches(make(v)), (std::vector<Launch>{{0, 8, 4, 4, 0, 0}}));
  v.serial = 2048;
  EXPECT_EQ(launches(make(v)), (std::vector<Launch>{{1, 1, 5, 2, 0, 1}}));
  v.batch = 7;
  EXPECT_EQ(launches(make(v)), (std::vector<Launch>{{1, 1, 5, 2, 0, 2}}));
  v.batch = 3;
  EXPECT_EQ(launches(make(v)), (std::vector<Launch>{{1, 1, 5, 2, 0, 4}}));
  // With the states split, the tiles' reads go a tile ahead (meta:prefetch); one thread a channel
  // has no registers for them.
  EXPECT_EQ(detail::scanSpecializations(make(v), "sm_90a").back().get("meta:prefetch"), 1);
  v.batch = 8;
  EXPECT_EQ(detail::scanSpecializations(make(v), "sm_90a").back().get("meta:prefetch"), 0);
  v.batch = 8, v.L = 2049;
  EXPECT_EQ(launches(make(v)), (std::vector<Launch>{{0, 8, 4, 4, 0, 0}}));
  v.batch = 1, v.L = 16384;
  EXPECT_EQ(launches(make(v)), (std::vector<Launch>{{0, 8, 5, 2, 0, 0}}));
  v.packed = true, v.batch = 19;
  SelectiveScanArgs a = make(v);
  EXPECT_EQ(launches(a), (std::vector<Launch>{{2, 8, 5, 4, 1, 0}, {1, 1, 5, 2, 1, 1}}));
  a.max_seqlen = 2048;
  EXPECT_EQ(launches(a), (std::vector<Launch>{{1, 1, 5, 2, 1, 1}}));
  v.packed = false, v.batch = 8, v.L = 2048, v.N = 32;
  EXPECT_EQ(launches(make(v)), (std::vector<Launch>{{1, 1, 5, 2, 0, 1}, {1, 1, 5, 2, 0, 1}}));
}

// The serial launch of a packed row puts its tiles on the row's grid: u, delta and z load as
// 16-byte vectors with no runs moved between registers or lanes (the ranking of the sequences,
// longest first, is the launch's only cross-lane step).
TEST(ScanKernels, SerialPackedTilesSitOnTheRowGrid) {
  Variant v;
  v.D = 5120, v.packed = true, v.batch = 19, v.L = 16384, v.serial = 2048;
  Specialization s = detail::scanSpecializations(make(v), "sm_90a").back();
  ASSERT_EQ(s.get("meta:length_class"), 1);
  s.set("meta:longest_first", 0);
  const std::string cuda = generatedCuda(s);
  for (const char* p : {"p_u", "p_delta", "p_z"})
    EXPECT_TRUE(std::regex_search(cuda, std::regex(std::string("ssm_ld_words<8>\\(&v\\d+\\[r\\], ") + p + " "))) << p;
  EXPECT_EQ(occurrences(cuda, "__shfl"), 0);
  EXPECT_EQ(occurrences(cuda, "const int q = j - ("), 0) << "a run moved by a shift";
}

// The number of sequences, the slot counts and the longest length are only bounds to the
// kernels: no divisibility class of theirs is bound, so varlen batches that differ in them (one
// every training step) do not compile again for it.
TEST(ScanKernels, SequenceAndSlotCountsBindNoClass) {
  Variant v;
  v.packed = true, v.batch = 3, v.states = true, v.L = 4096;
  std::vector<Specialization> specs = detail::scanSpecializations(make(v), "sm_90a");
  for (const Specialization& s : detail::scanBackwardSpecializations(makeBackward(v, true), "sm_90a"))
    specs.push_back(s);
  for (const Specialization& s : specs)
    for (const char* count : {"div:nseq=", "div:nslots_init=", "div:nslots_final=", "div:max_len="})
      EXPECT_EQ(s.canonical().find(count), std::string::npos) << count << " in " << s.canonical();
}

// A packed row of 8 x 2049 bf16 tokens: its channel stride (16392) is not a multiple of 16 tokens
// but is of 8, which is 16 bytes, so the whole tiles still load 16-byte vectors (scalar accesses
// make such rows far slower: docs/performance.md). An odd row length starts each channel's row on its own
// alignment, packed or dense: the runs align on each row's address (PackedRuns, perRow) and still
// load vectors, moved into place by selects, not by a branch of the program's shift.
TEST(ScanKernels, RowsLoadVectorsWhateverTheirLength) {
  Variant v;
  v.batch = 8;
  const auto loads = [&](bool packed, int64_t L) {
    v.packed = packed, v.L = L;
    const std::string cuda = generatedCuda(detail::scanSpecializations(make(v), "sm_90a").back());
    int n = 0;
    for (const char* p : {"p_u", "p_delta", "p_z"})
      n += std::regex_search(cuda, std::regex(std::string("ssm_ld_words<8>\\(&v\\d+\\[r\\], ") + p + " "));
    return std::pair<int, int>(n, static_cast<int>(occurrences(cuda, "const int q = j - (")));
  };
  // Five tiles move (u, delta, z and the staged B and C): by the program's shift, a branch of 7
  // shifts each; by each row's, 3 + 2 (the run and the one after it, by 4, 2 and 1 places).
  EXPECT_EQ(loads(true, 8 * 2049), std::pair(3, 5 * 7));
  EXPECT_EQ(loads(true, 8 * 2049 + 1), std::pair(3, 5 * 5));
  EXPECT_EQ(loads(false, 2047).first, 3);
  EXPECT_EQ(loads(false, 2048), std::pair(3, 0));
}

// A packed row's tiles start anywhere: each thread loads its aligned run and the next one as
// vectors and takes its tokens by register moves (PackedRuns), so the packed kernels shuffle
// no more than the dense ones; and the packed backward runs one tile body, its last tile
// masked by select, where a dense row that may end in a partial tile (4080 tokens: no multiple of
// 32 proven) has a second body for it.
TEST(ScanKernels, PackedTilesMoveTokensInRegistersAndTheBackwardRunsOneBody) {
  Variant v;
  v.L = 4080;
  const std::string dense = generatedCuda(detail::scanSpecializations(make(v), "sm_90a").back());
  v.packed = true;
  Specialization ps = detail::scanSpecializations(make(v), "sm_90a").back();
  ps.set("meta:longest_first", 0);  // its ranking of the sequences reduces across lanes
  const std::string packed = generatedCuda(ps);
  EXPECT_EQ(occurrences(packed, "__shfl"), occurrences(dense, "__shfl"));
  EXPECT_NE(packed.find("ssm_ld_words<8>"), std::string::npos) << "the runs load as 16-byte vectors";
  const auto bwd = [&](bool isPacked, auto generated) {
    v.packed = isPacked;
    for (Specialization s : detail::scanBackwardSpecializations(makeBackward(v, false), "sm_90a"))
      if (s.kernel == kernels::kScanBwd.kernel && s.get("meta:adjoint_pass") == 0) {
        s.set("meta:longest_first", 0);
        return generated(s);
      }
    ADD_FAILURE() << "no backward launch";
    return std::string();
  };
  const auto cuda = [](const Specialization& s) { return generatedCuda(s); };
  EXPECT_EQ(occurrences(bwd(true, cuda), "__shfl"), occurrences(bwd(false, cuda), "__shfl") / 2);
  // The per-state decays (exp2 operations of the final IR): of one tile body and the spans' fold,
  // against two bodies and the fold (each sigmoid takes one exp2 and one approximate division).
  const auto ir = [](const Specialization& s) { return ssmjit::testing::generatedIr(s); };
  const auto decays = [](const std::string& c) { return occurrences(c, "math.exp2 ") - occurrences(c, "arith.divf "); };
  EXPECT_EQ(decays(bwd(true, ir)), 2 * v.N);
  EXPECT_EQ(decays(bwd(false, ir)), 3 * v.N);
}

// A dense row whose length its class proves a multiple of the tile (L bound by its class up to
// 64) has no partial tile: the forward's passes and the backward's write one tile body, so their
// final IR has at least a tile's N decays (exp2) fewer than for a row of 4080 tokens, whose last
// tile may be partial (the states and adjoint passes' tiles take 2 N). Half the code for NVVM
// to optimise (first-call times: docs/performance.md, Compile time).
TEST(ScanKernels, DenseRowsOfWholeTilesRunOneTileBody) {
  Variant v;
  const auto decays = [](const Specialization& s) {
    const std::string ir = ssmjit::testing::generatedIr(s);
    return occurrences(ir, "math.exp2 ") - occurrences(ir, "arith.divf ");
  };
  const auto launches = [&](int64_t L) {
    v.L = L;
    std::vector<Specialization> specs = detail::scanSpecializations(make(v), "sm_90a");
    for (const Specialization& s : detail::scanBackwardSpecializations(makeBackward(v, false), "sm_90a"))
      if (s.kernel != kernels::kScanBwdSum.kernel && s.kernel != kernels::kScanCkptFold.kernel)
        specs.push_back(s);  // its sums and the checkpoints' fold walk no tiles
    return specs;
  };
  const std::vector<Specialization> whole = launches(4096), partial = launches(4080);
  ASSERT_EQ(whole.size(), partial.size());
  ASSERT_EQ(whole.size(), 5u) << "the states and main passes, checkpoints, the adjoint pass, the backward";
  for (size_t i = 0; i < whole.size(); ++i) {
    SCOPED_TRACE(whole[i].canonical());
    EXPECT_EQ(whole[i].get("div:L"), 64);
    EXPECT_EQ(partial[i].get("div:L"), 16);
    EXPECT_GE(decays(partial[i]) - decays(whole[i]), v.N);
  }
  v.packed = true;  // a packed row's sequences end anywhere: its class does not count
  for (const Specialization& s : launches(4096)) EXPECT_FALSE(kernels::scanTilesWhole(s, 8)) << s.canonical();
}

// Dense rows of 1024 programs (64 x 256 channels) run 4 blocks an SM, where the forward's register
// loops are repeated in the source up to 64 lines each (unroll_lines): fewer `#pragma unroll`
// loops than the same kernel without, and it compiles within the spill bound.
TEST(ScanKernels, DenseRowsOfManyProgramsUnrollTheirRegisterLoops) {
  SSMJIT_REQUIRE_NVRTC();
  Variant v;
  v.batch = 64, v.L = 128;
  expectCompiles(v, "sm_90a", 1);
  for (const Specialization& s : detail::scanSpecializations(make(v), "sm_90a")) {
    ASSERT_EQ(s.get("meta:min_blocks"), 4) << s.canonical();
    ASSERT_EQ(s.get("meta:unroll_lines"), 64) << s.canonical();
    Specialization loops = s;
    loops.set("meta:unroll_lines", 0);
    EXPECT_LT(occurrences(generatedCuda(s), "#pragma unroll"), occurrences(generatedCuda(loops), "#pragma unroll"));
  }
}
