// Loaded kernels per CUDA context and their launch. This is the per-call hot path of every op:
// a cached call costs the specialisation hash, a thread-local probe (or one mutex and one bucket
// lookup), and cuLaunchKernel with arguments packed on the stack.
#include "runtime/LoadedKernel.h"

#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <string>
#include <unordered_map>

#include "cache/KernelCache.h"
#include "compiler/Knobs.h"
#include "runtime/Driver.h"
#include "ssmjit/error.h"

namespace ssmjit {
namespace {

// Generated kernels take at most this many parameters (the widest op schema has ~70); checked when
// a kernel is loaded so that launchKernel can pack into fixed stack arrays.
constexpr size_t kMaxParams = 128;

struct Entry {
  Specialization spec;
  LoadedKernel kernel;
};

// Buckets keyed by the precomputed Specialization::hash(), so a lookup hashes the key once (an
// unordered_map<Specialization, ...> would hash it again). Entries are never erased: the
// references handed out stay valid for the life of the process.
using Table = std::unordered_map<size_t, std::vector<std::unique_ptr<Entry>>>;

std::mutex gMutex;
std::unordered_map<CUcontext, Table> gTables;

// Last hits of this thread. Several slots because a model alternates between a few
// specialisations (layers with different shapes) within one step.
struct HitSlot {
  CUcontext ctx = nullptr;
  size_t hash = 0;
  const Entry* entry = nullptr;
};
constexpr int kHitSlots = 4;
thread_local HitSlot tHits[kHitSlots];
thread_local unsigned tNextSlot = 0;

bool forcePtx() {
  static const bool force = [] { return knobValue("SSMJIT_FORCE_PTX") == "1"; }();
  return force;
}

const Entry* findLocked(CUcontext ctx, size_t hash, const Specialization& spec) {
  auto t = gTables.find(ctx);
  if (t == gTables.end()) return nullptr;
  auto b = t->second.find(hash);
  if (b == t->second.end()) return nullptr;
  for (const auto& e : b->second)
    if (e->spec == spec) return e.get();
  return nullptr;
}

std::string describeGrid(const unsigned grid[3], int threads) {
  return "grid (" + std::to_string(grid[0]) + ", " + std::to_string(grid[1]) + ", " + std::to_string(grid[2]) +
         "), block (" + std::to_string(threads) + ", 1, 1)";
}

// Loads `image` (CUBIN, or NUL-terminated PTX) and returns the module, or the driver's error with
// the JIT log appended in *error.
CUmodule loadModule(const void* image, std::string* error) {
  const driver::Api& a = driver::api();
  char log[8192] = {};
  CUjit_option opts[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void* vals[] = {log, reinterpret_cast<void*>(static_cast<uintptr_t>(sizeof log - 1))};
  CUmodule mod = nullptr;
  CUresult r = a.cuModuleLoadDataEx(&mod, image, 2, opts, vals);
  if (r == CUDA_SUCCESS) return mod;
  const char* name = nullptr;
  a.cuGetErrorName(r, &name);
  *error = name ? name : ("CUresult " + std::to_string(static_cast<int>(r)));
  if (log[0]) *error += std::string(" (JIT log: ") + log + ")";
  return nullptr;
}

// A kernel's dynamic shared memory beyond the default 48 KiB a block (static included) needs the
// function's limit raised, once per loaded function; more than the device lets a block opt into
// is refused here, naming the kernel, rather than failing every launch.
void allowDynamicShared(CUfunction fn, const CompiledKernel& code) {
  constexpr int kDefaultLimit = 48 * 1024;
  if (code.dynamicSharedBytes <= 0) return;
  const driver::Api& a = driver::api();
  const std::string what = "(" + code.entry + ", ";
  int staticBytes = 0, optin = 0;
  CUdevice dev = 0;
  driver::check(a.cuFuncGetAttribute(&staticBytes, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, fn),
                ("cuFuncGetAttribute" + what + "SHARED_SIZE_BYTES)").c_str());
  driver::check(a.cuCtxGetDevice(&dev), "cuCtxGetDevice");
  driver::check(a.cuDeviceGetAttribute(&optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev),
                "cuDeviceGetAttribute(MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)");
  if (staticBytes + code.dynamicSharedBytes > optin)
    throw Error(Error::Kind::Cuda, "kernel " + code.entry + " asks for " + std::to_string(code.dynamicSharedBytes) +
                                       " bytes of dynamic shared memory (and " + std::to_string(staticBytes) +
                                       " static); the device allows a block " + std::to_string(optin) + " bytes");
  if (staticBytes + code.dynamicSharedBytes > kDefaultLimit)
    driver::check(a.cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, code.dynamicSharedBytes),
                  ("cuFuncSetAttribute" + what + "MAX_DYNAMIC_SHARED_SIZE_BYTES, " +
                   std::to_string(code.dynamicSharedBytes) + ")")
                      .c_str());
}

std::unique_ptr<Entry> loadEntry(const Specialization& spec, const ArgSchema& schema) {
  auto entry = std::make_unique<Entry>();
  entry->spec = spec;
  LoadedKernel& lk = entry->kernel;
  lk.code = getOrCompileKernel(spec);
  if (!lk.code) throw Error(Error::Kind::Internal, "getOrCompileKernel returned no kernel for " + spec.canonical());
  const CompiledKernel& code = *lk.code;

  if (code.params.size() > kMaxParams)
    throw Error(Error::Kind::Internal, "kernel " + code.entry + " has " + std::to_string(code.params.size()) +
                                           " parameters; the launcher packs at most " + std::to_string(kMaxParams));
  if (code.numThreads < 1 || code.numThreads > 1024)
    throw Error(Error::Kind::Internal, "kernel " + code.entry + " was generated for " +
                                           std::to_string(code.numThreads) + " threads per block (expected 1..1024)");

  // Resolve parameters by name before touching the driver: a schema mismatch is a generator bug
  // and should say so even on a machine where loading would also fail.
  lk.paramToArg.resize(code.params.size());
  for (size_t i = 0; i < code.params.size(); ++i) {
    int found = -1;
    for (int j = 0; j < schema.count; ++j)
      if (code.params[i].name == schema.names[j]) {
        found = j;
        break;
      }
    if (found < 0)
      throw Error(Error::Kind::Internal, "kernel " + code.entry + " (" + spec.kernel + ") takes parameter '" +
                                             code.params[i].name + "' (#" + std::to_string(i) +
                                             ") that the op's argument schema (" + std::to_string(schema.count) +
                                             " names) does not have");
    lk.paramToArg[i] = found;
  }

  const driver::Api& a = driver::api();
  std::string cubinError;
  if (!code.cubin.empty() && !forcePtx()) lk.module = loadModule(code.cubin.data(), &cubinError);
  if (!lk.module) {
    // The driver may refuse our CUBIN (an older driver, a different GPU than compiled for); the
    // PTX is JIT-compiled by the driver instead.
    if (code.ptx.empty())
      throw Error(Error::Kind::Cuda, "cuModuleLoadDataEx(" + code.entry + ", CUBIN for " + code.arch +
                                         ") failed: " + cubinError + "; and no PTX to fall back on");
    std::string ptxError;
    lk.module = loadModule(code.ptx.c_str(), &ptxError);
    if (!lk.module) {
      std::string msg = "cuModuleLoadDataEx(" + code.entry + ", PTX for " + code.arch + ") failed: " + ptxError;
      if (!cubinError.empty()) msg += "; the CUBIN was refused first: " + cubinError;
      throw Error(Error::Kind::Cuda, msg);
    }
    lk.loadedFromPtx = true;
  }
  // Unload on any failure below.
  struct Unload {
    const driver::Api& a;
    CUmodule& m;
    bool armed = true;
    ~Unload() {
      if (armed && m) a.cuModuleUnload(m);
    }
  } unload{a, lk.module};

  driver::check(a.cuModuleGetFunction(&lk.function, lk.module, code.entry.c_str()),
                ("cuModuleGetFunction(" + code.entry + ")").c_str());
  int maxThreads = 0;
  driver::check(a.cuFuncGetAttribute(&maxThreads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, lk.function),
                ("cuFuncGetAttribute(" + code.entry + ", MAX_THREADS_PER_BLOCK)").c_str());
  if (maxThreads < code.numThreads)
    throw Error(Error::Kind::Internal,
                "kernel " + code.entry + " was generated for " + std::to_string(code.numThreads) +
                    " threads per block, but with " + std::to_string(code.resources.registers) +
                    " registers per thread the device allows only " + std::to_string(maxThreads));
  allowDynamicShared(lk.function, code);
  unload.armed = false;
  return entry;
}

}  // namespace

const LoadedKernel& loadedKernel(const Specialization& spec, const ArgSchema& schema) {
  CUcontext ctx = driver::ensureContext();
  const size_t hash = spec.hash();
  for (const HitSlot& s : tHits)
    if (s.entry && s.ctx == ctx && s.hash == hash && s.entry->spec == spec) return s.entry->kernel;

  const Entry* found = nullptr;
  {
    std::lock_guard<std::mutex> lock(gMutex);
    found = findLocked(ctx, hash, spec);
  }
  if (!found) {
    // Compile and load outside the lock: a miss can take seconds and must not stall other
    // threads' hits. getOrCompileKernel compiles a key once even when misses race; a lost load
    // race only unloads the duplicate module.
    std::unique_ptr<Entry> fresh = loadEntry(spec, schema);
    std::lock_guard<std::mutex> lock(gMutex);
    found = findLocked(ctx, hash, spec);
    if (found) {
      driver::api().cuModuleUnload(fresh->kernel.module);
    } else {
      found = fresh.get();
      gTables[ctx][hash].push_back(std::move(fresh));
    }
  }
  tHits[tNextSlot++ % kHitSlots] = HitSlot{ctx, hash, found};
  return found->kernel;
}

void launchKernel(const LoadedKernel& k, const ArgValue* values, const unsigned grid[3], CUstream stream) {
  // An empty grid has nothing to do (batch 0); the driver would reject it as invalid.
  if (grid[0] == 0 || grid[1] == 0 || grid[2] == 0) return;
  const CompiledKernel& code = *k.code;
  const size_t n = code.params.size();
  union Slot {
    void* ptr;
    int64_t i64;
    int32_t i32;
    float f32;
  };
  Slot slots[kMaxParams];
  void* args[kMaxParams];
  for (size_t i = 0; i < n; ++i) {
    const ArgValue& v = values[k.paramToArg[i]];
    switch (code.params[i].kind) {
      case KernelParam::Kind::Ptr:
        slots[i].ptr = v.ptr;
        break;
      case KernelParam::Kind::I64:
        slots[i].i64 = v.i64;
        break;
      case KernelParam::Kind::F32:
        slots[i].f32 = v.f32;
        break;
      case KernelParam::Kind::I32:
        // A value past 32 bits means the op should have asked for 64-bit indexing.
        if (v.i64 < std::numeric_limits<int32_t>::min() || v.i64 > std::numeric_limits<int32_t>::max())
          throw Error(Error::Kind::Internal, "kernel " + code.entry + ": int32 parameter '" + code.params[i].name +
                                                 "' got " + std::to_string(v.i64) + ", which needs 64-bit indexing");
        slots[i].i32 = static_cast<int32_t>(v.i64);
        break;
    }
    args[i] = &slots[i];
  }
  const driver::Api& a = driver::api();
  CUresult r = a.cuLaunchKernel(k.function, grid[0], grid[1], grid[2], static_cast<unsigned>(code.numThreads), 1, 1,
                                static_cast<unsigned>(code.dynamicSharedBytes), stream, args, nullptr);
  if (r != CUDA_SUCCESS)
    driver::check(r, ("cuLaunchKernel(" + code.entry + ", " + describeGrid(grid, code.numThreads) + ")").c_str());
}

}  // namespace ssmjit
