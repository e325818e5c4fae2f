// lookupOrCompileKernels, which compiles a call's missing kernels at once: lookups in the list's
// order, equal specialisations compiled once, the first failing one's error in list order
// whatever the timing, nothing stored for a failure, and errors past `required` left unthrown.
// Each check runs in a fresh child process (empty process caches) over a scratch disk cache.
#include <gtest/gtest.h>

#include <sched.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "cache/KernelCache.h"
#include "compiler/Nvrtc.h"
#include "ssmjit/error.h"
#include "tests/CacheTestUtil.h"

using namespace ssmjit;
using cachetest::inChild;
using cachetest::ScratchDir;
using cachetest::smallSpec;

namespace {

class ParallelCompile : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!nvrtcAvailable(&why)) GTEST_SKIP() << "NVRTC not loadable: " << why;
    ::setenv("SSMJIT_CACHE_DIR", dir_.path().c_str(), 1);
  }
  void TearDown() override { ::unsetenv("SSMJIT_CACHE_DIR"); }
  ScratchDir dir_;
};

// A specialisation that fails at once (no such kernel) and names `name` in its error.
Specialization unknownKernel(const std::string& name) {
  Specialization s = smallSpec(0);
  s.kernel = name;
  return s;
}

// A real kernel for an arch NVRTC rejects: fails only after the DSL and the pipeline have run.
Specialization badArch() { return smallSpec(1, "sm_1"); }

// The error message lookupOrCompileKernels throws for `specs` ("" when none).
std::string errorOf(const std::vector<Specialization>& specs, int threads) {
  try {
    lookupOrCompileKernels(specs, threads);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST_F(ParallelCompile, LookupsComeInListOrderAndEqualSpecsCompileOnce) {
  ASSERT_EQ(inChild([] {
              const std::vector<Specialization> specs{smallSpec(0), smallSpec(1), smallSpec(0), smallSpec(2)};
              const std::vector<KernelLookup> r = lookupOrCompileKernels(specs, 3);
              CHILD_CHECK(r.size() == 4, "%zu lookups", r.size());
              for (size_t i : {0, 1, 3})
                CHILD_CHECK(r[i].kernel && r[i].source == KernelSource::Compiled, "lookup %zu: %s", i,
                            kernelSourceName(r[i].source));
              CHILD_CHECK(r[2].kernel == r[0].kernel && r[2].source == KernelSource::Memory, "the copy: %s",
                          kernelSourceName(r[2].source));
              CHILD_CHECK(r[0].kernel->cubin != r[1].kernel->cubin && r[1].kernel->cubin != r[3].kernel->cubin,
                          "lookups out of order");
              for (const Specialization& s : specs) CHILD_CHECK(kernelKnown(s), "a compiled kernel is not known");
              // Again: every one from memory, none compiled twice.
              for (const KernelLookup& l : lookupOrCompileKernels(specs, 3))
                CHILD_CHECK(l.source == KernelSource::Memory, "second batch: %s", kernelSourceName(l.source));
              return 0;
            }),
            0);
  EXPECT_EQ(dir_.files().size(), 3u);  // one entry per distinct kernel
}

TEST_F(ParallelCompile, ThrowsTheFirstFailingSpecInListOrderWhateverFinishesFirst) {
  ASSERT_EQ(inChild([] {
              // The slow failure (after the pipeline) comes first in the list, the instant one
              // after it: the slow one's error, every time.
              for (int round = 0; round < 3; ++round) {
                const std::string e = errorOf({badArch(), unknownKernel("no_such_kernel_b")}, 2);
                CHILD_CHECK(e.find("sm_1") != std::string::npos && e.find("no_such_kernel") == std::string::npos,
                            "round %d: %s", round, e.c_str());
              }
              const std::string e = errorOf(
                  {smallSpec(0), unknownKernel("no_such_kernel_b"), smallSpec(1), unknownKernel("no_such_kernel_a")},
                  4);
              CHILD_CHECK(e.find("'no_such_kernel_b'") != std::string::npos, "%s", e.c_str());
              CHILD_CHECK(!kernelKnown(unknownKernel("no_such_kernel_b")), "a failure stays known");
              // A good kernel before the failure was compiled in full.
              CHILD_CHECK(kernelKnown(smallSpec(0)), "the kernel before the failure is not known");
              return 0;
            }),
            0);
  for (const std::string& f : dir_.files()) EXPECT_NE(f.rfind(".tmp-", 0), 0u) << "a half-written entry: " << f;
}

TEST_F(ParallelCompile, ErrorsPastRequiredAreLeftToTheLaterCall) {
  ASSERT_EQ(inChild([] {
              const std::vector<KernelLookup> r =
                  lookupOrCompileKernels({smallSpec(0), unknownKernel("no_such_kernel_c")}, 2, 1);
              CHILD_CHECK(r[0].kernel != nullptr, "the required kernel is missing");
              CHILD_CHECK(r[1].kernel == nullptr, "the failed kernel has a lookup");
              // The later call reports it itself.
              const std::string e = errorOf({unknownKernel("no_such_kernel_c")}, 1);
              CHILD_CHECK(e.find("'no_such_kernel_c'") != std::string::npos, "%s", e.c_str());
              // A required failure is thrown.
              CHILD_CHECK(!errorOf({unknownKernel("no_such_kernel_d"), smallSpec(0)}, 2).empty(), "not thrown");
              return 0;
            }),
            0);
}

TEST_F(ParallelCompile, ThreadsDefaultToTheCoresThisProcessMayUse) {
  EXPECT_GE(compileThreads(), 1);
  cpu_set_t set;
  ASSERT_EQ(::sched_getaffinity(0, sizeof(set), &set), 0);
  EXPECT_EQ(compileThreads(), CPU_COUNT(&set));
}

}  // namespace
