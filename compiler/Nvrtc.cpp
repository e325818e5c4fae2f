// NVRTC through dlopen: <nvrtc.h> supplies the types only, so nothing links against libnvrtc and
// a binary without the toolkit still starts (and serves from the disk cache).
#include "compiler/Nvrtc.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <nvrtc.h>
#include <sys/stat.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <sstream>

#include "compiler/CubinInfo.h"
#include "compiler/DynamicLibrary.h"
#include "compiler/Knobs.h"
#include "compiler/ToolkitLibrary.h"
#include "ssmjit/error.h"

namespace ssmjit {
namespace {

struct NvrtcApi {
  decltype(&::nvrtcVersion) version = nullptr;
  decltype(&::nvrtcGetErrorString) getErrorString = nullptr;
  decltype(&::nvrtcCreateProgram) createProgram = nullptr;
  decltype(&::nvrtcDestroyProgram) destroyProgram = nullptr;
  decltype(&::nvrtcCompileProgram) compileProgram = nullptr;
  decltype(&::nvrtcGetProgramLogSize) getProgramLogSize = nullptr;
  decltype(&::nvrtcGetProgramLog) getProgramLog = nullptr;
  decltype(&::nvrtcGetPTXSize) getPTXSize = nullptr;
  decltype(&::nvrtcGetPTX) getPTX = nullptr;
  decltype(&::nvrtcGetCUBINSize) getCUBINSize = nullptr;
  decltype(&::nvrtcGetCUBIN) getCUBIN = nullptr;
  std::string error;       // why loading failed; empty on success
  std::string libPath;     // the name dlopen succeeded with
  std::string versionStr;  // "13.0"
  std::string identity;    // "13.0 build-id 65be0db3..."
};

// The GNU build id (hex) of the shared object that contains `symbol`, read from its PT_NOTE
// segments in memory; "size <bytes>" of its file when it has none.
std::string loadedBuildId(void* symbol) {
  Dl_info info{};
  if (!dladdr(symbol, &info)) return "build unknown";
  struct Query {
    const void* base;
    std::string id;
  } q{info.dli_fbase, ""};
  dl_iterate_phdr(
      [](struct dl_phdr_info* obj, size_t, void* data) {
        auto* q = static_cast<Query*>(data);
        if (reinterpret_cast<const void*>(obj->dlpi_addr) != q->base) return 0;
        for (int i = 0; i < obj->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = obj->dlpi_phdr[i];
          if (ph.p_type != PT_NOTE) continue;
          const char* p = reinterpret_cast<const char*>(obj->dlpi_addr + ph.p_vaddr);
          const char* end = p + ph.p_memsz;
          while (p + sizeof(ElfW(Nhdr)) <= end) {
            const auto* n = reinterpret_cast<const ElfW(Nhdr)*>(p);
            const char* name = p + sizeof(ElfW(Nhdr));
            const char* desc = name + ((n->n_namesz + 3) & ~3u);
            if (desc + n->n_descsz > end) break;
            if (n->n_type == NT_GNU_BUILD_ID && n->n_namesz == 4 && std::memcmp(name, "GNU", 4) == 0) {
              static const char* hex = "0123456789abcdef";
              for (unsigned k = 0; k < n->n_descsz; ++k) {
                const auto b = static_cast<unsigned char>(desc[k]);
                q->id += hex[b >> 4];
                q->id += hex[b & 15];
              }
              return 1;
            }
            p = desc + ((n->n_descsz + 3) & ~3u);
          }
        }
        return 1;
      },
      &q);
  if (!q.id.empty()) return "build-id " + q.id;
  struct stat st {};
  if (info.dli_fname && ::stat(info.dli_fname, &st) == 0) return "size " + std::to_string(st.st_size);
  return "build unknown";
}

const NvrtcApi& nvrtcApi() {
  static NvrtcApi api;
  static std::once_flag once;
  std::call_once(once, [] {
    DynamicLibrary lib(toolkitLibraryCandidates({"libnvrtc.so.13", "libnvrtc.so"}));
    lib.resolve(api.version, {"nvrtcVersion"});
    lib.resolve(api.getErrorString, {"nvrtcGetErrorString"});
    lib.resolve(api.createProgram, {"nvrtcCreateProgram"});
    lib.resolve(api.destroyProgram, {"nvrtcDestroyProgram"});
    lib.resolve(api.compileProgram, {"nvrtcCompileProgram"});
    lib.resolve(api.getProgramLogSize, {"nvrtcGetProgramLogSize"});
    lib.resolve(api.getProgramLog, {"nvrtcGetProgramLog"});
    lib.resolve(api.getPTXSize, {"nvrtcGetPTXSize"});
    lib.resolve(api.getPTX, {"nvrtcGetPTX"});
    lib.resolve(api.getCUBINSize, {"nvrtcGetCUBINSize"});
    lib.resolve(api.getCUBIN, {"nvrtcGetCUBIN"});
    api.libPath = lib.name();
    api.error = lib.whyUnusable("libnvrtc", "set CUDA_HOME or LD_LIBRARY_PATH", " (NVRTC >= 11.1 needed)");
    if (!api.error.empty()) return;
    int major = 0, minor = 0;
    if (nvrtcResult r = api.version(&major, &minor); r != NVRTC_SUCCESS) {
      api.error = api.libPath + ": nvrtcVersion failed: " + api.getErrorString(r);
      return;
    }
    api.versionStr = std::to_string(major) + "." + std::to_string(minor);
    // The build: the GNU build id of the loaded library (file names differ between installs of
    // one build: libnvrtc.so.13 here, libnvrtc.so.13.0.88 there), else its file size.
    api.identity = api.versionStr + " " + loadedBuildId(reinterpret_cast<void*>(api.version));
    // The handle stays open for the life of the process: programs may be compiled until exit.
  });
  return api;
}

const NvrtcApi& requireApi() {
  const NvrtcApi& api = nvrtcApi();
  if (!api.error.empty()) throw Error(Error::Kind::Unavailable, "NVRTC unavailable: " + api.error);
  return api;
}

void checkNvrtc(const NvrtcApi& api, nvrtcResult r, const char* what, const std::string& name) {
  if (r != NVRTC_SUCCESS)
    throw Error(Error::Kind::Compile, std::string(what) + " for " + name + " failed: " + api.getErrorString(r));
}

// The first `maxLines` lines of `src`, numbered as NVRTC's log numbers them.
std::string numberedSource(const std::string& src, int maxLines) {
  std::string out;
  int line = 1;
  size_t pos = 0;
  while (pos < src.size() && line <= maxLines) {
    size_t end = src.find('\n', pos);
    if (end == std::string::npos) end = src.size();
    char num[16];
    std::snprintf(num, sizeof num, "%5d | ", line);
    out += num;
    out.append(src, pos, end - pos);
    out += '\n';
    pos = end + 1;
    ++line;
  }
  if (pos < src.size()) out += "  ... (source continues)\n";
  return out;
}

// Reads the number before `unit` in `line` ("Used 40 registers" -> 40 for unit " registers").
bool numberBefore(const std::string& line, const char* unit, int* value) {
  size_t at = line.find(unit);
  if (at == std::string::npos || at == 0) return false;
  size_t b = at;
  while (b > 0 && std::isdigit(static_cast<unsigned char>(line[b - 1]))) --b;
  if (b == at) return false;
  *value = std::atoi(line.c_str() + b);
  return true;
}

}  // namespace

bool nvrtcAvailable(std::string* why) {
  try {
    const NvrtcApi& api = nvrtcApi();
    if (!api.error.empty()) {
      if (why) *why = api.error;
      return false;
    }
    return true;
  } catch (const std::exception& e) {  // never throws, whatever the loader does
    if (why) *why = e.what();
    return false;
  }
}

std::string nvrtcVersion() { return requireApi().versionStr; }

// ptxas -v prints, per entry function:
//   ptxas info    : Compiling entry function 'k' for 'sm_90a'
//   ptxas info    : Function properties for k
//   ptxas         .     40 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
//   ptxas info    : Used 10 registers, used 1 barriers, 272 bytes cumulative stack size, 256 bytes smem, 364 bytes
//   cmem[0]
// Non-inlined device functions get a "Function properties" block too; only entries count, but an
// entry's "cumulative stack size" (printed when it has a stack) includes its callees' frames: that is
// the local memory a thread needs, and what the CUBIN records (EIATTR_MIN_STACK_SIZE), so it wins
// over the entry's own frame. With several entries the maximum of each figure is reported (the
// conservative one for occupancy).
ResourceUsage parsePtxasResources(const std::string& log) {
  ResourceUsage ru;
  std::set<std::string> entries;
  bool inEntryProps = false;
  std::istringstream in(log);
  std::string line;
  auto takeMax = [](int& dst, int v) { dst = dst < v ? v : dst; };
  while (std::getline(in, line)) {
    if (size_t at = line.find("Compiling entry function '"); at != std::string::npos) {
      size_t b = at + std::strlen("Compiling entry function '");
      size_t e = line.find('\'', b);
      if (e != std::string::npos) entries.insert(line.substr(b, e - b));
      continue;
    }
    if (size_t at = line.find("Function properties for "); at != std::string::npos) {
      std::string fn = line.substr(at + std::strlen("Function properties for "));
      while (!fn.empty() && std::isspace(static_cast<unsigned char>(fn.back()))) fn.pop_back();
      inEntryProps = entries.count(fn) > 0;
      continue;
    }
    int v = 0;
    if (line.find("bytes stack frame") != std::string::npos) {
      if (inEntryProps) {
        if (numberBefore(line, " bytes stack frame", &v)) takeMax(ru.localBytes, v);
        if (numberBefore(line, " bytes spill stores", &v)) takeMax(ru.spillStoreBytes, v);
        if (numberBefore(line, " bytes spill loads", &v)) takeMax(ru.spillLoadBytes, v);
      }
      inEntryProps = false;
      continue;
    }
    if (numberBefore(line, " registers", &v) && line.find("Used ") != std::string::npos) {
      takeMax(ru.registers, v);
      // ptxas omits "smem" when the kernel uses none.
      int smem = 0;
      numberBefore(line, " bytes smem", &smem);
      takeMax(ru.sharedBytes, smem);
      if (numberBefore(line, " bytes cumulative stack size", &v)) takeMax(ru.localBytes, v);
    }
  }
  return ru;
}

ResourceUsage kernelResources(const std::vector<char>& cubin, const std::string& log, const std::string& ptx) {
  const ResourceUsage fromLog = parsePtxasResources(log);
  const ResourceUsage fromElf = cubinResources(readCubinInfo(cubin.data(), cubin.size()));
  ResourceUsage ru;
  // The CUBIN is always there and the same whether or not ptxas' report is: it decides.
  ru.registers = fromElf.registers >= 0 ? fromElf.registers : fromLog.registers;
  ru.sharedBytes = fromElf.sharedBytes >= 0 ? fromElf.sharedBytes : fromLog.sharedBytes;
  ru.localBytes = fromElf.localBytes >= 0 ? fromElf.localBytes : fromLog.localBytes;
  // Spills are only in ptxas' report. Without it they are still known to be none when no kernel
  // has a stack: register spills go to the stack frame (unless the PTX opts into spilling to
  // shared memory, PTX ISA 9.0's `.pragma "enable_smem_spilling"`).
  ru.spillStoreBytes = fromLog.spillStoreBytes;
  ru.spillLoadBytes = fromLog.spillLoadBytes;
  if (fromElf.localBytes == 0 && ptx.find("enable_smem_spilling") == std::string::npos) {
    if (ru.spillStoreBytes < 0) ru.spillStoreBytes = 0;
    if (ru.spillLoadBytes < 0) ru.spillLoadBytes = 0;
  }
  return ru;
}

std::vector<std::string> nvrtcOptions(const std::string& arch) {
  // --fmad=false: the only fused multiply-adds are the IR's math.fma (form-fma), so rounding does
  // not depend on how NVVM or ptxas see the control flow.
  // --minimal: no texture, device-runtime or CUDA API types, none of which the kernels use; it
  // saves ~12 ms of every compile's front end. Most of a compile is NVVM (short per-register loops
  // come unrolled from the emitter, Emitter::forConst, since NVVM took long over them).
  // --Ofast-compile cuts NVVM's time but leaves the kernels' register arrays on the stack (3.4-4 KB
  // a thread, kernels tens to hundreds of times slower), and --split-compile changes nothing for
  // one kernel, so neither is used.
  std::vector<std::string> opts = {"--gpu-architecture=" + arch, "-std=c++17", "-default-device", "--fmad=false",
                                   "--minimal"};
  // ptxas' verbose report is how we learn spills (the other figures come from the CUBIN). NVRTC
  // leaves it out when the driver's compute cache served the compile.
  if (arch.rfind("sm_", 0) == 0) opts.push_back("-Xptxas=-v");
  const std::string extra = knobValue("SSMJIT_NVRTC_OPTIONS");
  size_t pos = 0;
  while ((pos = extra.find_first_not_of(" \t", pos)) != std::string::npos) {
    const size_t end = extra.find_first_of(" \t", pos);
    opts.push_back(extra.substr(pos, end == std::string::npos ? std::string::npos : end - pos));
    pos = end;
  }
  return opts;
}

std::string nvrtcIdentity() { return requireApi().identity; }

NvrtcResult nvrtcCompile(const std::string& source, const std::string& name, const std::string& arch,
                         const std::vector<std::pair<std::string, std::string>>& headers,
                         const std::vector<std::string>& extraOptions) {
  const NvrtcApi& api = requireApi();
  const bool realArch = arch.rfind("sm_", 0) == 0;
  if (!realArch && arch.rfind("compute_", 0) != 0)
    throw Error(Error::Kind::InvalidArgument,
                "nvrtcCompile(" + name + "): arch '" + arch + "' is invalid (expected sm_XX[a] or compute_XX[a])");

  std::vector<const char*> hdrSrc, hdrName;
  for (const auto& h : headers) {
    hdrName.push_back(h.first.c_str());
    hdrSrc.push_back(h.second.c_str());
  }
  nvrtcProgram prog = nullptr;
  checkNvrtc(api,
             api.createProgram(&prog, source.c_str(), name.c_str(), static_cast<int>(headers.size()), hdrSrc.data(),
                               hdrName.data()),
             "nvrtcCreateProgram", name);
  // Destroys the program on every path out, including throws.
  struct Guard {
    const NvrtcApi& api;
    nvrtcProgram* prog;
    ~Guard() { api.destroyProgram(prog); }
  } guard{api, &prog};

  std::vector<std::string> opts = nvrtcOptions(arch);
  opts.insert(opts.end(), extraOptions.begin(), extraOptions.end());
  std::vector<const char*> optPtrs;
  for (const auto& o : opts) optPtrs.push_back(o.c_str());

  nvrtcResult cr = api.compileProgram(prog, static_cast<int>(optPtrs.size()), optPtrs.data());

  NvrtcResult out;
  size_t logSize = 0;
  checkNvrtc(api, api.getProgramLogSize(prog, &logSize), "nvrtcGetProgramLogSize", name);
  if (logSize > 1) {
    out.log.resize(logSize);
    checkNvrtc(api, api.getProgramLog(prog, &out.log[0]), "nvrtcGetProgramLog", name);
    out.log.resize(logSize - 1);  // drop the terminating NUL
  }

  if (cr != NVRTC_SUCCESS) {
    std::string optLine;
    for (const auto& o : opts) optLine += " " + o;
    throw Error(Error::Kind::Compile, "NVRTC failed to compile " + name + " for " + arch + " (" +
                                          api.getErrorString(cr) + ")\noptions:" + optLine + "\n--- log ---\n" +
                                          out.log + (out.log.empty() || out.log.back() == '\n' ? "" : "\n") +
                                          "--- source (first 60 lines) ---\n" + numberedSource(source, 60));
  }

  size_t ptxSize = 0;
  checkNvrtc(api, api.getPTXSize(prog, &ptxSize), "nvrtcGetPTXSize", name);
  if (ptxSize > 1) {
    out.ptx.resize(ptxSize);
    checkNvrtc(api, api.getPTX(prog, &out.ptx[0]), "nvrtcGetPTX", name);
    out.ptx.resize(ptxSize - 1);
  }
  if (out.ptx.empty())
    throw Error(Error::Kind::Compile, "NVRTC compiled " + name + " for " + arch + " but produced no PTX");

  if (realArch) {
    size_t cubinSize = 0;
    checkNvrtc(api, api.getCUBINSize(prog, &cubinSize), "nvrtcGetCUBINSize", name);
    if (cubinSize == 0)
      throw Error(Error::Kind::Compile, "NVRTC compiled " + name + " for " + arch +
                                            " but produced no CUBIN (expected SASS for a sm_ target)");
    out.cubin.resize(cubinSize);
    checkNvrtc(api, api.getCUBIN(prog, out.cubin.data()), "nvrtcGetCUBIN", name);
    out.resources = kernelResources(out.cubin, out.log, out.ptx);
  }
  return out;
}

}  // namespace ssmjit
