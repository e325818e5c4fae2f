// The disk kernel cache: configuration, atomic one-blob entries, damaged entries as misses that
// get replaced, LRU eviction, read-only and unwritable directories, a size limit hit mid-write,
// the cache key, and the process-level path (a second process loads without compiling,
// SSMJIT_ALWAYS_COMPILE, SSMJIT_RECORD).
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>

#include "cache/Blob.h"
#include "cache/CacheKey.h"
#include "cache/DiskCache.h"
#include "cache/KernelCache.h"
#include "cache/Manifest.h"
#include "compiler/Hash.h"
#include "compiler/Nvrtc.h"
#include "tests/CacheTestUtil.h"

using namespace ssmjit;
using namespace ssmjit::cache;
using cachetest::inChild;
using cachetest::ScratchDir;
using cachetest::smallSpec;
using ::testing::HasSubstr;

namespace {

// Sets an environment variable for the scope of a test, restoring the old value after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    if (value)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_)
      ::setenv(name_.c_str(), old_.c_str(), 1);
    else
      ::unsetenv(name_.c_str());
  }

 private:
  std::string name_, old_;
  bool had_ = false;
};

// A compiled-kernel-shaped value (no compiler involved) and a key for it.
CompiledKernel fakeKernel(size_t cubinBytes, int seed) {
  CompiledKernel k;
  k.entry = "sj_kernel_" + std::to_string(seed);
  k.params = {{"state", KernelParam::Kind::Ptr}, {"batch", KernelParam::Kind::I32}};
  k.numThreads = 128;
  k.arch = "sm_90a";
  k.ptx = ".version 9.0\n// fake " + std::to_string(seed) + "\n";
  k.cubin.resize(cubinBytes);
  for (size_t i = 0; i < cubinBytes; ++i) k.cubin[i] = static_cast<char>((i * 131 + seed) & 0xff);
  k.resources.registers = 40;
  return k;
}

CacheKey fakeKey(int seed) {
  CacheKey key;
  key.text = "ssmjit-kernel-cache-key 1\nkernel=fake\narch=sm_90a\nspec=fake;sm_90a;n=" + std::to_string(seed) + "\n";
  key.fileStem = hash::hex(key.text, 128);
  return key;
}

void writeBytes(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::vector<char> readBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(f), {});
}

void setMtime(const std::string& path, int64_t secondsAgo) {
  struct timespec ts[2];
  ts[0].tv_sec = ts[1].tv_sec = std::time(nullptr) - secondsAgo;
  ts[0].tv_nsec = ts[1].tv_nsec = 0;
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), ts, 0), 0) << path;
}

bool sameKernel(const CompiledKernel& a, const CompiledKernel& b) {
  if (a.entry != b.entry || a.numThreads != b.numThreads || a.arch != b.arch || a.ptx != b.ptx || a.cubin != b.cubin ||
      a.params.size() != b.params.size())
    return false;
  for (size_t i = 0; i < a.params.size(); ++i)
    if (a.params[i].name != b.params[i].name || a.params[i].kind != b.params[i].kind) return false;
  return a.resources.registers == b.resources.registers;
}

// The ways a blob on disk can be damaged.
std::vector<std::pair<std::string, std::vector<char>>> damagedVariants(const std::vector<char>& good) {
  std::vector<std::pair<std::string, std::vector<char>>> v;
  std::vector<char> flipped = good;
  flipped[flipped.size() / 2] ^= 0x20;
  v.push_back({"flipped byte", flipped});
  v.push_back({"truncated", std::vector<char>(good.begin(), good.begin() + good.size() / 2)});
  v.push_back({"empty", {}});
  std::vector<char> foreign = good;
  foreign[8] = static_cast<char>(kBlobFormatVersion + 1);  // the format version follows the magic
  v.push_back({"foreign version", foreign});
  return v;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Configuration

TEST(DiskCacheConfig, DirectoryFromSsmjitCacheDirThenXdgThenHome) {
  ScopedEnv a("SSMJIT_CACHE_DIR", "/x/cache/"), b("XDG_CACHE_HOME", "/xdg"), c("HOME", "/home/u");
  EXPECT_EQ(DiskCacheConfig::fromEnvironment().dir, "/x/cache");
  {
    ScopedEnv unset("SSMJIT_CACHE_DIR", nullptr);
    EXPECT_EQ(DiskCacheConfig::fromEnvironment().dir, "/xdg/ssmjit");
    ScopedEnv relative("XDG_CACHE_HOME", "relative/path");  // invalid per XDG: ignored
    EXPECT_EQ(DiskCacheConfig::fromEnvironment().dir, "/home/u/.cache/ssmjit");
    ScopedEnv noHome("HOME", nullptr);
    EXPECT_EQ(DiskCacheConfig::fromEnvironment().dir, "");
  }
}

TEST(DiskCacheConfig, MaxBytesTakesSuffixesAndRejectsGarbage) {
  EXPECT_EQ(DiskCacheConfig::fromEnvironment().maxBytes, kDefaultMaxBytes);
  const std::pair<const char*, uint64_t> good[] = {{"1000", 1000},
                                                   {"512K", 512ull << 10},
                                                   {"3m", 3ull << 20},
                                                   {"2G", 2ull << 30},
                                                   {"2GiB", 2ull << 30},
                                                   {"1T", 1ull << 40},
                                                   {"0", 0}};
  for (auto [text, bytes] : good) {
    ScopedEnv e("SSMJIT_CACHE_MAX_BYTES", text);
    EXPECT_EQ(DiskCacheConfig::fromEnvironment().maxBytes, bytes) << text;
  }
  for (const char* bad : {"", "abc", "-5", "12Q", "1.5G", "99999999999999999999", "20000000000T"}) {
    if (!*bad) continue;  // unset-equivalent
    ScopedEnv e("SSMJIT_CACHE_MAX_BYTES", bad);
    try {
      DiskCacheConfig::fromEnvironment();
      ADD_FAILURE() << "SSMJIT_CACHE_MAX_BYTES=" << bad << " was accepted";
    } catch (const Error& err) {
      EXPECT_EQ(err.kind(), Error::Kind::InvalidArgument);
      EXPECT_THAT(err.what(), HasSubstr(std::string("SSMJIT_CACHE_MAX_BYTES is '") + bad + "'"));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Entries

TEST(DiskCache, StoreThenLoadRoundTripsOneBlobNamedByTheKeyHash) {
  ScratchDir dir;
  DiskCache cache({dir.path(), kDefaultMaxBytes});
  ASSERT_TRUE(cache.readable());
  ASSERT_TRUE(cache.writable()) << cache.degradedReason();
  const CompiledKernel k = fakeKernel(150000, 1);
  const CacheKey key = fakeKey(1);
  EXPECT_EQ(cache.load(key), nullptr);
  ASSERT_TRUE(cache.store(key, k));
  EXPECT_EQ(dir.files(), std::vector<std::string>{key.fileStem + kBlobSuffix});
  const auto got = cache.load(key);
  ASSERT_NE(got, nullptr);
  EXPECT_TRUE(sameKernel(*got, k));
  const auto entries = cache.list();
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].status, BlobStatus::Ok);
  EXPECT_TRUE(entries[0].keyMatchesName);
  EXPECT_EQ(entries[0].kernel, "fake");
  EXPECT_EQ(entries[0].spec, "fake;sm_90a;n=1");
  EXPECT_EQ(cache.totalBytes(), entries[0].bytes);
}

TEST(DiskCache, AnotherKeyUnderTheSameFileNameIsAMiss) {
  ScratchDir dir;
  DiskCache cache({dir.path(), kDefaultMaxBytes});
  const CacheKey a = fakeKey(1);
  CacheKey b = fakeKey(2);
  b.fileStem = a.fileStem;  // a hash collision, simulated
  ASSERT_TRUE(cache.store(a, fakeKernel(100, 1)));
  EXPECT_EQ(cache.load(b), nullptr);
  EXPECT_NE(cache.load(a), nullptr);
}

TEST(DiskCache, DamagedBlobsAreMissesThatTheNextStoreReplaces) {
  ScratchDir dir;
  DiskCache cache({dir.path(), kDefaultMaxBytes});
  const CompiledKernel k = fakeKernel(4096, 3);
  const CacheKey key = fakeKey(3);
  ASSERT_TRUE(cache.store(key, k));
  const std::vector<char> good = readBytes(cache.pathFor(key));
  for (const auto& [what, bytes] : damagedVariants(good)) {
    SCOPED_TRACE(what);
    writeBytes(cache.pathFor(key), bytes);
    EXPECT_EQ(cache.load(key), nullptr);
    const auto listed = cache.list();
    ASSERT_EQ(listed.size(), 1u);
    EXPECT_NE(listed[0].status, BlobStatus::Ok);
    ASSERT_TRUE(cache.store(key, k));
    const auto again = cache.load(key);
    ASSERT_NE(again, nullptr);
    EXPECT_TRUE(sameKernel(*again, k));
  }
}

TEST(DiskCache, EvictsLeastRecentlyUsedAndAHitCountsAsUse) {
  ScratchDir dir;
  const CompiledKernel k = fakeKernel(10000, 0);
  const uint64_t blobBytes = encodeBlob(fakeKey(0).text, k).size();
  // Room for three entries.
  DiskCache cache({dir.path(), 3 * blobBytes + blobBytes / 2});
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(cache.store(fakeKey(i), k));
  // Ages: entry 0 oldest, then 1, then 2; then a hit makes entry 0 the most recent.
  for (int i = 0; i < 3; ++i) setMtime(cache.pathFor(fakeKey(i)), 1000 - 100 * i);
  ASSERT_NE(cache.load(fakeKey(0)), nullptr);
  ASSERT_TRUE(cache.store(fakeKey(3), k));  // over the bound: entry 1 goes
  EXPECT_NE(cache.load(fakeKey(0)), nullptr);
  EXPECT_EQ(cache.load(fakeKey(1)), nullptr);
  EXPECT_NE(cache.load(fakeKey(2)), nullptr);
  EXPECT_NE(cache.load(fakeKey(3)), nullptr);
  EXPECT_LE(cache.totalBytes(), 3 * blobBytes + blobBytes / 2);
  // An explicit eviction to zero empties it.
  EXPECT_EQ(cache.evictTo(0), 3 * blobBytes);
  EXPECT_EQ(cache.list().size(), 0u);
}

TEST(DiskCache, StaleTempFilesAreSweptFreshOnesKept) {
  ScratchDir dir;
  DiskCache cache({dir.path(), kDefaultMaxBytes});
  const std::string stale = dir.path() + "/.tmp-deadbeef.1.0", fresh = dir.path() + "/.tmp-deadbeef.2.0";
  writeBytes(stale, std::vector<char>(100, 'x'));
  writeBytes(fresh, std::vector<char>(100, 'x'));
  setMtime(stale, 2 * 3600);
  cache.evictTo(kDefaultMaxBytes);
  EXPECT_EQ(dir.files(), std::vector<std::string>{".tmp-deadbeef.2.0"});
  EXPECT_TRUE(cache.list().empty());  // temp files are never entries
  EXPECT_EQ(cache.clear(), 1u);
  EXPECT_TRUE(dir.files().empty());
}

TEST(DiskCache, RemoveBadAndClearTouchOnlyCacheFiles) {
  ScratchDir dir;
  DiskCache cache({dir.path(), kDefaultMaxBytes});
  ASSERT_TRUE(cache.store(fakeKey(1), fakeKernel(100, 1)));
  ASSERT_TRUE(cache.store(fakeKey(2), fakeKernel(100, 2)));
  writeBytes(cache.pathFor(fakeKey(2)), {'b', 'a', 'd'});
  writeBytes(dir.path() + "/notes.txt", {'k', 'e', 'e', 'p'});
  EXPECT_EQ(cache.removeBad(), 1u);
  EXPECT_NE(cache.load(fakeKey(1)), nullptr);
  EXPECT_EQ(cache.clear(), 1u);
  EXPECT_EQ(dir.files(), std::vector<std::string>{"notes.txt"});
}

TEST(DiskCache, SoundBlobUnderAnotherNameIsBadAndRemoved) {
  ScratchDir dir;
  DiskCache cache({dir.path(), kDefaultMaxBytes});
  ASSERT_TRUE(cache.store(fakeKey(1), fakeKernel(100, 1)));
  writeBytes(cache.pathFor(fakeKey(2)), readBytes(cache.pathFor(fakeKey(1))));  // no lookup reaches it
  const auto listed = cache.list();
  ASSERT_EQ(listed.size(), 2u);
  EXPECT_EQ(std::count_if(listed.begin(), listed.end(), [](const EntryInfo& e) { return !e.good(); }), 1);
  EXPECT_EQ(cache.removeBad(), 1u);
  EXPECT_EQ(dir.files(), std::vector<std::string>{fakeKey(1).fileStem + kBlobSuffix});
}

// ---------------------------------------------------------------------------------------------
// Directories that cannot take entries

TEST(DiskCache, UncreatableDirectoryDegradesToMemoryOnlyWithOneWarning) {
  ScratchDir dir;
  writeBytes(dir.path() + "/file", {'x'});
  ::testing::internal::CaptureStderr();
  DiskCache cache({dir.path() + "/file/cache", kDefaultMaxBytes});  // a path through a regular file
  EXPECT_FALSE(cache.readable());
  EXPECT_FALSE(cache.writable());
  EXPECT_EQ(cache.load(fakeKey(1)), nullptr);
  EXPECT_FALSE(cache.store(fakeKey(1), fakeKernel(10, 1)));
  EXPECT_FALSE(cache.store(fakeKey(2), fakeKernel(10, 2)));
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(cache.degradedReason(), HasSubstr("cannot create"));
  EXPECT_THAT(err, HasSubstr("warning: kernel cache: cannot create " + dir.path() + "/file/cache"));
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
}

// Makes `dir` read-only for this process: a read-only bind mount in a private mount namespace (root
// ignores permission bits), or chmod for other users. Returns "" or why it could not.
std::string makeReadOnly(const std::string& dir) {
  if (::geteuid() != 0) return ::chmod(dir.c_str(), 0555) == 0 ? "" : std::strerror(errno);
  if (::unshare(CLONE_NEWNS) != 0) return std::string("unshare(CLONE_NEWNS): ") + std::strerror(errno);
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
    return std::string("mount --make-rprivate /: ") + std::strerror(errno);
  if (::mount(dir.c_str(), dir.c_str(), nullptr, MS_BIND, nullptr) != 0)
    return std::string("bind mount: ") + std::strerror(errno);
  if (::mount(nullptr, dir.c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY, nullptr) != 0)
    return std::string("read-only remount: ") + std::strerror(errno);
  return "";
}

TEST(DiskCache, ReadOnlyDirectoryServesItsEntriesAndWarnsOnce) {
  ScratchDir dir;
  const CompiledKernel k = fakeKernel(1000, 5);
  {
    DiskCache writer({dir.path(), kDefaultMaxBytes});
    ASSERT_TRUE(writer.store(fakeKey(5), k));
  }
  const std::string errFile = dir.path() + ".stderr";
  const int rc = inChild([&] {
    const std::string why = makeReadOnly(dir.path());
    if (!why.empty()) {
      std::printf("cannot make the directory read-only here: %s\n", why.c_str());
      return 77;
    }
    CHILD_CHECK(::open((dir.path() + "/probe").c_str(), O_CREAT | O_WRONLY, 0644) < 0, "the directory is writable");
    CHILD_CHECK(std::freopen(errFile.c_str(), "w", stderr) != nullptr, "cannot redirect stderr");
    DiskCache cache({dir.path(), kDefaultMaxBytes});
    CHILD_CHECK(cache.readable(), "not readable");
    CHILD_CHECK(!cache.writable(), "writable");
    const auto hit = cache.load(fakeKey(5));
    CHILD_CHECK(hit && sameKernel(*hit, k), "the existing entry did not load");
    CHILD_CHECK(!cache.store(fakeKey(6), k), "store into a read-only directory succeeded");
    CHILD_CHECK(!cache.store(fakeKey(7), k), "second store succeeded");
    return 0;
  });
  if (rc == 77) GTEST_SKIP() << "no way to make a directory read-only for root here (needs CAP_SYS_ADMIN)";
  ASSERT_EQ(rc, 0);
  std::ifstream f(errFile);
  const std::string err((std::istreambuf_iterator<char>(f)), {});
  std::remove(errFile.c_str());
  EXPECT_THAT(err, HasSubstr("is not writable"));
  EXPECT_THAT(err, HasSubstr("existing entries still load"));
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
}

TEST(DiskCache, FileSizeLimitMidWriteLeavesNoPartialEntry) {
  ScratchDir dir;
  const CompiledKernel big = fakeKernel(64 * 1024, 9);
  // SIGXFSZ ignored: the write fails with EFBIG, store() gives up cleanly and removes its temp file.
  const int rc = inChild([&] {
    ::signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim = {4096, 4096};
    CHILD_CHECK(::setrlimit(RLIMIT_FSIZE, &lim) == 0, "setrlimit: %s", std::strerror(errno));
    ::testing::internal::CaptureStderr();
    DiskCache cache({dir.path(), kDefaultMaxBytes});
    const bool stored = cache.store(fakeKey(9), big);
    const std::string err = ::testing::internal::GetCapturedStderr();
    CHILD_CHECK(!stored, "a blob over the file-size limit was stored");
    CHILD_CHECK(err.find("File too large") != std::string::npos, "warning was: %s", err.c_str());
    CHILD_CHECK(!cache.writable(), "still writable after EFBIG");
    return 0;
  });
  ASSERT_EQ(rc, 0);
  EXPECT_TRUE(dir.files().empty()) << "left: " << ::testing::PrintToString(dir.files());

  // Default SIGXFSZ: the writer dies mid-write. Only its temp file can remain, never an entry.
  const int killed = inChild([&] {
    struct rlimit lim = {4096, 4096};
    ::setrlimit(RLIMIT_FSIZE, &lim);
    DiskCache cache({dir.path(), kDefaultMaxBytes});
    cache.store(fakeKey(9), big);
    return 0;
  });
  EXPECT_EQ(killed, 128 + SIGXFSZ);
  for (const std::string& f : dir.files()) EXPECT_EQ(f.rfind(".tmp-", 0), 0u) << f;
  DiskCache cache({dir.path(), kDefaultMaxBytes});
  EXPECT_TRUE(cache.list().empty());
  EXPECT_EQ(cache.load(fakeKey(9)), nullptr);
  ASSERT_TRUE(cache.store(fakeKey(9), big));
  EXPECT_NE(cache.load(fakeKey(9)), nullptr);
}

// ---------------------------------------------------------------------------------------------
// The key

class CacheKeyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!nvrtcAvailable(&why)) GTEST_SKIP() << "NVRTC not loadable (its version is part of the key): " << why;
  }
};

TEST_F(CacheKeyTest, NamesEveryIngredient) {
  const Specialization spec = smallSpec(0);
  const CacheKey key = cacheKeyFor(spec);
  for (const char* field : {"build=", "nvrtc=", "device-lib=", "kernel=selective_state_update\n", "kernel-definition=",
                            "arch=sm_90a\n", "options=--gpu-architecture=sm_90a", "SSMJIT_NVRTC_OPTIONS=\n"})
    EXPECT_THAT(key.text, HasSubstr(field));
  EXPECT_THAT(key.text, HasSubstr("spec=" + spec.canonical() + "\n"));
  EXPECT_THAT(key.text, HasSubstr("nvrtc=" + nvrtcVersion() + " build-id "));  // CUDA's libnvrtc has one
  EXPECT_EQ(key.fileStem.size(), 32u);
  EXPECT_EQ(key.fileStem, hash::hex(key.text, 128));
}

TEST_F(CacheKeyTest, ChangesWithSpecArchAndCodeChangingKnobsOnly) {
  const CacheKey base = cacheKeyFor(smallSpec(0));
  EXPECT_EQ(cacheKeyFor(smallSpec(0)).fileStem, base.fileStem);
  EXPECT_NE(cacheKeyFor(smallSpec(1)).fileStem, base.fileStem);
  EXPECT_NE(cacheKeyFor(smallSpec(0, "sm_80")).fileStem, base.fileStem);
  {
    ScopedEnv e("SSMJIT_NVRTC_OPTIONS", "-lineinfo");
    const CacheKey k = cacheKeyFor(smallSpec(0));
    EXPECT_NE(k.fileStem, base.fileStem);
    EXPECT_THAT(k.text, HasSubstr("-lineinfo"));
  }
  for (const char* neutral : {"SSMJIT_FORCE_PTX", "SSMJIT_ALWAYS_COMPILE", "SSMJIT_CACHE_MAX_BYTES"}) {
    ScopedEnv e(neutral, "1");
    EXPECT_EQ(cacheKeyFor(smallSpec(0)).fileStem, base.fileStem) << neutral;
  }
}

// ---------------------------------------------------------------------------------------------
// The process-level path: memory, disk, compile (each step in a fresh child process)

class KernelCacheProcess : public CacheKeyTest {};

TEST_F(KernelCacheProcess, SecondProcessLoadsFromDiskWithoutCompiling) {
  ScratchDir dir;
  ScopedEnv e("SSMJIT_CACHE_DIR", dir.path().c_str());
  const std::string cubinFile = dir.path() + ".first";
  ASSERT_EQ(inChild([&] {
              for (int v = 0; v < 2; ++v) {
                const KernelLookup r = lookupOrCompileKernel(smallSpec(v));
                CHILD_CHECK(r.source == KernelSource::Compiled, "first process: %s", kernelSourceName(r.source));
                if (v == 0) writeBytes(cubinFile, r.kernel->cubin);
              }
              const KernelLookup again = lookupOrCompileKernel(smallSpec(0));
              CHILD_CHECK(again.source == KernelSource::Memory, "repeat: %s", kernelSourceName(again.source));
              return 0;
            }),
            0);
  EXPECT_EQ(dir.files().size(), 2u);
  ASSERT_EQ(inChild([&] {
              using Clock = std::chrono::steady_clock;
              double ms[2];
              for (int v = 0; v < 2; ++v) {
                const auto t0 = Clock::now();
                const KernelLookup r = lookupOrCompileKernel(smallSpec(v));
                ms[v] = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
                CHILD_CHECK(r.source == KernelSource::Disk, "second process: %s", kernelSourceName(r.source));
                if (v == 0) CHILD_CHECK(r.kernel->cubin == readBytes(cubinFile), "the CUBIN differs");
                CHILD_CHECK(!r.kernel->params.empty() && !r.kernel->ptx.empty(), "launch metadata missing");
              }
              // NVRTC (its version is in the key) was loaded by this test's fixture before the fork.
              std::printf("warm disk cache: first kernel %.3f ms, second %.3f ms\n", ms[0], ms[1]);
              CHILD_CHECK(ms[1] < 20.0, "a warm load took %.3f ms", ms[1]);
              return 0;
            }),
            0);
  std::remove(cubinFile.c_str());
}

TEST_F(KernelCacheProcess, DamagedEntriesRecompileAndAreReplaced) {
  ScratchDir dir;
  ScopedEnv e("SSMJIT_CACHE_DIR", dir.path().c_str());
  ASSERT_EQ(inChild([] { return lookupOrCompileKernel(smallSpec(0)).source == KernelSource::Compiled ? 0 : 1; }), 0);
  ASSERT_EQ(dir.files().size(), 1u);
  const std::string path = dir.path() + "/" + dir.files()[0];
  const std::vector<char> good = readBytes(path);
  for (const auto& [what, bytes] : damagedVariants(good)) {
    SCOPED_TRACE(what);
    writeBytes(path, bytes);
    EXPECT_EQ(inChild([] {
                const KernelLookup r = lookupOrCompileKernel(smallSpec(0));
                CHILD_CHECK(r.source == KernelSource::Compiled, "damaged entry: %s", kernelSourceName(r.source));
                return 0;
              }),
              0);
    EXPECT_EQ(inChild([] { return lookupOrCompileKernel(smallSpec(0)).source == KernelSource::Disk ? 0 : 1; }), 0)
        << "the recompiled entry did not replace the damaged one";
    EXPECT_EQ(dir.files().size(), 1u);
  }
}

TEST_F(KernelCacheProcess, AlwaysCompileNeitherReadsNorWrites) {
  ScratchDir dir;
  ScopedEnv e("SSMJIT_CACHE_DIR", dir.path().c_str());
  ASSERT_EQ(inChild([] { return lookupOrCompileKernel(smallSpec(0)).source == KernelSource::Compiled ? 0 : 1; }), 0);
  ScopedEnv always("SSMJIT_ALWAYS_COMPILE", "1");
  ASSERT_EQ(inChild([] {
              CHILD_CHECK(lookupOrCompileKernel(smallSpec(0)).source == KernelSource::Compiled, "served from disk");
              CHILD_CHECK(lookupOrCompileKernel(smallSpec(1)).source == KernelSource::Compiled, "?");
              return 0;
            }),
            0);
  EXPECT_EQ(dir.files().size(), 1u) << "SSMJIT_ALWAYS_COMPILE wrote an entry";
}

TEST_F(KernelCacheProcess, CodeChangingKnobGetsItsOwnEntry) {
  ScratchDir dir;
  ScopedEnv e("SSMJIT_CACHE_DIR", dir.path().c_str());
  ASSERT_EQ(inChild([] { return lookupOrCompileKernel(smallSpec(0)).source == KernelSource::Compiled ? 0 : 1; }), 0);
  ScopedEnv opts("SSMJIT_NVRTC_OPTIONS", "-lineinfo");
  ASSERT_EQ(inChild([] {
              const KernelLookup r = lookupOrCompileKernel(smallSpec(0));
              CHILD_CHECK(r.source == KernelSource::Compiled, "served the entry compiled without -lineinfo");
              return 0;
            }),
            0);
  EXPECT_EQ(dir.files().size(), 2u);
}

TEST_F(KernelCacheProcess, RecordAppendsEachSpecialisationOnceAndReplays) {
  ScratchDir dir;
  const std::string rec = dir.path() + "/used.jsonl";
  ScopedEnv e("SSMJIT_CACHE_DIR", (dir.path() + "/cache").c_str()), r("SSMJIT_RECORD", rec.c_str());
  ASSERT_EQ(inChild([] {
              for (int v : {0, 1, 0, 2, 1}) lookupOrCompileKernel(smallSpec(v));
              return 0;
            }),
            0);
  std::ifstream f(rec);
  const std::string text((std::istreambuf_iterator<char>(f)), {});
  const Manifest m = parseManifest(text, rec);
  ASSERT_EQ(m.entries.size(), 3u) << text;
  for (int v = 0; v < 3; ++v) {
    EXPECT_EQ(m.entries[v].kind, ManifestEntry::Kind::Specialization);
    EXPECT_EQ(m.entries[v].spec, smallSpec(v)) << m.entries[v].spec.canonical();
  }
}
