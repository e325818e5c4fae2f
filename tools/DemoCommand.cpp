// `ssmjit demo`: the main job. With a GPU it runs the one-token and multi-token selective state
// update on Mamba-2 2.7B heads (fp32 and bf16 state, D, z, dt_bias, softplus, slot indices with a
// pad row) on fresh random inputs with poisoned outputs and checks them against the float64 CPU
// reference. Without one it compiles the same kernels for --arch and runs the CPU reference.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "cache/KernelCache.h"
#include "compiler/Nvrtc.h"
#include "kernels_dsl/CompileKernel.h"
#include "runtime/CudaGraph.h"
#include "runtime/Driver.h"
#include "runtime/ops/SelectiveStateUpdateSpec.h"
#include "ssmjit/error.h"
#include "ssmjit/ops.h"
#include "tests/support/DeviceProblem.h"
#include "tests/support/HostTensor.h"
#include "tests/support/SsuProblem.h"
#include "tools/SsuCall.h"
#include "tools/ToolSupport.h"

namespace ssmjit::tool {
namespace {

using testing::Compared;
using testing::SsuProblem;

struct DemoOptions {
  std::string arch = "sm_90a";
  uint64_t seed = 0;
  bool seedGiven = false;
  bool noGpu = false;
};

// Mamba-2 2.7B heads, batch 4: both state dtypes, one token and L = 4, every optional input, one
// pad row and two slots nobody reads (both must come back untouched). Case k draws its inputs
// from seed + k.
std::vector<SsuCase> demoCases(uint64_t seed) {
  std::vector<SsuCase> cases;
  for (DType st : {DType::F32, DType::BF16})
    for (bool tokens : {false, true}) {
      SsuCase s = testing::mamba2_2p7bHeads();
      s.tokens = tokens;
      s.batch = 4;
      s.L = tokens ? 4 : 1;
      s.stateT = s.inT = s.outT = st;  // serving runs fp32 end to end, or bf16 end to end
      s.hasD = s.hasZ = s.hasDtBias = s.softplus = true;
      s.stateIdx = true;
      s.pads = 1;
      s.spareSlots = 2;
      s.seed = seed + cases.size();
      cases.push_back(s);
    }
  return cases;
}

int64_t countLines(const std::string& s) {
  return static_cast<int64_t>(std::count(s.begin(), s.end(), '\n')) +
         (!s.empty() && s.back() != '\n');
}

std::string resourceCell(int v) { return v < 0 ? "n/a" : std::to_string(v); }

std::vector<std::string> kernelRow(const SsuCase& s, const CompiledKernel& k) {
  std::string spills = "n/a";
  if (k.resources.spillStoreBytes >= 0 || k.resources.spillLoadBytes >= 0)
    spills = resourceCell(k.resources.spillStoreBytes) + "/" + resourceCell(k.resources.spillLoadBytes);
  return {caseLabel(s),
          k.entry,
          resourceCell(k.resources.registers),
          spills,
          resourceCell(k.resources.sharedBytes),
          k.ptx.empty() ? "n/a" : std::to_string(countLines(k.ptx)),
          k.cubin.empty() ? "n/a" : std::to_string(k.cubin.size())};
}

const std::vector<std::string> kKernelHeader = {"case", "entry", "registers", "spills st/ld B",
                                                "shared B", "PTX lines", "CUBIN B"};

void printCacheLine() {
  const cache::DiskCache& disk = processDiskCache();
  std::printf("kernels through the kernel cache (memory, then disk %s (%s), then DSL + MLIR + NVRTC):\n",
              disk.config().dir.empty() ? "(none)" : disk.config().dir.c_str(), diskCacheState(disk).c_str());
}

// The kernel of case `s` as the op's first call gets it, saying where it came from and how long
// that took.
std::shared_ptr<const CompiledKernel> fetchKernel(const SsuCase& s, const Specialization& spec) {
  const WallTimer t;
  const KernelLookup k = lookupOrCompileKernel(spec);
  const double ms = t.ms();
  switch (k.source) {
    case KernelSource::Compiled: std::printf("  %s: compiled in %.1f ms\n", caseLabel(s).c_str(), ms); break;
    case KernelSource::Disk: std::printf("  %s: loaded from the disk cache in %.1f ms\n", caseLabel(s).c_str(), ms); break;
    case KernelSource::Memory: std::printf("  %s: found in the memory cache\n", caseLabel(s).c_str()); break;
  }
  std::fflush(stdout);
  return k.kernel;
}

std::string resultCell(const Compared& c, double tol) {
  return (c.written > 0 && c.violations == 0 && c.relL2 <= tol) ? "PASS" : "FAIL";
}

// ---------------------------------------------------------------------------------------------
// With a GPU.

int runWithGpu(uint64_t seed) {
  driver::ensureContext();
  const std::string arch = driver::currentArch();
  std::printf("device: %s (%s)\nseed: %llu (rerun with --seed %llu)\n\n", driver::deviceName().c_str(),
              arch.c_str(), static_cast<unsigned long long>(seed),
              static_cast<unsigned long long>(seed));
  OwnedStream stream;
  Table results({"case", "tensor", "compared", "max |err|", "rel L2", "tol", "result"});
  std::vector<std::string> header = kKernelHeader;
  header.insert(header.begin() + 2, "first call ms");
  Table kernels(header);
  std::vector<std::string> problems;
  bool allPass = true;

  printCacheLine();
  for (const SsuCase& s : demoCases(seed)) {
    const SsuProblem host = makeProblem(s);
    const testing::DeviceProblem dev(host);  // out goes up poisoned
    // Before the op's first call, which then finds the kernel in memory.
    const std::shared_ptr<const CompiledKernel> k =
        fetchKernel(s, detail::ssuSpecialization(dev.args, s.tokens, arch));

    const WallTimer firstCall;
    testing::runOp(s.tokens, dev.args, stream.get());
    checkDeviceErrors(stream.get());  // synchronises; throws if the kernel flagged a slot
    const double firstCallMs = firstCall.ms();
    const std::vector<uint8_t> gotState = dev.download(testing::kState);
    const std::vector<uint8_t> gotOut = dev.download(testing::kOut);

    SsuProblem ref = host;
    testing::runReference(ref);
    const Compared out = testing::compareTensor(ref.out, gotOut, testing::rowsWritten(host));
    const Compared st = testing::compareTensor(ref.state, gotState, host.slotMayBeWritten);
    for (const auto& [name, c, dt] : {std::tuple{"out", &out, s.outT}, std::tuple{"state", &st, s.stateT}}) {
      const double tol = tolerance(dt);
      const std::string r = resultCell(*c, tol);
      results.add({caseLabel(s), name, std::to_string(c->written), strf("%.3g", c->maxAbsErr),
                   strf("%.3g", c->relL2), strf("%.0e", tol), r});
      if (r != "PASS") {
        allPass = false;
        std::string why;
        if (c->violations > 0)
          why = c->first;
        else
          why = c->written == 0 ? "nothing was compared"
                                : strf("rel L2 %.3g above tolerance %.0e", c->relL2, tol);
        problems.push_back(caseLabel(s) + ", " + name + ": " + why);
      }
    }

    std::vector<std::string> row = kernelRow(s, *k);
    row.insert(row.begin() + 2, strf("%.1f", firstCallMs));
    kernels.add(row);
  }

  std::printf("\nkernels (first call: module load + launch + run, synchronised):\n");
  kernels.printText();
  if (cudaJitCacheMayServe()) std::printf("(%s)\n", cudaJitCacheNote().c_str());
  std::printf("\nresults against the float64 CPU reference (fresh random inputs, outputs poisoned):\n");
  results.printText();
  if (!allPass) {
    std::printf("\nFAIL:\n");
    for (const auto& p : problems) std::printf("  %s\n", p.c_str());
    return kExitFailure;
  }
  std::printf("\nPASS: every case matches the float64 reference\n");
  return kExitOk;
}

// ---------------------------------------------------------------------------------------------
// Without a GPU.

uint64_t fnv1a(const std::vector<uint8_t>& bytes, uint64_t h = 1469598103934665603ull) {
  for (uint8_t b : bytes) h = (h ^ b) * 1099511628211ull;
  return h;
}

int runWithoutGpu(const std::string& arch, uint64_t seed) {
  bool ok = true;
  std::string nvrtcWhy;
  const bool nvrtc = nvrtcAvailable(&nvrtcWhy);
  if (!nvrtc)
    std::printf("NVRTC not available (%s): generating CUDA C++ only, no PTX or CUBIN\n",
                nvrtcWhy.c_str());
  if (nvrtc)
    printCacheLine();
  else  // the cache keys on NVRTC's version: without it, the CUDA C++ is generated uncached
    std::printf("kernels for %s (DSL + MLIR pipeline only, not cached):\n", arch.c_str());
  Table kernels(kKernelHeader);
  for (const SsuCase& s : demoCases(seed)) {
    const Specialization spec = detail::ssuSpecialization(argsWithoutMemory(s), s.tokens, arch);
    if (nvrtc) {
      kernels.add(kernelRow(s, *fetchKernel(s, spec)));
      continue;
    }
    PipelineOptions o;
    o.runNvrtc = false;
    const WallTimer t;
    const CompiledKernel k = compileKernel(spec, o);
    std::printf("  %s: CUDA C++ generated in %.1f ms\n", caseLabel(s).c_str(), t.ms());
    kernels.add(kernelRow(s, k));
  }
  std::printf("\nkernels for %s:\n", arch.c_str());
  kernels.printText();
  if (!nvrtc) ok = false;

  std::printf("\nCPU reference (float64) on random inputs, seed %llu:\n",
              static_cast<unsigned long long>(seed));
  Table ref({"case", "sum(out)", "sum(|out|)", "sum(state)", "fnv1a(out, state)", "check"});
  for (const SsuCase& s : demoCases(seed)) {
    const SsuProblem host = makeProblem(s);
    SsuProblem ran = host;
    testing::runReference(ran);
    // The reference must write finite values to exactly the rows it owns.
    const auto outRows = testing::rowsWritten(host);
    const Compared out = testing::compareTensor(ran.out, ran.out.bytes, host.out.bytes, outRows);
    const Compared st =
        testing::compareTensor(ran.state, ran.state.bytes, host.state.bytes, host.slotMayBeWritten);
    double sumOut = 0, sumAbsOut = 0, sumState = 0;
    const TensorView ov = ran.out.view(), sv = ran.state.view();
    testing::forEachElement(ov, [&](int64_t off, const std::vector<int64_t>& i) {
      if (!outRows[i[0]]) return;
      const double v = testing::loadElement(ov, off);
      sumOut += v;
      sumAbsOut += std::fabs(v);
    });
    testing::forEachElement(sv, [&](int64_t off, const std::vector<int64_t>&) {
      sumState += testing::loadElement(sv, off);
    });
    const bool good = out.violations == 0 && st.violations == 0 && out.written > 0;
    ok = ok && good;
    std::string check = good ? "ok" : "FAIL: " + (out.violations ? out.first : st.first);
    ref.add({caseLabel(s), strf("%.6f", sumOut), strf("%.6f", sumAbsOut), strf("%.6f", sumState),
             strf("%016llx", static_cast<unsigned long long>(
                                 fnv1a(ran.state.bytes, fnv1a(ran.out.bytes)))),
             check});
  }
  ref.printText();
  if (!nvrtc) {
    std::printf("\nFAIL: kernels were not compiled to PTX/CUBIN: NVRTC not available (%s)\n",
                nvrtcWhy.c_str());
    return kExitFailure;
  }
  std::printf(ok ? "\nOK: kernels compiled for %s and the CPU reference ran (no GPU checks)\n"
                 : "\nFAIL: the CPU reference produced bad values (see the table)\n",
              arch.c_str());
  return ok ? kExitOk : kExitFailure;
}

int runDemo(const DemoOptions& o) {
  checkArch(o.arch, "--arch");
  const uint64_t seed = o.seedGiven ? o.seed : (static_cast<uint64_t>(std::random_device{}()) << 32) ^
                                                    std::random_device{}();
  std::string why;
  if (o.noGpu) {
    why = "--no-gpu given";
  } else if (driver::available(&why)) {
    return runWithGpu(seed);
  }
  std::printf("no GPU found (%s): compiling kernels and running the CPU reference only\n\n",
              why.c_str());
  return runWithoutGpu(o.arch, seed);
}

}  // namespace

Command addDemoCommand(CLI::App& parent) {
  auto o = std::make_shared<DemoOptions>();
  CLI::App* app = parent.add_subcommand(
      "demo",
      "Run selective_state_update (one token) and selective_state_update_tokens (L = 4) on Mamba-2 "
      "2.7B heads (H 80, P 64, N 128, G 1, batch 4; fp32 and bf16 state; D, z, dt_bias, softplus, "
      "state_batch_indices with a pad row) and check them against the float64 CPU reference. "
      "Without a GPU: compile the same kernels for --arch and run the CPU reference only. "
      "Exit 0 when everything passes, 1 otherwise.");
  app->add_option("--arch", o->arch,
                  "NVRTC target when no GPU is present (with a GPU the device's own arch is used)")
      ->capture_default_str();
  CLI::Option* seedOpt =
      app->add_option("--seed", o->seed, "Random seed (default: fresh each run; printed)");
  app->add_flag("--no-gpu", o->noGpu, "Behave as if no GPU were present (compile + CPU reference)");
  return {app, [o, seedOpt] {
            o->seedGiven = seedOpt->count() > 0;
            return runDemo(*o);
          }};
}

}  // namespace ssmjit::tool
