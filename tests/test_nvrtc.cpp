// NVRTC through dlopen: compiles on the CPU (no GPU needed) to CUBIN and PTX, with in-memory
// headers, resource figures from the CUBIN (and ptxas' report), and compile errors carrying the log.
#include <gtest/gtest.h>

#include <string>

#include "GpuTest.h"  // SSMJIT_REQUIRE_NVRTC
#include "compiler/Nvrtc.h"
#include "ssmjit/error.h"

namespace {

const char* kHeader = R"(
#pragma once
__device__ inline float sj_square(float a) { return a * a; }
)";

const char* kSource = R"(#include "sj_tiny.cuh"
extern "C" __global__ void sj_tiny(float* out, const float* in, int n) {
  __shared__ float tile[128];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  tile[threadIdx.x] = i < n ? in[i] : 0.0f;
  __syncthreads();
  if (i < n) out[i] = sj_square(tile[(threadIdx.x + 1) % blockDim.x]);
}
)";

}  // namespace

TEST(Nvrtc, Version) {
  SSMJIT_REQUIRE_NVRTC();
  std::string v = ssmjit::nvrtcVersion();
  ASSERT_NE(v.find('.'), std::string::npos) << v;
  EXPECT_GE(std::stoi(v), 11) << v;
}

TEST(Nvrtc, CompilesToCubinAndPtxWithInMemoryHeader) {
  SSMJIT_REQUIRE_NVRTC();
  for (const char* arch : {"sm_90a", "sm_80"}) {
    SCOPED_TRACE(arch);
    ssmjit::NvrtcResult r = ssmjit::nvrtcCompile(kSource, "sj_tiny.cu", arch, {{"sj_tiny.cuh", kHeader}});
    EXPECT_FALSE(r.cubin.empty());
    // ELF magic: a real CUBIN, not PTX text.
    ASSERT_GE(r.cubin.size(), 4u);
    EXPECT_EQ(r.cubin[0], 0x7f);
    EXPECT_EQ(r.cubin[1], 'E');
    EXPECT_NE(r.ptx.find(".entry sj_tiny"), std::string::npos) << r.ptx.substr(0, 400);
    EXPECT_NE(r.ptx.find(std::string(".target ") + arch), std::string::npos) << r.ptx.substr(0, 400);
    EXPECT_GT(r.resources.registers, 0) << r.log;
    EXPECT_EQ(r.resources.sharedBytes, 128 * 4) << r.log;
    EXPECT_EQ(r.resources.spillStoreBytes, 0) << r.log;
    EXPECT_EQ(r.resources.spillLoadBytes, 0) << r.log;
    EXPECT_GE(r.resources.localBytes, 0) << r.log;
    // ptxas' report is in the log unless the driver's compute cache served the compile (a second
    // run on a machine with a driver); the figures above do not depend on it.
  }
}

TEST(Nvrtc, ComputeTargetGivesPtxOnly) {
  SSMJIT_REQUIRE_NVRTC();
  ssmjit::NvrtcResult r = ssmjit::nvrtcCompile(kSource, "sj_tiny.cu", "compute_90", {{"sj_tiny.cuh", kHeader}});
  EXPECT_TRUE(r.cubin.empty());
  EXPECT_NE(r.ptx.find(".entry sj_tiny"), std::string::npos);
  EXPECT_EQ(r.resources.registers, -1);  // ptxas did not run
}

TEST(Nvrtc, SyntaxErrorThrowsCompileErrorWithLogAndSource) {
  SSMJIT_REQUIRE_NVRTC();
  const char* bad = "extern \"C\" __global__ void broken(float* p) {\n  p[0] = undefined_name;\n}\n";
  try {
    ssmjit::nvrtcCompile(bad, "broken.cu", "sm_90a", {});
    FAIL() << "expected a compile error";
  } catch (const ssmjit::Error& e) {
    std::string msg = e.what();
    EXPECT_EQ(e.kind(), ssmjit::Error::Kind::Compile);
    EXPECT_NE(msg.find("broken.cu"), std::string::npos) << msg;
    EXPECT_NE(msg.find("sm_90a"), std::string::npos) << msg;
    EXPECT_NE(msg.find("undefined_name"), std::string::npos) << msg;                    // from NVRTC's log
    EXPECT_NE(msg.find("is undefined"), std::string::npos) << msg;                      // NVRTC's diagnosis
    EXPECT_NE(msg.find("    2 |   p[0] = undefined_name;"), std::string::npos) << msg;  // numbered source
  }
}

TEST(Nvrtc, MissingHeaderIsACompileError) {
  SSMJIT_REQUIRE_NVRTC();
  EXPECT_THROW(ssmjit::nvrtcCompile(kSource, "sj_tiny.cu", "sm_90a", {}), ssmjit::Error);
}

TEST(Nvrtc, BadArchIsRejected) {
  SSMJIT_REQUIRE_NVRTC();
  EXPECT_THROW(ssmjit::nvrtcCompile(kSource, "sj_tiny.cu", "gfx90a", {{"sj_tiny.cuh", kHeader}}), ssmjit::Error);
}

TEST(Nvrtc, AvailableNeverThrows) {
  std::string why;
  bool ok = false;
  EXPECT_NO_THROW(ok = ssmjit::nvrtcAvailable(&why));
  if (!ok) {
    EXPECT_FALSE(why.empty());
  }
  EXPECT_NO_THROW(ssmjit::nvrtcAvailable(nullptr));
}

TEST(PtxasResources, ParsesEntriesOnlyAndTakesTheMaximum) {
  const char* log =
      "ptxas info    : 0 bytes gmem\n"
      "ptxas info    : Function properties for helper\n"
      "ptxas         .     64 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Compiling entry function 'a' for 'sm_90a'\n"
      "ptxas info    : Function properties for a\n"
      "ptxas         .     8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads\n"
      "ptxas info    : Used 40 registers, used 1 barriers, 1024 bytes smem\n"
      "ptxas info    : Compiling entry function 'b' for 'sm_90a'\n"
      "ptxas info    : Function properties for b\n"
      "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 72 registers, 364 bytes cmem[0]\n";
  ssmjit::ResourceUsage r = ssmjit::parsePtxasResources(log);
  EXPECT_EQ(r.registers, 72);
  EXPECT_EQ(r.sharedBytes, 1024);
  EXPECT_EQ(r.localBytes, 8);  // the non-entry helper's 64 does not count
  EXPECT_EQ(r.spillStoreBytes, 4);
  EXPECT_EQ(r.spillLoadBytes, 12);

  ssmjit::ResourceUsage none = ssmjit::parsePtxasResources("");
  EXPECT_EQ(none.registers, -1);
  EXPECT_EQ(none.sharedBytes, -1);
}

TEST(PtxasResources, CumulativeStackIncludesCallees) {
  // An entry with out-of-line callees: its own frame is 40 bytes, its call tree needs 272 (the
  // figure the CUBIN records, EIATTR_MIN_STACK_SIZE).
  const char* log =
      "ptxas info    : Compiling entry function 'k_ind' for 'sm_90a'\n"
      "ptxas info    : Function properties for k_ind\n"
      "ptxas         .     40 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 26 registers, used 0 barriers, 272 bytes cumulative stack size\n"
      "ptxas info    : Function properties for _Z2f1PKfi\n"
      "ptxas         .     232 bytes stack frame, 28 bytes spill stores, 28 bytes spill loads\n";
  ssmjit::ResourceUsage r = ssmjit::parsePtxasResources(log);
  EXPECT_EQ(r.registers, 26);
  EXPECT_EQ(r.localBytes, 272);
  EXPECT_EQ(r.spillStoreBytes, 0);  // entries only
  EXPECT_EQ(r.sharedBytes, 0);
}

TEST(Nvrtc, ResourcesComeFromTheCubinNotTheLog) {
  SSMJIT_REQUIRE_NVRTC();
  for (const char* arch : {"sm_90a", "sm_80"}) {
    SCOPED_TRACE(arch);
    ssmjit::NvrtcResult r = ssmjit::nvrtcCompile(kSource, "sj_tiny.cu", arch, {{"sj_tiny.cuh", kHeader}});
    // What nvrtcCompile computes when the driver's compute cache left ptxas' report out of the log.
    ssmjit::ResourceUsage noReport = ssmjit::kernelResources(r.cubin, "", r.ptx);
    EXPECT_GT(noReport.registers, 0);
    EXPECT_EQ(noReport.registers, r.resources.registers);
    EXPECT_EQ(noReport.sharedBytes, 128 * 4);
    EXPECT_EQ(noReport.localBytes, 0);
    EXPECT_EQ(noReport.spillStoreBytes, 0);  // no stack: no spills
    EXPECT_EQ(noReport.spillLoadBytes, 0);
    // A blob that is not a CUBIN: the log's figures, and nothing invented.
    ssmjit::ResourceUsage garbage = ssmjit::kernelResources(std::vector<char>(100, 'x'), r.log, r.ptx);
    EXPECT_EQ(garbage.registers, ssmjit::parsePtxasResources(r.log).registers);
    ssmjit::ResourceUsage nothing = ssmjit::kernelResources({}, "", r.ptx);
    EXPECT_EQ(nothing.registers, -1);
    EXPECT_EQ(nothing.spillStoreBytes, -1);
  }
}
