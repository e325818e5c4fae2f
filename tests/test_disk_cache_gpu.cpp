// Damaged disk-cache entries on the GPU: the op finds a flipped, truncated, empty or
// foreign-version blob for its kernel, recompiles, replaces the entry and launches correctly; an
// intact entry written by another process launches correctly straight from the disk.
// Each test needs a fresh process (the disk cache is configured once per process): CTest runs
// every test in its own; a run of the whole binary skips the ones that come after the first.
#include <gtest/gtest.h>

#include <fstream>

#include "cache/Blob.h"
#include "cache/CacheKey.h"
#include "cache/KernelCache.h"
#include "kernels_dsl/CompileKernel.h"
#include "tests/CacheTestUtil.h"
#include "tests/GpuTest.h"
#include "tests/SsuTestUtil.h"

using namespace ssmjit;
using namespace ssutest;

namespace {

struct Damage {
  const char* name;
  std::vector<char> (*apply)(std::vector<char>);
};

const Damage kDamages[] = {
    {"intact", [](std::vector<char> b) { return b; }},
    {"flipped_byte",
     [](std::vector<char> b) {
       b[b.size() / 3] ^= 0x01;
       return b;
     }},
    {"truncated",
     [](std::vector<char> b) {
       b.resize(b.size() - 7);
       return b;
     }},
    {"empty", [](std::vector<char>) { return std::vector<char>{}; }},
    {"foreign_version",
     [](std::vector<char> b) {
       b[8] = static_cast<char>(cache::kBlobFormatVersion + 7);
       return b;
     }},
};

void PrintTo(const Damage& d, std::ostream* os) { *os << d.name; }

class DiskCacheGpu : public ::testing::TestWithParam<Damage> {
 protected:
  void SetUp() override { SSMJIT_REQUIRE_GPU(); }
};

TEST_P(DiskCacheGpu, EntryOnDiskLaunchesCorrectlyOrIsRecompiled) {
  const Damage& damage = GetParam();
  cachetest::ScratchDir dir;
  ::setenv("SSMJIT_CACHE_DIR", dir.path().c_str(), 1);
  if (processDiskCache().config().dir != dir.path())
    GTEST_SKIP() << "the disk cache of this process was configured by an earlier test; run this test alone "
                    "(ctest does) to check it";
  SsuCase c = mamba2Heads(4, 16, 32, 2);
  c.batch = 3;
  c.L = 3;
  c.stateIdx = true;
  const SsuProblem p = makeProblem(c);
  SsuProblem ref = p;
  runReference(ref);
  DeviceProblem dp(p);

  // The entry the op will look for, written as another process would have (then damaged).
  const Specialization spec = detail::ssuSpecialization(dp.args, true, driver::currentArch());
  const cache::CacheKey key = cache::cacheKeyFor(spec);
  const std::vector<char> blob = damage.apply(cache::encodeBlob(key.text, compileKernel(spec)));
  {
    std::ofstream f(processDiskCache().pathFor(key), std::ios::binary);
    f.write(blob.data(), static_cast<std::streamsize>(blob.size()));
  }
  const KernelLookup first = lookupOrCompileKernel(spec);
  EXPECT_STREQ(kernelSourceName(first.source), std::string(damage.name) == "intact" ? "disk" : "compiled");

  ssmjit::checkDeviceErrors();
  runOp(true, dp.args);
  ASSERT_NO_THROW(ssmjit::checkDeviceErrors());
  expectMatches(p, ref, dp.download(kOut), dp.download(kState), rowsWritten(p), p.slotMayBeWritten);

  // Whatever was there, a whole entry is there now.
  const auto entries = processDiskCache().list();
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].status, cache::BlobStatus::Ok) << entries[0].detail;
}

INSTANTIATE_TEST_SUITE_P(Damages, DiskCacheGpu, ::testing::ValuesIn(kDamages),
                         [](const ::testing::TestParamInfo<Damage>& i) { return std::string(i.param.name); });

}  // namespace
