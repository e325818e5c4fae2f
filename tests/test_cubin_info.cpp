// The CUBIN reader: its figures agree with ptxas' verbose report on NVRTC output (several kernels,
// stacks, callees, spills, static and dynamic shared memory, for Ampere, Hopper and Blackwell), the
// compile's resources do not depend on that report being in the log, and no blob, however
// truncated or garbled, makes it read out of bounds or crash.
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "GpuTest.h"  // SSMJIT_REQUIRE_NVRTC
#include "compiler/CubinInfo.h"
#include "compiler/Nvrtc.h"

namespace ssmjit {
namespace {

// ---- NVRTC-made CUBINs ------------------------------------------------------------------------

const char* kTiny = R"(
extern "C" __global__ void sj_tiny(float* out, const float* in, int n) {
  __shared__ float tile[128];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  tile[threadIdx.x] = i < n ? in[i] : 0.0f;
  __syncthreads();
  if (i < n) out[i] = tile[(threadIdx.x + 1) % blockDim.x] * 2.0f;
}
)";

// Four kernels: static shared memory and a callee; a local array (stack, no shared); nothing;
// dynamic shared memory only, with printf (a call with a stack).
const char* kMulti = R"(
__device__ __noinline__ float helper(const float* in, int k) {
  float loc[64];
  for (int j = 0; j < 64; ++j) loc[j] = in[j * k];
  return loc[k & 63] + loc[(k * 7) & 63];
}
extern "C" __global__ void k_a(float* out, const float* in, int n) {
  __shared__ double s[300];
  s[threadIdx.x] = in[threadIdx.x];
  __syncthreads();
  out[threadIdx.x] = s[(threadIdx.x + n) % 300] + helper(in, n);
}
extern "C" __global__ void k_b(float* out, const float* in, int n) {
  float loc[40];
  for (int j = 0; j < 40; ++j) loc[j] = in[j + n];
  out[threadIdx.x] = loc[n % 40];
}
extern "C" __global__ void k_c(float* out) { out[threadIdx.x] = 1.f; }
extern "C" __global__ void k_d(float* out, int n) {
  extern __shared__ float dyn[];
  dyn[threadIdx.x] = n;
  __syncthreads();
  out[threadIdx.x] = dyn[n];
  printf("%d\n", n);
}
)";

// Compiled with -maxrregcount=32: spills.
const char* kSpill = R"(
extern "C" __global__ void k_spill(float* out, const float* in, int n) {
  float acc[96];
  #pragma unroll
  for (int j = 0; j < 96; ++j) acc[j] = in[j * n + threadIdx.x];
  for (int it = 0; it < n; ++it) {
    #pragma unroll
    for (int j = 0; j < 96; ++j) acc[j] = acc[j] * acc[(j + 5) % 96] + in[it * 96 + j];
  }
  float r = 0;
  #pragma unroll
  for (int j = 0; j < 96; ++j) r += acc[j] * (j + 1);
  out[threadIdx.x] = r;
}
)";

// Indirect calls keep callees out of line: the kernel's own frame is smaller than its stack.
const char* kIndirect = R"(
typedef float (*fn_t)(const float*, int);
__device__ __noinline__ float f1(const float* in, int k) {
  volatile float loc[50];
  for (int j = 0; j < 50; ++j) loc[j] = in[j * k];
  return loc[k % 50];
}
__device__ __noinline__ float f2(const float* in, int k) {
  volatile float loc[20];
  for (int j = 0; j < 20; ++j) loc[j] = in[j + k];
  return loc[k % 20];
}
__device__ fn_t table[2] = {f1, f2};
extern "C" __global__ void k_ind(float* out, const float* in, int n) {
  volatile float mine[10];
  for (int j = 0; j < 10; ++j) mine[j] = in[j];
  out[threadIdx.x] = table[n & 1](in, n) + mine[n % 10];
}
)";

struct Case {
  const char* name;
  const char* source;
  std::vector<std::string> options;
};

std::vector<Case> cases() {
  return {
      {"tiny", kTiny, {}}, {"multi", kMulti, {}}, {"spill", kSpill, {"-maxrregcount=32"}}, {"indirect", kIndirect, {}}};
}

std::vector<std::string> arches() {
  std::vector<std::string> a = {"sm_80", "sm_90a"};
  // Blackwell CUBINs name the reserved shared block's size (.nv.reservedSmem.cap).
  std::string v = nvrtcVersion();
  int major = std::stoi(v), minor = std::stoi(v.substr(v.find('.') + 1));
  if (major > 12 || (major == 12 && minor >= 8)) a.push_back("sm_100a");
  return a;
}

// ptxas' report, per entry function.
struct PtxasEntry {
  int registers = -1, sharedBytes = 0, frame = -1, cumulativeStack = -1, spillStores = -1, spillLoads = -1;
};

int numberBefore(const std::string& line, const std::string& unit) {
  size_t at = line.find(unit);
  if (at == std::string::npos) return -1;
  size_t b = at;
  while (b > 0 && std::isdigit(static_cast<unsigned char>(line[b - 1]))) --b;
  return b == at ? -1 : std::stoi(line.substr(b, at - b));
}

std::map<std::string, PtxasEntry> ptxasEntries(const std::string& log) {
  std::map<std::string, PtxasEntry> out;
  std::string compiling, props;
  std::istringstream in(log);
  std::string line;
  while (std::getline(in, line)) {
    if (size_t at = line.find("Compiling entry function '"); at != std::string::npos) {
      size_t b = at + std::strlen("Compiling entry function '");
      compiling = line.substr(b, line.find('\'', b) - b);
      out[compiling];
    } else if (size_t at = line.find("Function properties for "); at != std::string::npos) {
      props = line.substr(at + std::strlen("Function properties for "));
      while (!props.empty() && std::isspace(static_cast<unsigned char>(props.back()))) props.pop_back();
    } else if (line.find("bytes stack frame") != std::string::npos) {
      if (out.count(props)) {
        out[props].frame = numberBefore(line, " bytes stack frame");
        out[props].spillStores = numberBefore(line, " bytes spill stores");
        out[props].spillLoads = numberBefore(line, " bytes spill loads");
      }
      props.clear();
    } else if (line.find("Used ") != std::string::npos && out.count(compiling)) {
      PtxasEntry& e = out[compiling];
      e.registers = numberBefore(line, " registers");
      e.sharedBytes = std::max(0, numberBefore(line, " bytes smem"));
      e.cumulativeStack = numberBefore(line, " bytes cumulative stack size");
    }
  }
  return out;
}

// `source` with a global of a name no earlier compile used, so that the driver's compute cache
// (where there is a driver) cannot serve it and ptxas' report is in the log.
std::string fresh(const char* source) {
  static int counter = 0;
  auto now = std::chrono::steady_clock::now().time_since_epoch().count();
  return std::string(source) + "\n__device__ int sj_fresh_" + std::to_string(getpid()) + "_" + std::to_string(now) +
         "_" + std::to_string(counter++) + ";\n";
}

TEST(CubinInfo, AgreesWithPtxasOnNvrtcOutput) {
  SSMJIT_REQUIRE_NVRTC();
  int withSpills = 0, withCallees = 0, withShared = 0;
  for (const std::string& arch : arches())
    for (const Case& c : cases()) {
      SCOPED_TRACE(arch + " " + c.name);
      NvrtcResult r = nvrtcCompile(fresh(c.source), std::string(c.name) + ".cu", arch, {}, c.options);
      auto report = ptxasEntries(r.log);
      ASSERT_FALSE(report.empty()) << "no ptxas report in the log of a fresh compile:\n" << r.log;
      CubinInfo info = readCubinInfo(r.cubin.data(), r.cubin.size());
      ASSERT_TRUE(info.ok) << info.error;
      EXPECT_EQ(info.reservedSharedBytes, arch == "sm_80" ? 0 : 1024);
      ASSERT_EQ(info.kernels.size(), report.size()) << r.log;
      for (const auto& [name, e] : report) {
        SCOPED_TRACE(name);
        const CubinKernel* k = info.find(name);
        ASSERT_NE(k, nullptr) << r.log;
        EXPECT_EQ(k->registers, e.registers) << r.log;
        EXPECT_EQ(k->sharedBytes, e.sharedBytes) << r.log;
        EXPECT_GE(k->sharedSectionBytes, k->sharedBytes);
        // The CUBIN records the stack of the call tree: ptxas' cumulative figure where it prints one.
        EXPECT_EQ(k->stackBytes(), e.cumulativeStack >= 0 ? e.cumulativeStack : e.frame) << r.log;
        EXPECT_EQ(k->minStackBytes, k->stackBytes());
        withSpills += e.spillStores > 0;
        withCallees += e.cumulativeStack > e.frame;
        withShared += e.sharedBytes > 0;
      }
      // The module's figures, as ResourceUsage has them, match the log parser's.
      ResourceUsage fromElf = cubinResources(info), fromLog = parsePtxasResources(r.log);
      EXPECT_EQ(fromElf.registers, fromLog.registers);
      EXPECT_EQ(fromElf.sharedBytes, fromLog.sharedBytes);
      EXPECT_EQ(fromElf.localBytes, fromLog.localBytes);
    }
  // The sources exercise what they are meant to.
  EXPECT_GT(withSpills, 0);
  EXPECT_GT(withCallees, 0);
  EXPECT_GT(withShared, 0);
}

TEST(CubinInfo, CompileResourcesDoNotNeedPtxasReport) {
  SSMJIT_REQUIRE_NVRTC();
  for (const std::string& arch : {std::string("sm_80"), std::string("sm_90a")})
    for (const Case& c : cases()) {
      SCOPED_TRACE(arch + " " + c.name);
      NvrtcResult r = nvrtcCompile(c.source, std::string(c.name) + ".cu", arch, {}, c.options);
      // As nvrtcCompile would see it when the compute cache served the compile: no ptxas lines.
      ResourceUsage cached = kernelResources(r.cubin, "", r.ptx);
      EXPECT_GT(cached.registers, 0);
      EXPECT_EQ(cached.registers, r.resources.registers);
      EXPECT_EQ(cached.sharedBytes, r.resources.sharedBytes);
      EXPECT_EQ(cached.localBytes, r.resources.localBytes);
      if (r.resources.localBytes == 0) {  // no stack, so no spills: known even without the report
        EXPECT_EQ(cached.spillStoreBytes, 0);
        EXPECT_EQ(cached.spillLoadBytes, 0);
      } else {
        EXPECT_EQ(cached.spillStoreBytes, -1);
        EXPECT_EQ(cached.spillLoadBytes, -1);
      }
      if (std::string(c.name) == "spill" && r.log.find("spill stores") != std::string::npos)
        EXPECT_GT(r.resources.spillStoreBytes, 0) << r.log;
      if (std::string(c.name) == "tiny") EXPECT_EQ(r.resources.sharedBytes, 512);
    }
}

TEST(CubinInfo, SecondCompileReportsTheSameFigures) {
  // Where there is a driver, the second compile of a source comes from its compute cache, without
  // ptxas' report (elsewhere both are fresh): the figures must not change.
  SSMJIT_REQUIRE_NVRTC();
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    std::string src = fresh(c.source);
    NvrtcResult first = nvrtcCompile(src, std::string(c.name) + ".cu", "sm_90a", {}, c.options);
    NvrtcResult second = nvrtcCompile(src, std::string(c.name) + ".cu", "sm_90a", {}, c.options);
    if (second.log.find("ptxas") == std::string::npos)
      std::printf("[ NOTE ] %s: the second compile came without ptxas' report\n", c.name);
    EXPECT_EQ(second.resources.registers, first.resources.registers);
    EXPECT_EQ(second.resources.sharedBytes, first.resources.sharedBytes);
    EXPECT_EQ(second.resources.localBytes, first.resources.localBytes);
    if (first.resources.localBytes == 0) EXPECT_EQ(second.resources.spillStoreBytes, 0);
  }
}

TEST(CubinInfo, SmemSpillingPragmaKeepsSpillsUnknownWithoutReport) {
  SSMJIT_REQUIRE_NVRTC();
  NvrtcResult r = nvrtcCompile(kTiny, "tiny.cu", "sm_80", {});
  ResourceUsage plain = kernelResources(r.cubin, "", r.ptx);
  ASSERT_EQ(plain.localBytes, 0);
  EXPECT_EQ(plain.spillStoreBytes, 0);
  ResourceUsage pragma = kernelResources(r.cubin, "", r.ptx + "\n.pragma \"enable_smem_spilling\";\n");
  EXPECT_EQ(pragma.spillStoreBytes, -1);
  EXPECT_EQ(pragma.spillLoadBytes, -1);
}

// ---- Synthetic CUBINs: exact encodings and broken ones ----------------------------------------

void put(std::vector<unsigned char>& b, size_t off, uint64_t v, int width) {
  if (b.size() < off + width) b.resize(off + width);
  for (int i = 0; i < width; ++i) b[off + i] = static_cast<unsigned char>(v >> (8 * i));
}

struct Attr {
  uint8_t fmt, attr;
  std::vector<uint32_t> words;  // EIFMT_SVAL payload; else words[0] is the 16-bit value
};

std::vector<unsigned char> nvInfo(const std::vector<Attr>& attrs) {
  std::vector<unsigned char> b;
  for (const Attr& a : attrs) {
    size_t at = b.size();
    put(b, at, a.fmt, 1);
    put(b, at + 1, a.attr, 1);
    if (a.fmt == 4) {
      put(b, at + 2, 4 * a.words.size(), 2);
      for (size_t i = 0; i < a.words.size(); ++i) put(b, at + 4 + 4 * i, a.words[i], 4);
    } else {
      put(b, at + 2, a.words.empty() ? 0 : a.words[0], 2);
    }
  }
  return b;
}

// A minimal CUBIN as ptxas lays one out: one kernel `k` (symbol 1, STO_CUDA_ENTRY) whose .nv.info
// holds `attrs`, a `.nv.shared.k` of `shared` bytes (none if 0), and the reserved-block symbol
// `.nv.reservedSmem.cap` with value `cap` if cap >= 0.
std::vector<unsigned char> makeCubin(const std::vector<unsigned char>& info, uint64_t shared, int64_t cap = -1) {
  std::vector<std::string> secNames = {"", ".shstrtab", ".strtab", ".symtab", ".nv.info", ".nv.shared.k"};
  std::string shstr;
  std::vector<uint32_t> secNameOff;
  for (const auto& n : secNames) {
    secNameOff.push_back(static_cast<uint32_t>(shstr.size()));
    shstr += n;
    shstr += '\0';
  }
  std::string str = std::string("\0k\0.nv.reservedSmem.cap\0", 25);
  std::vector<unsigned char> sym(24 * (cap >= 0 ? 3 : 2), 0);
  put(sym, 24 + 0, 1, 4);     // name "k"
  put(sym, 24 + 4, 0x12, 1);  // STB_GLOBAL, STT_FUNC
  put(sym, 24 + 5, 0x10, 1);  // STO_CUDA_ENTRY
  if (cap >= 0) {
    put(sym, 48 + 0, 3, 4);     // ".nv.reservedSmem.cap"
    put(sym, 48 + 4, 0x21, 1);  // STB_WEAK, STT_OBJECT
    put(sym, 48 + 8, static_cast<uint64_t>(cap), 8);
  }
  std::vector<unsigned char> b(64, 0);
  auto append = [&](const void* p, size_t n) {
    size_t at = b.size();
    b.insert(b.end(), static_cast<const unsigned char*>(p), static_cast<const unsigned char*>(p) + n);
    return at;
  };
  size_t shstrOff = append(shstr.data(), shstr.size());
  size_t strOff = append(str.data(), str.size());
  while (b.size() % 8) b.push_back(0);
  size_t symOff = append(sym.data(), sym.size());
  size_t infoOff = append(info.data(), info.size());
  while (b.size() % 8) b.push_back(0);
  size_t shoff = b.size();
  struct Sh {
    uint32_t type;
    uint64_t off, size;
    uint32_t link;
    uint64_t entsize;
  };
  std::vector<Sh> sh = {{0, 0, 0, 0, 0},
                        {3, shstrOff, shstr.size(), 0, 0},
                        {3, strOff, str.size(), 0, 0},
                        {2, symOff, sym.size(), 2, 24},
                        {0x70000000, infoOff, info.size(), 3, 0},
                        {8, b.size(), shared, 0, 0}};
  size_t n = shared ? sh.size() : sh.size() - 1;
  for (size_t i = 0; i < n; ++i) {
    size_t h = shoff + 64 * i;
    put(b, h + 63, 0, 1);
    put(b, h, secNameOff[i], 4);
    put(b, h + 4, sh[i].type, 4);
    put(b, h + 24, sh[i].off, 8);
    put(b, h + 32, sh[i].size, 8);
    put(b, h + 40, sh[i].link, 4);
    put(b, h + 56, sh[i].entsize, 8);
  }
  const unsigned char ident[] = {0x7f, 'E', 'L', 'F', 2, 1, 1};
  std::memcpy(b.data(), ident, sizeof ident);
  put(b, 16, 2, 2);    // ET_EXEC
  put(b, 18, 190, 2);  // EM_CUDA
  put(b, 40, shoff, 8);
  put(b, 52, 64, 2);
  put(b, 58, 64, 2);
  put(b, 60, n, 2);
  put(b, 62, 1, 2);
  return b;
}

const std::vector<Attr> kGoodAttrs = {
    {4, 0x37, {0x82}},      // EIATTR_CUDA_API_VERSION (ignored)
    {3, 0x1b, {0xff}},      // EIATTR_MAXREG_COUNT, EIFMT_HVAL (ignored)
    {1, 0x2a, {}},          // an EIFMT_NVAL flag (ignored)
    {2, 0x4c, {1}},         // an EIFMT_BVAL (ignored)
    {4, 0x2f, {1, 40}},     // EIATTR_REGCOUNT: k uses 40 registers
    {4, 0x11, {1, 0x100}},  // EIATTR_FRAME_SIZE
    {4, 0x12, {1, 0x110}},  // EIATTR_MIN_STACK_SIZE
    {4, 0x23, {1, 0x200}},  // EIATTR_MAX_STACK_SIZE
};

TEST(CubinInfo, ReadsTheEncodings) {
  auto blob = makeCubin(nvInfo(kGoodAttrs), 0x600, 0x400);
  CubinInfo info = readCubinInfo(blob.data(), blob.size());
  ASSERT_TRUE(info.ok) << info.error;
  ASSERT_EQ(info.kernels.size(), 1u);
  const CubinKernel& k = info.kernels[0];
  EXPECT_EQ(k.name, "k");
  EXPECT_EQ(k.registers, 40);
  EXPECT_EQ(k.frameBytes, 0x100);
  EXPECT_EQ(k.minStackBytes, 0x110);
  EXPECT_EQ(k.maxStackBytes, 0x200);
  EXPECT_EQ(k.stackBytes(), 0x110);
  EXPECT_EQ(info.reservedSharedBytes, 0x400);
  EXPECT_EQ(k.sharedSectionBytes, 0x600);
  EXPECT_EQ(k.sharedBytes, 0x200);
  ResourceUsage ru = cubinResources(info);
  EXPECT_EQ(ru.registers, 40);
  EXPECT_EQ(ru.sharedBytes, 0x200);
  EXPECT_EQ(ru.localBytes, 0x110);
  EXPECT_EQ(ru.spillStoreBytes, -1);

  // No reservation (before sm_90), no shared section at all, a section smaller than the reserve.
  auto plain = makeCubin(nvInfo(kGoodAttrs), 0x600);
  EXPECT_EQ(readCubinInfo(plain.data(), plain.size()).kernels.at(0).sharedBytes, 0x600);
  auto none = makeCubin(nvInfo(kGoodAttrs), 0, 0x400);
  EXPECT_EQ(readCubinInfo(none.data(), none.size()).kernels.at(0).sharedBytes, 0);
  auto small = makeCubin(nvInfo(kGoodAttrs), 0x100, 0x400);
  EXPECT_EQ(readCubinInfo(small.data(), small.size()).kernels.at(0).sharedBytes, -1);

  // Without MIN_STACK_SIZE the frame size is the stack.
  std::vector<Attr> noMin = {{4, 0x2f, {1, 8}}, {4, 0x11, {1, 16}}};
  auto nm = makeCubin(nvInfo(noMin), 0);
  EXPECT_EQ(readCubinInfo(nm.data(), nm.size()).kernels.at(0).stackBytes(), 16);
}

TEST(CubinInfo, BrokenAttributesAreUnknownNotWrong) {
  auto unknownOf = [](const std::vector<unsigned char>& info) {
    auto blob = makeCubin(info, 0x40);
    CubinInfo ci = readCubinInfo(blob.data(), blob.size());
    EXPECT_TRUE(ci.ok) << ci.error;  // the ELF is fine; only .nv.info is not
    return ci.kernels.at(0);
  };
  // An unknown format hides the length of everything after it: nothing of the section is used.
  auto bad = nvInfo(kGoodAttrs);
  bad.push_back(9);
  bad.push_back(0x2f);
  bad.push_back(0);
  bad.push_back(0);
  EXPECT_EQ(unknownOf(bad).registers, -1);
  // A record whose size runs past the section.
  auto over = nvInfo(kGoodAttrs);
  put(over, over.size(), 0x2f04, 2);
  put(over, over.size(), 0xfff0, 2);
  put(over, over.size(), 1, 4);
  EXPECT_EQ(unknownOf(over).registers, -1);
  // A section ending inside a record header.
  auto cut = nvInfo(kGoodAttrs);
  cut.push_back(4);
  EXPECT_EQ(unknownOf(cut).registers, -1);
  // Symbol indices out of range or of another symbol, short payloads: ignored, the rest is read.
  CubinKernel k = unknownOf(nvInfo({{4, 0x2f, {7, 99}}, {4, 0x2f, {0, 98}}, {4, 0x11, {1}}, {4, 0x2f, {1, 12}}}));
  EXPECT_EQ(k.registers, 12);
  EXPECT_EQ(k.frameBytes, -1);
  // The shared figure stays known: it is not in .nv.info.
  EXPECT_EQ(k.sharedBytes, 0x40);
}

TEST(CubinInfo, RejectsWhatIsNotACubin) {
  EXPECT_FALSE(readCubinInfo(nullptr, 0).ok);
  EXPECT_FALSE(readCubinInfo(nullptr, 100).ok);
  const char ptx[] = "//\n// Generated by NVIDIA NVVM Compiler\n.version 9.0\n.target sm_90a\n";
  EXPECT_FALSE(readCubinInfo(ptx, sizeof ptx).ok);
  // This test binary: an ELF file, but not for the GPU.
  std::ifstream self("/proc/self/exe", std::ios::binary);
  std::vector<char> exe((std::istreambuf_iterator<char>(self)), {});
  if (exe.size() > 64) {
    CubinInfo ci = readCubinInfo(exe.data(), exe.size());
    EXPECT_FALSE(ci.ok);
    EXPECT_NE(ci.error.find("EM_CUDA"), std::string::npos) << ci.error;
  }
  auto blob = makeCubin(nvInfo(kGoodAttrs), 0x40);
  auto elf32 = blob;
  elf32[4] = 1;
  EXPECT_FALSE(readCubinInfo(elf32.data(), elf32.size()).ok);
  auto bigEndian = blob;
  bigEndian[5] = 2;
  EXPECT_FALSE(readCubinInfo(bigEndian.data(), bigEndian.size()).ok);
  // Header fields pointing outside the file, or absurd.
  auto far = blob;
  put(far, 40, uint64_t(1) << 62, 8);  // e_shoff
  EXPECT_FALSE(readCubinInfo(far.data(), far.size()).ok);
  auto wrap = blob;
  put(wrap, 40, ~uint64_t(0) - 10, 8);  // e_shoff + size wraps around
  EXPECT_FALSE(readCubinInfo(wrap.data(), wrap.size()).ok);
  auto many = blob;
  put(many, 60, 0xfff0, 2);  // e_shnum
  EXPECT_FALSE(readCubinInfo(many.data(), many.size()).ok);
  auto tinyEnt = blob;
  put(tinyEnt, 58, 8, 2);  // e_shentsize
  EXPECT_FALSE(readCubinInfo(tinyEnt.data(), tinyEnt.size()).ok);
  auto strIdx = blob;
  put(strIdx, 62, 0x7000, 2);  // e_shstrndx
  EXPECT_FALSE(readCubinInfo(strIdx.data(), strIdx.size()).ok);
}

// Every figure a broken blob yields is either -1 or within reason, and reading never crashes (run
// this under ASan/UBSan to check "never reads outside", as was done when it was written).
void expectSane(const CubinInfo& ci) {
  if (!ci.ok) {
    EXPECT_TRUE(ci.kernels.empty());
    EXPECT_FALSE(ci.error.empty());
    return;
  }
  for (const auto& k : ci.kernels)
    for (int v : {k.registers, k.frameBytes, k.minStackBytes, k.maxStackBytes, k.sharedSectionBytes, k.sharedBytes})
      EXPECT_GE(v, -1);
}

std::vector<std::vector<unsigned char>> sampleCubins() {
  std::vector<std::vector<unsigned char>> out = {makeCubin(nvInfo(kGoodAttrs), 0x600, 0x400)};
  std::string why;
  if (nvrtcAvailable(&why))
    for (const char* arch : {"sm_80", "sm_90a"}) {
      NvrtcResult r = nvrtcCompile(kMulti, "multi.cu", arch, {});
      out.emplace_back(r.cubin.begin(), r.cubin.end());
    }
  return out;
}

TEST(CubinInfo, SurvivesTruncation) {
  for (const auto& full : sampleCubins()) {
    ASSERT_TRUE(readCubinInfo(full.data(), full.size()).ok);
    for (size_t len = 0; len < full.size(); len += (len < 256 ? 1 : 13)) {
      // A copy of exactly `len` bytes, so that a read past the end is a real overrun under ASan.
      std::vector<unsigned char> cut(full.begin(), full.begin() + len);
      CubinInfo ci = readCubinInfo(cut.empty() ? nullptr : cut.data(), cut.size());
      expectSane(ci);
      if (HasFailure()) FAIL() << "at length " << len;
    }
  }
}

TEST(CubinInfo, SurvivesGarbling) {
  uint64_t state = 0x9e3779b97f4a7c15ull;  // xorshift: the same bytes every run
  auto next = [&] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  for (const auto& full : sampleCubins()) {
    for (int round = 0; round < 3000; ++round) {
      std::vector<unsigned char> b = full;
      int flips = 1 + static_cast<int>(next() % 8);
      for (int f = 0; f < flips; ++f) {
        size_t at = next() % b.size();
        // Header and section headers matter most; hit them often.
        if (next() % 3 == 0) at = next() % 64;
        b[at] = static_cast<unsigned char>(next() % 4 == 0 ? 0xff : next());
      }
      expectSane(readCubinInfo(b.data(), b.size()));
      if (HasFailure()) FAIL() << "round " << round;
    }
  }
}

}  // namespace
}  // namespace ssmjit
