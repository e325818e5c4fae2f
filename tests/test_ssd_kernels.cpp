// The SSD chunked scan's kernels on the CPU: every kernel the op launches (chunk_cumsum, bmm,
// chunk_state, chunk_scan, and state_passing with decays) goes through the whole pipeline and NVRTC for a few
// shapes, dtypes and options (dense and packed rows, states through slots, block states, the
// decay, states-only calls), with the specialisations the op's own binding makes. Tensors are fake
// device addresses: only their alignment classes are read.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <sstream>
#include <string>

#include "GpuTest.h"  // SSMJIT_REQUIRE_NVRTC
#include "kernels_dsl/CompileKernel.h"
#include "kernels_dsl/Registry.h"
#include "kernels_dsl/ssd/Ssd.h"
#include "runtime/ops/SsdSpec.h"
#include "ssmjit/ops.h"
#include "tests/support/CompileEach.h"
#include "tests/support/ExpectError.h"
#include "tests/support/FakeSsdCall.h"
#include "tests/support/GeneratedCuda.h"
#include "tests/support/Occurrences.h"

using namespace ssmjit;
using ssmjit::testing::fakeView;

namespace {

struct Variant : ssmjit::testing::FakeSsdShape {
  bool extras = true, states = false, decay = false, blocks = false, out = true, dPerHead = true, y = false;
};

SsdArgs make(const Variant& v) {
  SsdArgs a = ssmjit::testing::fakeSsdInputs(v);
  const int64_t Bt = v.packed ? 1 : v.batch;
  if (v.out) a.out = fakeView(6, v.x, {Bt, v.L, v.H, v.P});
  if (v.y) a.y = fakeView(17, DType::F32, {Bt, v.L, v.H, v.P});
  if (v.extras) {
    a.D = v.dPerHead ? fakeView(7, DType::F32, {v.H}) : fakeView(7, DType::F32, {v.H, v.P});
    a.z = fakeView(8, v.x, {Bt, v.L, v.H, v.P});
    a.dt_bias = fakeView(9, DType::F32, {v.H});
    a.dt_softplus = true;
    a.dt_min = 0.001f, a.dt_max = 0.5f;
  }
  if (v.states) {
    a.initial_states = fakeView(11, DType::F32, {5, v.H, v.P, v.N});
    a.final_states = a.initial_states;
    a.initial_state_indices = fakeView(12, DType::I32, {v.batch});
    a.final_state_indices = fakeView(13, DType::I64, {v.batch});
  }
  if (v.decay) a.sequence_decay = fakeView(14, DType::F32, {v.batch, v.H});
  if (v.blocks) {
    a.block_state_tokens = 2 * v.Q;
    a.block_states = fakeView(15, DType::BF16, {9, v.H, v.P, v.N});
    a.block_state_indices = fakeView(16, DType::I32, {v.batch, 8});
  }
  return a;
}

void expectCompiles(const Variant& v, const char* arch, size_t kernels) {
  // The products' kernels keep their tiles in registers (ssd_bmm spills a word at N 256). The
  // 16-bit chunk_scan, held to 128 registers for 4 blocks an SM, may spill a word or two (8 bytes
  // with a kept y): it runs faster so than at 3 blocks without spilling.
  ssmjit::testing::expectEachCompiles(
      detail::ssdSpecializations(make(v), arch), kernels, [](const Specialization& spec, const CompiledKernel& k) {
        if (spec.kernel == "ssd_chunk_state") EXPECT_EQ(k.resources.spillStoreBytes, 0) << k.compileLog;
        if (spec.kernel == "ssd_chunk_scan")
          EXPECT_LE(k.resources.spillStoreBytes, spec.get("meta:min_blocks", 0) == 4 ? 16 : 0) << k.compileLog;
      });
}

}  // namespace

TEST(SsdKernels, MambaHeadsCompile) {
  SSMJIT_REQUIRE_NVRTC();
  for (DType x : {DType::BF16, DType::F32}) {
    Variant v;
    v.x = x;
    expectCompiles(v, "sm_90a", 4);
  }
}

TEST(SsdKernels, ShapesAndChunksCompile) {
  SSMJIT_REQUIRE_NVRTC();
  Variant v;
  v.G = 2, v.P = 32, v.N = 64, v.Q = 64, v.dPerHead = false;
  expectCompiles(v, "sm_90a", 4);
  v.Q = 128, v.extras = false, v.x = DType::F16;
  expectCompiles(v, "sm_80", 4);
  v = {};
  v.P = 256, v.N = 256, v.H = 4, v.G = 4;
  expectCompiles(v, "sm_90a", 4);
}

// Kept y: chunk_scan stores y before the gate beside out; no other kernel touches it.
TEST(SsdKernels, KeptYIsStoredByTheScanOnly) {
  SSMJIT_REQUIRE_NVRTC();
  Variant v;
  v.y = true;
  expectCompiles(v, "sm_90a", 4);
  for (const Specialization& spec : detail::ssdSpecializations(make(v), "sm_90a")) {
    const std::string cuda = ssmjit::testing::generatedCuda(spec);
    const bool stores = cuda.find("p_y + ") != std::string::npos;
    EXPECT_EQ(stores, spec.kernel == "ssd_chunk_scan") << spec.kernel;
  }
}

TEST(SsdKernels, PackedStatesAndBlocksCompile) {
  SSMJIT_REQUIRE_NVRTC();
  Variant v;
  v.packed = true, v.batch = 5, v.states = true, v.blocks = true;
  expectCompiles(v, "sm_90a", 4);
  v.decay = true;  // state_passing sums the decays
  expectCompiles(v, "sm_90a", 5);
  v.out = false;  // the states only: no bmm, no chunk_scan
  expectCompiles(v, "sm_90a", 3);
}

// Without sequence decays chunk_state passes the states along a chain of programs (tickets,
// flags) and no state_passing launches; with them, state_passing does, and chunk_state writes
// each chunk's state from zero.
TEST(SsdKernels, ChunkStatePassesTheStatesUnlessDecaysAreAsked) {
  SSMJIT_REQUIRE_NVRTC();
  for (bool decay : {false, true}) {
    Variant v;
    v.packed = true, v.batch = 3, v.states = true, v.blocks = true, v.decay = decay;
    bool passing = false;
    for (const Specialization& spec : detail::ssdSpecializations(make(v), "sm_90a")) {
      passing = passing || spec.kernel == "ssd_state_passing";
      if (spec.kernel != "ssd_chunk_state") continue;
      const std::string cuda = ssmjit::testing::generatedCuda(spec);
      for (const char* chain : {"ssm_ticket(", "ssm_wait_flag(", "ssm_set_flag("})
        EXPECT_EQ(cuda.find(chain) != std::string::npos, !decay) << chain;
    }
    EXPECT_EQ(passing, decay);
  }
}

// A state block smaller than the chain's flags are laid out for is refused by name.
TEST(SsdKernels, ChainedChunkStateRefusesSmallStateBlocks) {
  Specialization s = detail::ssdSpecializations(make(Variant{}), "sm_90a")[2];
  ASSERT_EQ(s.kernel, "ssd_chunk_state");
  s.set("meta:BLOCK_N", 8);
  const std::string msg = ssmjit::testing::invalidArgMessage([&] { dsl::completeSpecialization(s); });
  EXPECT_NE(msg.find("ssd_chunk_state: meta BLOCK_P 64, BLOCK_N 8, slot_inner 0 (SSMJIT_META), expected BLOCK_P >= "
                     "32, BLOCK_N >= 16 and slot_inner 0"),
            std::string::npos)
      << msg;
}

TEST(SsdKernels, StatePassingBlockKeepsTheGpuBusy) {
  // Mamba-2 2.7B heads (P N = 8192, H 80): 8 sequences give 8 x 80 x 8 blocks of 4 warps, more
  // than a wave of warp slots, so threads take 8 elements; one sequence halves the block.
  const kernels::SsdPassBlock dense = kernels::ssdStatePassingBlock(64 * 128, 80, 8);
  EXPECT_EQ(dense.block, 1024);
  EXPECT_EQ(dense.warps, 4);
  const kernels::SsdPassBlock one = kernels::ssdStatePassingBlock(64 * 128, 80, 1);
  EXPECT_EQ(one.block, 512);
  EXPECT_EQ(one.warps, 4);
}

// The schedules SSMJIT_META selects besides the defaults compile without spills at Mamba-2 heads:
// state passing reading 1, 2 and 8 chunks ahead (4 by default), and chunk_scan and chunk_state with one 16-bit
// term (bf16: B raw through the ring; fp16: B weighted in f32), chunk_scan without the lo buffer
// (also at 5 blocks an SM with the copies in the layout's runs, meta:tile_copy 0: 96 registers,
// where ptxas otherwise takes 168).
TEST(SsdKernels, ReadAheadAndOneTermSchedulesCompile) {
  SSMJIT_REQUIRE_NVRTC();
  for (DType x : {DType::BF16, DType::F16}) {
    Variant v;
    v.x = x, v.decay = true;
    int compiled = 0;
    for (const Specialization& exact : detail::ssdSpecializations(make(v), "sm_90a")) {
      std::vector<Specialization> variants;
      if (exact.kernel == "ssd_state_passing") {
        for (int64_t d : {1, 2, 8}) variants.push_back(exact), variants.back().set("meta:PREFETCH", d);
      } else if (exact.kernel == "ssd_chunk_scan" || exact.kernel == "ssd_chunk_state") {
        Specialization one = exact;
        one.set("meta:one_term", 1);
        variants.push_back(one);
        if (exact.kernel == "ssd_chunk_scan") {
          variants.push_back(one);
          variants.back().set("meta:min_blocks", 5).set("meta:tile_copy", 0);
        }
      }
      if (variants.empty()) continue;
      const CompiledKernel base = compileKernel(exact);
      for (const Specialization& spec : variants) {
        SCOPED_TRACE(spec.canonical());
        const CompiledKernel k = compileKernel(spec);
        EXPECT_FALSE(k.cubin.empty());
        EXPECT_EQ(k.resources.spillStoreBytes, 0) << k.compileLog;
        EXPECT_NE(k.cudaSource, base.cudaSource);
        if (spec.kernel == "ssd_chunk_scan") EXPECT_LT(k.dynamicSharedBytes, base.dynamicSharedBytes);
        ++compiled;
      }
    }
    EXPECT_EQ(compiled, 6);
  }
}

// Context parallelism's split call (SsdSpec.h): the summary launches chunk_cumsum, chunk_state and
// a state passing that keeps the chunks' states (no entering state stored); the resumed call the
// rest. The kept form compiles and differs from the storing one.
TEST(SsdKernels, SummaryAndResumePhasesSplitTheLaunches) {
  SSMJIT_REQUIRE_NVRTC();
  Variant v;
  v.packed = true, v.batch = 5, v.states = true;
  const SsdArgs whole = make(v);
  SsdArgs states = whole;
  states.out = {};
  auto kernels = [](const std::vector<Specialization>& specs) {
    std::vector<std::string> names;
    for (const Specialization& s : specs) names.push_back(s.kernel);
    return names;
  };
  const std::vector<Specialization> summary = detail::ssdSpecializations(states, "sm_90a", detail::SsdPhase::Summary);
  const std::vector<Specialization> resume = detail::ssdSpecializations(whole, "sm_90a", detail::SsdPhase::Resume);
  EXPECT_EQ(kernels(summary), (std::vector<std::string>{"ssd_chunk_cumsum", "ssd_chunk_state", "ssd_state_passing"}));
  EXPECT_EQ(kernels(resume), (std::vector<std::string>{"ssd_bmm", "ssd_state_passing", "ssd_chunk_scan"}));
  const Specialization& kept = summary.back();
  const Specialization& storing = resume[1];
  EXPECT_EQ(kept.get("meta:keep_states"), 1);
  EXPECT_EQ(storing.find("meta:keep_states"), nullptr);
  const CompiledKernel k = compileKernel(kept), s = compileKernel(storing);
  EXPECT_FALSE(k.cubin.empty());
  EXPECT_NE(k.cudaSource, s.cudaSource);
  Specialization bad = storing;
  bad.set("meta:keep_states", 2);
  const std::string msg = ssmjit::testing::invalidArgMessage([&] { dsl::completeSpecialization(bad); });
  EXPECT_NE(msg.find("ssd_state_passing: meta keep_states (SSMJIT_META) is 2, expected 0"), std::string::npos) << msg;
}

// Meta values out of range (SSMJIT_META) are named with what came.
TEST(SsdKernels, ReadAheadAndOneTermOutOfRangeAreNamed) {
  Variant v;
  for (Specialization spec : detail::ssdSpecializations(make(v), "sm_90a")) {
    if (spec.kernel == "ssd_state_passing") {
      spec.set("meta:PREFETCH", 9);
      const std::string msg = ssmjit::testing::invalidArgMessage([&] { dsl::completeSpecialization(spec); });
      EXPECT_NE(msg.find("ssd_state_passing: meta PREFETCH (SSMJIT_META) is 9, expected 0..8"), std::string::npos)
          << msg;
    } else if (spec.kernel == "ssd_chunk_scan" || spec.kernel == "ssd_chunk_state") {
      spec.set("meta:one_term", 2);
      const std::string msg = ssmjit::testing::invalidArgMessage([&] { compileKernel(spec); });
      EXPECT_NE(msg.find(spec.kernel + ": meta one_term (SSMJIT_META) is 2, expected 0 (exact terms) or 1"),
                std::string::npos)
          << msg;
    }
  }
}

// The staged 16-bit tiles go whole (copyTileAsync, 16-byte vectors over the block) where the
// bindings prove them aligned: x, z, C.B, the state, dt' and the cumsums in chunk_scan, B and x in
// chunk_state. Rows of 3 x 33 halves are not: x and z fall back to the layout's runs, the
// workspace's tiles stay whole. meta:tile_copy 0 keeps every copy in the layout's runs.
TEST(SsdKernels, StagedTilesCopyWholeWhereTheBindingsProveThemAligned) {
  auto wholeCopies = [](const std::string& cuda, const char* ptr) {
    int n = 0;
    for (size_t at = cuda.find("ssm_cp_async_n<16>("); at != std::string::npos;
         at = cuda.find("ssm_cp_async_n<16>(", at + 1))
      n += cuda.compare(cuda.find("? ", at) + 2, std::string(ptr).size(), ptr) == 0;
    return n;
  };
  auto kernels = [](const Variant& v, const char* meta) {
    std::map<std::string, std::string> cuda;
    for (Specialization spec : detail::ssdSpecializations(make(v), "sm_90a"))
      if (spec.kernel == "ssd_chunk_scan" || spec.kernel == "ssd_chunk_state") {
        if (meta) spec.set(meta, 0);
        cuda[spec.kernel] = ssmjit::testing::generatedCuda(spec);
      }
    return cuda;
  };
  Variant aligned;
  auto c = kernels(aligned, nullptr);
  EXPECT_GT(wholeCopies(c["ssd_chunk_scan"], "p_x"), 0) << c["ssd_chunk_scan"];
  EXPECT_GT(wholeCopies(c["ssd_chunk_scan"], "p_z"), 0);
  EXPECT_GE(wholeCopies(c["ssd_chunk_scan"], "p_ws"), 4) << "C.B's, the state's, dt''s and the cumsums' tiles";
  EXPECT_GT(wholeCopies(c["ssd_chunk_scan"], "p_C"), 0) << "C's tiles, staged with the state's";
  EXPECT_GT(wholeCopies(c["ssd_chunk_state"], "p_B"), 0);
  EXPECT_GT(wholeCopies(c["ssd_chunk_state"], "p_x"), 0);

  Variant odd;
  odd.H = 3, odd.P = 33, odd.G = 1;
  c = kernels(odd, nullptr);
  EXPECT_EQ(wholeCopies(c["ssd_chunk_scan"], "p_x"), 0);
  EXPECT_EQ(wholeCopies(c["ssd_chunk_scan"], "p_z"), 0);
  EXPECT_GE(wholeCopies(c["ssd_chunk_scan"], "p_ws"), 2);
  EXPECT_EQ(wholeCopies(c["ssd_chunk_state"], "p_x"), 0);

  c = kernels(aligned, "meta:tile_copy");
  EXPECT_EQ(c["ssd_chunk_scan"].find("ssm_cp_async_n<"), std::string::npos);
  EXPECT_EQ(c["ssd_chunk_state"].find("ssm_cp_async_n<"), std::string::npos);
}

// chunk_scan's out leaves through x's ring in 16-byte vectors of whole rows (storeTile) where x's
// ring holds out's dtype and the bindings prove out's rows aligned; else (rows of 33 halves) in
// the accumulators' layout, pairs of half a sector.
TEST(SsdKernels, ChunkScanStoresOutWholeWhereItsRowsAreAligned) {
  auto chunkScan = [](const Variant& v) {
    for (const Specialization& spec : detail::ssdSpecializations(make(v), "sm_90a"))
      if (spec.kernel == "ssd_chunk_scan") return ssmjit::testing::generatedCuda(spec);
    return std::string();
  };
  const std::string vectors = "*reinterpret_cast<ssm_raw<16>::type*>(p_out";
  Variant aligned;
  EXPECT_EQ(ssmjit::testing::occurrences(chunkScan(aligned), vectors), 1) << chunkScan(aligned);
  Variant odd;
  odd.H = 3, odd.P = 33, odd.G = 1;
  EXPECT_EQ(ssmjit::testing::occurrences(chunkScan(odd), vectors), 0);
}

// A head's D (shape (H,)) joins the scores' diagonal, so chunk_scan reads x only through its ring
// (with z, x's own rows are no longer there); a per-channel D (H, P) keeps D x_i after the
// product, reading those rows from memory.
TEST(SsdKernels, ChunkScanTakesAHeadsDOnTheScoresDiagonal) {
  auto xReads = [](bool dPerHead) {  // lines reading x other than the ring's copies
    Variant v;
    v.dPerHead = dPerHead;
    int reads = -1;
    for (const Specialization& spec : detail::ssdSpecializations(make(v), "sm_90a"))
      if (spec.kernel == "ssd_chunk_scan") {
        std::istringstream cuda(ssmjit::testing::generatedCuda(spec));
        reads = 0;
        for (std::string line; std::getline(cuda, line);)
          reads += line.find("p_x + ") != std::string::npos && line.find("cp_async") == std::string::npos;
      }
    return reads;
  };
  EXPECT_EQ(xReads(true), 0);
  EXPECT_GT(xReads(false), 0);
}

// The within-chunk scores weigh each element by its decay through the hardware's exp2 (ssdDecay),
// not expf, whose range reduction would be most of a score's instructions: chunk_scan takes one
// exp (an operation of its final IR), the entering state's row factor, outside its loops.
TEST(SsdKernels, ScoreDecaysTakeTheHardwareExp2) {
  for (bool keptY : {false, true}) {
    Variant v;
    v.y = keptY;
    for (const Specialization& spec : detail::ssdSpecializations(make(v), "sm_90a"))
      if (spec.kernel == "ssd_chunk_scan") {
        const std::string ir = ssmjit::testing::generatedIr(spec);
        EXPECT_GE(ssmjit::testing::occurrences(ir, "math.exp2 "), 1) << ir;
        EXPECT_EQ(ssmjit::testing::occurrences(ir, "math.exp "), 1) << ir;
      }
  }
}

// Without final or block states a sequence's last chunk (past its first) leaves nothing anyone
// reads, so chained chunk_state programs there return before their product: they look up their
// sequence's bounds (cu_seqlens) for it. With final states they run whole.
TEST(SsdKernels, ChunkStateSkipsALastChunkNoOneReads) {
  SSMJIT_REQUIRE_NVRTC();
  auto cuReads = [](bool states) {
    Variant v;
    v.packed = true, v.batch = 3, v.states = states;
    for (const Specialization& spec : detail::ssdSpecializations(make(v), "sm_90a"))
      if (spec.kernel == "ssd_chunk_state")
        return ssmjit::testing::occurrences(ssmjit::testing::generatedCuda(spec), "ssm_load(p_cu");
    return int64_t{-1};
  };
  EXPECT_GT(cuReads(false), cuReads(true));
  EXPECT_GE(cuReads(true), 0);
}
