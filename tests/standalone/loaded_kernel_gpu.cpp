// The loader and launcher (runtime/LoadedKernel) against a fake compiler. This file defines
// ssmjit::lookupOrCompileKernel itself, so it is its own executable built from Specialization, Nvrtc,
// Driver, LoadedKernel, DeviceBuffer and CudaGraph sources only -- never linked with libssmjit or
// the cache, and kept out of tests/test_*.cpp so the suites' glob does not pick it up (its fake
// would replace the real compiler for every op test in that binary). Run it twice in CTest:
// plain, and with SSMJIT_FORCE_PTX=1 (the PTX fallback path).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "../GpuTest.h"
#include "cache/KernelCache.h"
#include "kernels_dsl/ssu/SelectiveStateUpdate.h"
#include "runtime/LoadedKernel.h"
#include "ssmjit/error.h"

namespace {
std::atomic<int> gCompiles{0};

// Writes its arguments, launch shape, the bound constant SCALE and the dynamic shared memory it
// was launched with (its last byte written and read back) back, so the test sees exactly what
// the launcher packed.
const char* kProbeSource = R"(
extern "C" __global__ void probe(long long* out, int a, long long b, float c, long long* err) {
  extern __shared__ unsigned char dyn[];
  if (threadIdx.x == 0 && blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0) {
    out[0] = a; out[1] = b; out[2] = __float_as_int(c); out[3] = blockDim.x;
    out[4] = gridDim.x; out[5] = gridDim.y; out[6] = gridDim.z; out[7] = SCALE;
    out[8] = (long long)err;
    unsigned d;
    asm volatile("mov.u32 %0, %%dynamic_smem_size;" : "=r"(d));
    out[9] = d;
    if (d) {
      dyn[d - 1] = 7;
      out[10] = ((volatile unsigned char*)dyn)[d - 1];
    }
  }
}
)";
}  // namespace

namespace ssmjit {
// The fake compiler: "scale" is bound into the source, "meta:threads" picks the block size, a
// non-zero "bogus" adds a parameter the schema lacks.
KernelLookup lookupOrCompileKernel(const Specialization& spec) {
  ++gCompiles;
  auto ck = std::make_shared<CompiledKernel>();
  ck->entry = "probe";
  ck->numThreads = static_cast<int>(spec.get("meta:threads", 64));
  ck->dynamicSharedBytes = static_cast<int>(spec.get("meta:dynamic_shared", 0));
  using K = KernelParam::Kind;
  ck->params = {{"out", K::Ptr}, {"a", K::I32}, {"b", K::I64}, {"c", K::F32}, {"err", K::Ptr}};
  if (spec.get("bogus", 0)) ck->params.push_back({"bogus", K::I32});
  ck->cudaSource = "#define SCALE " + std::to_string(spec.get("scale")) + "LL\n" + kProbeSource;
  NvrtcResult r = nvrtcCompile(ck->cudaSource, "probe.cu", spec.arch, {});
  ck->ptx = std::move(r.ptx);
  ck->cubin = std::move(r.cubin);
  ck->arch = spec.arch;
  ck->compileLog = std::move(r.log);
  ck->resources = r.resources;
  return {ck, KernelSource::Compiled};
}
}  // namespace ssmjit

namespace {

using ssmjit::ArgValue;
using ssmjit::DeviceBuffer;

// Op argument order differs from the kernel's parameter order on purpose; "unused" is bound away.
const char* const kNames[] = {"c", "out", "b", "unused", "a", "err"};
const ssmjit::ArgSchema kSchema{kNames, 6};

// The probe's arguments, in the op order of kNames.
std::array<ArgValue, 6> probeArgs(float c, void* out, int64_t b, int64_t unused, int64_t a, void* err) {
  std::array<ArgValue, 6> v;
  v[0].f32 = c;
  v[1].ptr = out;
  v[2].i64 = b;
  v[3].i64 = unused;
  v[4].i64 = a;
  v[5].ptr = err;
  return v;
}

ssmjit::Specialization probeSpec(int64_t scale) {
  ssmjit::Specialization s;
  s.kernel = "probe";
  s.arch = ssmjit::driver::currentArch();
  // A realistically large key: every selective_state_update parameter name.
  const auto& names = ssmjit::dsl::parameters(ssmjit::kernels::kSsu).names;
  for (size_t i = 0; i < names.size(); ++i) s.set(names[i], static_cast<int64_t>(i));
  s.set("scale", scale);
  return s;
}

bool forcePtxEnv() {
  const char* v = std::getenv("SSMJIT_FORCE_PTX");
  return v && std::strcmp(v, "1") == 0;
}

class LoadedKernelTest : public ssmjit::testing::GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped()) return;
    SSMJIT_REQUIRE_NVRTC();
  }
};

TEST_F(LoadedKernelTest, PacksEveryKindByNameAndLaunchesTheGrid) {
  DeviceBuffer out(16 * sizeof(int64_t));
  out.fill(0xFF);
  DeviceBuffer err(32);
  const ssmjit::LoadedKernel& k = ssmjit::loadedKernel(probeSpec(41), kSchema);
  EXPECT_EQ(k.loadedFromPtx, forcePtxEnv());
  ASSERT_EQ(k.paramToArg.size(), 5u);
  EXPECT_EQ(k.paramToArg[0], 1);  // out
  EXPECT_EQ(k.paramToArg[1], 4);  // a
  EXPECT_EQ(k.paramToArg[2], 2);  // b
  EXPECT_EQ(k.paramToArg[3], 0);  // c
  EXPECT_EQ(k.paramToArg[4], 5);  // err

  // b needs all 64 bits.
  const std::array<ArgValue, 6> v = probeArgs(2.5f, out.data(), (int64_t(1) << 40) + 3, 12345, -7, err.data());
  unsigned grid[3] = {3, 2, 5};
  ssmjit::launchKernel(k, v.data(), grid, nullptr);
  std::vector<int64_t> got = out.download<int64_t>();
  EXPECT_EQ(got[0], -7);
  EXPECT_EQ(got[1], (int64_t(1) << 40) + 3);
  float c;
  int32_t bits = static_cast<int32_t>(got[2]);
  std::memcpy(&c, &bits, 4);
  EXPECT_EQ(c, 2.5f);
  EXPECT_EQ(got[3], 64);
  EXPECT_EQ(got[4], 3);
  EXPECT_EQ(got[5], 2);
  EXPECT_EQ(got[6], 5);
  EXPECT_EQ(got[7], 41);
  EXPECT_EQ(static_cast<uint64_t>(got[8]), static_cast<uint64_t>(err.ptr()));
}

TEST_F(LoadedKernelTest, HitsDoNotRecompileAndDistinctSpecsDoNot) {
  int before = gCompiles.load();
  const ssmjit::LoadedKernel& a = ssmjit::loadedKernel(probeSpec(7), kSchema);
  const ssmjit::LoadedKernel& b = ssmjit::loadedKernel(probeSpec(7), kSchema);
  EXPECT_EQ(&a, &b);
  EXPECT_EQ(gCompiles.load(), before + 1);
  const ssmjit::LoadedKernel& c = ssmjit::loadedKernel(probeSpec(8), kSchema);
  EXPECT_NE(&a, &c);
  EXPECT_EQ(gCompiles.load(), before + 2);
  // More distinct keys than the thread-local slots: still hits, from the shared table.
  for (int round = 0; round < 2; ++round)
    for (int s = 100; s < 110; ++s) ssmjit::loadedKernel(probeSpec(s), kSchema);
  EXPECT_EQ(gCompiles.load(), before + 2 + 10);
}

TEST_F(LoadedKernelTest, ConcurrentMissesAgreeOnOneKernel) {
  const ssmjit::LoadedKernel* seen[8] = {};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] { seen[t] = &ssmjit::loadedKernel(probeSpec(555), kSchema); });
  for (auto& th : threads) th.join();
  for (int t = 1; t < 8; ++t) EXPECT_EQ(seen[t], seen[0]);
}

TEST_F(LoadedKernelTest, MissingParameterNameIsAnInternalErrorNamingIt) {
  ssmjit::Specialization s = probeSpec(1);
  s.set("bogus", 1);
  try {
    ssmjit::loadedKernel(s, kSchema);
    FAIL();
  } catch (const ssmjit::Error& e) {
    EXPECT_EQ(e.kind(), ssmjit::Error::Kind::Internal);
    EXPECT_NE(std::string(e.what()).find("'bogus'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("probe"), std::string::npos) << e.what();
  }
}

TEST_F(LoadedKernelTest, Int32OverflowIsRefusedAndEmptyGridIsANoop) {
  const ssmjit::LoadedKernel& k = ssmjit::loadedKernel(probeSpec(2), kSchema);
  DeviceBuffer out(16 * sizeof(int64_t));
  const std::array<ArgValue, 6> v = probeArgs(0, out.data(), 0, 0, int64_t(1) << 31, nullptr);  // "a" is int32
  unsigned grid[3] = {1, 1, 1};
  try {
    ssmjit::launchKernel(k, v.data(), grid, nullptr);
    FAIL();
  } catch (const ssmjit::Error& e) {
    EXPECT_NE(std::string(e.what()).find("'a'"), std::string::npos) << e.what();
  }
  unsigned empty[3] = {0, 1, 1};
  EXPECT_NO_THROW(ssmjit::launchKernel(k, v.data(), empty, nullptr));
}

// Beyond the default 48 KiB the launcher raises the function's limit once, at load, and passes
// the bytes at every launch; beyond what the device allows a block, loading names the kernel.
TEST_F(LoadedKernelTest, DynamicSharedMemoryBeyond48KiBIsAllowedAndPassed) {
  for (int bytes : {1000, 100 * 1024}) {
    SCOPED_TRACE(bytes);
    ssmjit::Specialization s = probeSpec(4);
    s.set("meta:dynamic_shared", bytes);
    const ssmjit::LoadedKernel& k = ssmjit::loadedKernel(s, kSchema);
    DeviceBuffer out(16 * sizeof(int64_t));
    out.fill(0);
    const std::array<ArgValue, 6> v = probeArgs(0, out.data(), 0, 0, 0, nullptr);
    unsigned grid[3] = {2, 1, 1};
    for (int launch = 0; launch < 2; ++launch) ssmjit::launchKernel(k, v.data(), grid, nullptr);
    std::vector<int64_t> got = out.download<int64_t>();
    EXPECT_EQ(got[9], bytes);
    EXPECT_EQ(got[10], 7);
  }
  ssmjit::Specialization s = probeSpec(5);
  s.set("meta:dynamic_shared", 1 << 20);
  try {
    ssmjit::loadedKernel(s, kSchema);
    FAIL() << "1 MiB of dynamic shared memory was accepted";
  } catch (const ssmjit::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("kernel probe asks for 1048576 bytes of dynamic shared memory"), std::string::npos) << what;
    EXPECT_NE(what.find("the device allows a block"), std::string::npos) << what;
  }
}

TEST_F(LoadedKernelTest, CachedCallHostTime) {
  ssmjit::Specialization s = probeSpec(3);
  const ssmjit::LoadedKernel& k = ssmjit::loadedKernel(s, kSchema);
  DeviceBuffer out(16 * sizeof(int64_t));
  const std::array<ArgValue, 6> v = probeArgs(1, out.data(), 1, 0, 1, nullptr);
  unsigned grid[3] = {1, 1, 1};
  ssmjit::OwnedStream stream;
  using Clock = std::chrono::steady_clock;
  const int n = 20000;
  auto t0 = Clock::now();
  for (int i = 0; i < n; ++i) ssmjit::loadedKernel(s, kSchema);
  auto t1 = Clock::now();
  for (int i = 0; i < n; ++i) ssmjit::launchKernel(ssmjit::loadedKernel(s, kSchema), v.data(), grid, stream);
  auto t2 = Clock::now();
  stream.synchronize();
  double lookupUs = std::chrono::duration<double, std::micro>(t1 - t0).count() / n;
  double callUs = std::chrono::duration<double, std::micro>(t2 - t1).count() / n;
  std::printf("cached lookup %.3f us, lookup + cuLaunchKernel %.3f us (key of %zu bindings)\n", lookupUs, callUs,
              s.values.size());
  EXPECT_LT(lookupUs, 5.0);
  EXPECT_EQ(&ssmjit::loadedKernel(s, kSchema), &k);
}

}  // namespace
