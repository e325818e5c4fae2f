// The SSD backward's kernels on the CPU: every kernel ssd_backward launches (the forward's four
// for the recomputation, then dstates, dx, dCB, dB, dC, ddt and the sums) goes
// through the whole pipeline and NVRTC for a few shapes, dtypes and options (dense and packed
// rows, states through slots with d(final) in and d(initial) out, D per head and per channel, z
// on and off, the clamp), with the specialisations the op's own binding makes. Tensors are fake
// device addresses: only their alignment classes are read.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "GpuTest.h"  // SSMJIT_REQUIRE_NVRTC
#include "kernels_dsl/CompileKernel.h"
#include "runtime/ops/SsdBackwardSpec.h"
#include "ssmjit/ops.h"
#include "tests/support/CompileEach.h"
#include "tests/support/FakeSsdCall.h"
#include "tests/support/GeneratedCuda.h"
#include "tests/support/Occurrences.h"

using namespace ssmjit;
using ssmjit::testing::fakeView;

namespace {

struct Variant : ssmjit::testing::FakeSsdShape {
  bool z = true, states = false, dPerChannel = false, clamp = false, keptY = false;
};

SsdBackwardArgs make(const Variant& v) {
  SsdBackwardArgs b;
  SsdArgs& a = b.forward;
  a = ssmjit::testing::fakeSsdInputs(v);
  const int64_t Bt = v.packed ? 1 : v.batch;
  a.D = v.dPerChannel ? fakeView(7, DType::F32, {v.H, v.P}) : fakeView(7, DType::F32, {v.H});
  if (v.z) a.z = fakeView(8, v.x, {Bt, v.L, v.H, v.P});
  if (v.keptY) a.y = fakeView(25, DType::F32, {Bt, v.L, v.H, v.P});
  a.dt_bias = fakeView(9, DType::F32, {v.H});
  a.dt_softplus = true;
  if (v.clamp) a.dt_min = 0.001f, a.dt_max = 0.5f;
  if (v.states) {
    a.initial_states = fakeView(11, DType::F32, {5, v.H, v.P, v.N});
    a.initial_state_indices = fakeView(12, DType::I32, {v.batch});
    a.final_state_indices = fakeView(13, DType::I64, {v.batch});
    b.dfinal_states = fakeView(14, DType::F32, {5, v.H, v.P, v.N});
    b.dinitial_states = fakeView(15, DType::BF16, {5, v.H, v.P, v.N});
  }
  b.dout = fakeView(16, v.x, {Bt, v.L, v.H, v.P});
  b.dx = fakeView(17, v.x, {Bt, v.L, v.H, v.P});
  b.ddt = fakeView(18, v.x, {Bt, v.L, v.H});
  b.dA = fakeView(19, DType::F32, {v.H});
  b.dB = fakeView(20, v.x, {Bt, v.L, v.G, v.N});
  b.dC = fakeView(21, v.x, {Bt, v.L, v.G, v.N});
  b.dD = v.dPerChannel ? fakeView(22, DType::F32, {v.H, v.P}) : fakeView(22, DType::F32, {v.H});
  if (v.z) b.dz = fakeView(23, v.x, {Bt, v.L, v.H, v.P});
  b.ddt_bias = fakeView(24, DType::F32, {v.H});
  return b;
}

// The forward's four kernels (chunk_state passes the states), then the backward's seven (dstates
// passes the states' gradients).
constexpr size_t kKernels = 11;

void expectCompiles(const Variant& v, const char* arch) {
  ssmjit::testing::expectEachCompiles(detail::ssdBackwardSpecializations(make(v), arch), kKernels);
}

// The generated CUDA of the backward's kernels of the call, by name, with `meta` set where given.
std::map<std::string, std::string> backwardCuda(const Variant& v, const char* meta = nullptr, int64_t value = 0) {
  std::map<std::string, std::string> cuda;
  for (Specialization spec : detail::ssdBackwardSpecializations(make(v), "sm_90a"))
    if (spec.kernel.rfind("ssd_bwd_", 0) == 0) {
      if (meta) spec.set(meta, value);
      cuda[spec.kernel] = ssmjit::testing::generatedCuda(spec);
    }
  return cuda;
}

// The tensor-core products a kernel's code issues: mma.sync calls and wgmma instructions.
int products(const std::string& cuda) {
  return int(ssmjit::testing::occurrences(cuda, "ssm_mma_") + ssmjit::testing::occurrences(cuda, "wgmma.mma_async"));
}

// Whole-tile (16-byte) asynchronous copies from pointer argument `ptr` in generated CUDA.
int wholeCopies(const std::string& cuda, const std::string& ptr) {
  int n = 0;
  for (size_t at = cuda.find("ssm_cp_async_n<16>("); at != std::string::npos;
       at = cuda.find("ssm_cp_async_n<16>(", at + 1))
    n += cuda.compare(cuda.find("? ", at) + 2, ptr.size(), ptr) == 0;
  return n;
}

}  // namespace

TEST(SsdBackwardKernels, MambaHeadsCompile) {
  SSMJIT_REQUIRE_NVRTC();
  for (DType x : {DType::BF16, DType::F32}) {
    Variant v;
    v.x = x;
    expectCompiles(v, "sm_90a");
  }
}

TEST(SsdBackwardKernels, ShapesAndOptionsCompile) {
  SSMJIT_REQUIRE_NVRTC();
  Variant v;
  v.G = 2, v.P = 32, v.N = 64, v.Q = 64, v.x = DType::F32, v.dPerChannel = true, v.z = false, v.clamp = true;
  expectCompiles(v, "sm_90a");
  v = {};
  v.P = 256, v.N = 256, v.H = 4, v.G = 4, v.Q = 128, v.x = DType::F16;
  expectCompiles(v, "sm_80");
}

TEST(SsdBackwardKernels, PackedWithStatesCompile) {
  SSMJIT_REQUIRE_NVRTC();
  Variant v;
  v.packed = true, v.batch = 5, v.states = true;
  expectCompiles(v, "sm_90a");
}

// With the forward's y, the recomputation runs every forward kernel but chunk_scan, and dx reads y
// from it instead of the workspace's plane.
TEST(SsdBackwardKernels, KeptYSkipsTheScanAndDxReadsIt) {
  SSMJIT_REQUIRE_NVRTC();
  Variant v;
  v.keptY = true;
  const std::vector<Specialization> specs = detail::ssdBackwardSpecializations(make(v), "sm_90a");
  for (const Specialization& spec : specs) EXPECT_NE(spec.kernel, "ssd_chunk_scan");
  ssmjit::testing::expectEachCompiles(specs, kKernels - 1);
  const std::string dx = backwardCuda(v)["ssd_bwd_dx"];
  EXPECT_NE(dx.find("p_y + "), std::string::npos);
  v.keptY = false;
  EXPECT_NE(backwardCuda(v)["ssd_bwd_dx"].find("p_y + "), std::string::npos);  // the y plane, bound as y
}

TEST(SsdBackwardKernels, StagedTilesCopyWholeWhereTheBindingsProveThemAligned) {
  SSMJIT_REQUIRE_NVRTC();
  // Mamba-2 heads, bf16: the tiles of dstates, dcb, dx, db and dc through rings, the dots' b read
  // by ldmatrix, or on sm_90a by wgmma where a block's b rows fit a swizzle (the f32 ones dot
  // takes as b as bf16 terms): dstates' C rows of 128 states do not.
  const char* const ringed[] = {"ssd_bwd_dstates", "ssd_bwd_dcb", "ssd_bwd_dx", "ssd_bwd_db", "ssd_bwd_dc"};
  Variant v;
  auto c = backwardCuda(v);
  for (const char* p : {"p_C", "p_dout", "p_z"}) EXPECT_GT(wholeCopies(c["ssd_bwd_dstates"], p), 0) << p;
  for (const char* p : {"p_x", "p_dout", "p_z"}) EXPECT_GT(wholeCopies(c["ssd_bwd_dcb"], p), 0) << p;
  for (const char* p : {"p_ws", "p_dout", "p_z"}) EXPECT_GT(wholeCopies(c["ssd_bwd_dx"], p), 0) << p;
  for (const char* p : {"p_ws", "p_C", "p_x"}) EXPECT_GT(wholeCopies(c["ssd_bwd_db"], p), 0) << p;
  for (const char* p : {"p_ws", "p_B", "p_dout", "p_z"}) EXPECT_GT(wholeCopies(c["ssd_bwd_dc"], p), 0) << p;
  auto readers = [&] {
    EXPECT_NE(c["ssd_bwd_dstates"].find("ssm_ldmatrix_x4<true>(ssm_b"), std::string::npos);
    for (const char* kernel : ringed)
      if (std::string(kernel) != "ssd_bwd_dstates")
        EXPECT_NE(c[kernel].find("wgmma.mma_async"), std::string::npos) << kernel;
  };
  readers();

  v = {};
  v.z = false;  // as the Mamba-2 layer calls it: dy is dout, still through the rings
  c = backwardCuda(v);
  for (const char* kernel : {"ssd_bwd_dstates", "ssd_bwd_dcb", "ssd_bwd_dx", "ssd_bwd_dc"}) {
    EXPECT_GT(wholeCopies(c[kernel], "p_dout"), 0) << kernel;
    EXPECT_EQ(c[kernel].find("p_z"), std::string::npos) << kernel;
  }
  readers();

  auto staged = [&](const Variant& w, const char* meta = nullptr) {
    c = backwardCuda(w, meta, 0);
    for (const char* kernel : ringed) EXPECT_EQ(c[kernel].find("ssm_cp_async_n<"), std::string::npos) << kernel;
  };
  v.P = 33, v.H = 3;  // rows of 33 halves: unproven, staged through f32
  staged(v);
  v = {};
  v.x = DType::F32;
  staged(v);
  staged(Variant{}, "meta:tile_copy");
}

TEST(SsdBackwardKernels, PiecesMetaSetsTheSplitOfF32Operands) {
  SSMJIT_REQUIRE_NVRTC();
  Variant v;  // bf16: dcb's dy takes `pieces` terms, x one
  const int three = products(backwardCuda(v, "meta:pieces", 3)["ssd_bwd_dcb"]);
  EXPECT_EQ(products(backwardCuda(v, "meta:pieces", 2)["ssd_bwd_dcb"]) * 3, three * 2);
  EXPECT_EQ(products(backwardCuda(v, "meta:pieces", 1)["ssd_bwd_dcb"]) * 3, three);
  for (int64_t bad : {0, 4}) {
    try {
      backwardCuda(v, "meta:pieces", bad);
      ADD_FAILURE() << "pieces " << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(
          std::string(e.what()).find("meta pieces (SSMJIT_META) is " + std::to_string(bad) + ", expected 1, 2 or 3"),
          std::string::npos)
          << e.what();
    }
  }
}

// dx's and dCB's scores take their decays through the hardware's exp2 (ssdDecay), as the
// forward's do: dCB calls no expf; dx one, for the state's column factor outside its loops.
TEST(SsdBackwardKernels, ScoreDecaysTakeTheHardwareExp2) {
  Variant v;
  v.keptY = true;
  for (const Specialization& spec : detail::ssdBackwardSpecializations(make(v), "sm_90a"))
    if (spec.kernel == "ssd_bwd_dx" || spec.kernel == "ssd_bwd_dcb") {
      const std::string ir = ssmjit::testing::generatedIr(spec);
      EXPECT_GE(ssmjit::testing::occurrences(ir, "math.exp2 "), 1) << spec.kernel;
      EXPECT_EQ(ssmjit::testing::occurrences(ir, "math.exp "), spec.kernel == "ssd_bwd_dx" ? 1 : 0) << spec.kernel;
    }
}

// dB's states part scales each head's sum by its rows' dt' exp(cum_last - cum_r) instead of x, so
// bf16 x meets g's three terms as it is (three products a step, not six); dC's exp(cum_r) the same
// where dy is exact in one term (bf16 dout, no z). With z, dC's dy takes three terms either way.
TEST(SsdBackwardKernels, DbAndDcScaleEachHeadsSumWhereTheOperandIsExact) {
  SSMJIT_REQUIRE_NVRTC();
  Variant v;
  v.keptY = true;
  auto withZ = backwardCuda(v);
  v.z = false;
  auto noZ = backwardCuda(v);
  EXPECT_GT(products(withZ["ssd_bwd_db"]), 0);
  EXPECT_EQ(products(withZ["ssd_bwd_db"]), products(noZ["ssd_bwd_db"]));
  EXPECT_EQ(products(noZ["ssd_bwd_dc"]), products(noZ["ssd_bwd_db"]));
  EXPECT_LT(products(withZ["ssd_bwd_db"]), products(withZ["ssd_bwd_dc"]));
}

// Without d(final states) a sequence's last chunk leaves a zero g, and without initial states its
// first chunk enters from zeros: dx's and dB's state parts, and dC's, then look up the next or the
// previous slot's chunk to skip. With both given nothing is skipped and no neighbour is read.
TEST(SsdBackwardKernels, StatePartsSkipWhereTheStatesAreZero) {
  SSMJIT_REQUIRE_NVRTC();
  Variant v;
  v.packed = true, v.batch = 3;
  auto none = backwardCuda(v);
  v.states = true;
  auto given = backwardCuda(v);
  auto tableReads = [](const std::string& cuda) { return ssmjit::testing::occurrences(cuda, "ssm_load(p_chunks"); };
  for (const char* kernel : {"ssd_bwd_dx", "ssd_bwd_db", "ssd_bwd_dc"})
    EXPECT_GT(tableReads(none[kernel]), tableReads(given[kernel])) << kernel;
  EXPECT_EQ(tableReads(none["ssd_bwd_dcb"]), tableReads(given["ssd_bwd_dcb"]));
}
