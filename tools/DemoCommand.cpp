// `ssmjit demo`: the main job. With a GPU it runs every op family (the one-token and multi-token
// selective state update, the Mamba-2 decode step, causal conv1d forward, update and backward, the
// Mamba-1 selective scan forward and backward, the Mamba-2 SSD chunked scan forward) on small
// problems (DemoCases.h) with fresh random inputs and poisoned outputs, and checks every output
// against the float64 CPU reference. Without one it compiles the same kernels for --arch, prints
// their resources and runs the CPU reference.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cache/KernelCache.h"
#include "compiler/Nvrtc.h"
#include "kernels_dsl/CompileKernel.h"
#include "runtime/CudaGraph.h"
#include "runtime/Driver.h"
#include "ssmjit/error.h"
#include "ssmjit/ops.h"
#include "tools/DemoCases.h"
#include "tools/GpuTiming.h"
#include "tools/ToolSupport.h"

namespace ssmjit::tool {
namespace {

using testing::Compared;
using testing::HostTensor;

struct DemoOptions {
  std::string arch = "sm_90a";
  uint64_t seed = 0;
  bool seedGiven = false;
  bool noGpu = false;
};

int64_t countLines(const std::string& s) {
  return static_cast<int64_t>(std::count(s.begin(), s.end(), '\n')) + (!s.empty() && s.back() != '\n');
}

std::string resourceCell(int v) { return v < 0 ? "n/a" : std::to_string(v); }

const std::vector<std::string> kKernelHeader = {"family",   "entry",     "registers", "spills st/ld B",
                                                "shared B", "PTX lines", "CUBIN B"};

std::vector<std::string> kernelRow(const DemoCase& c, const CompiledKernel& k) {
  std::string spills = "n/a";
  if (k.resources.spillStoreBytes >= 0 || k.resources.spillLoadBytes >= 0)
    spills = resourceCell(k.resources.spillStoreBytes) + "/" + resourceCell(k.resources.spillLoadBytes);
  return {c.family,
          k.entry,
          resourceCell(k.resources.registers),
          spills,
          resourceCell(k.resources.sharedBytes),
          k.ptx.empty() ? "n/a" : std::to_string(countLines(k.ptx)),
          k.cubin.empty() ? "n/a" : std::to_string(k.cubin.size())};
}

std::string caseLabel(const DemoCase& c) { return c.family + " " + c.shape; }

void printCacheLine() {
  const cache::DiskCache& disk = processDiskCache();
  std::printf("kernels through the kernel cache (memory, then disk %s (%s), then DSL + MLIR + NVRTC):\n",
              disk.config().dir.empty() ? "(none)" : disk.config().dir.c_str(), diskCacheState(disk).c_str());
}

// A kernel of case `c` as the op's first call gets it, saying where it came from and how long
// that took.
std::shared_ptr<const CompiledKernel> fetchKernel(const DemoCase& c, const Specialization& spec) {
  const WallTimer t;
  const KernelLookup k = lookupOrCompileKernel(spec);
  const double ms = t.ms();
  const std::string what = caseLabel(c) + " (" + spec.kernel + ")";
  switch (k.source) {
    case KernelSource::Compiled:
      std::printf("  %s: compiled in %.1f ms\n", what.c_str(), ms);
      break;
    case KernelSource::Disk:
      std::printf("  %s: loaded from the disk cache in %.1f ms\n", what.c_str(), ms);
      break;
    case KernelSource::Memory:
      std::printf("  %s: found in the memory cache\n", what.c_str());
      break;
  }
  std::fflush(stdout);
  return k.kernel;
}

// One output of a case after a call: what it holds (`got`) against the reference's result (`ref`)
// and what it held before the call.
struct Checked {
  std::string name;
  Compared c;
  testing::Bound bound;
  bool pass() const { return c.written > 0 && testing::outside(c, bound).empty(); }
  std::string why() const { return c.written == 0 ? "nothing was compared" : testing::outside(c, bound); }
  // The rel L2 error over its bound (an exact bound: 0 or infinity).
  double ratio() const {
    const double b = bound.relL2(c.written);
    return b > 0 ? c.relL2 / b : c.relL2 > 0 ? INFINITY : 0;
  }
};

std::vector<Checked> checkOutputs(DemoCase& before, DemoCase& ref, const DemoCall& ran) {
  std::vector<Checked> out;
  for (const DemoOutput& o : before.outputs()) {
    const HostTensor& expected = *ref.tensors()[o.index];
    out.push_back({o.name,
                   testing::compareTensor(expected, ran.bytes(o.index), before.tensors()[o.index]->bytes, o.written),
                   testing::bound(expected.meta.dtype, o.fp32, o.twiceRounded)});
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// With a GPU.

int runWithGpu(uint64_t seed) {
  driver::ensureContext();
  const std::string arch = driver::currentArch();
  std::printf("device: %s (%s)\nseed: %llu (rerun with --seed %llu)\n\n", driver::deviceName().c_str(), arch.c_str(),
              static_cast<unsigned long long>(seed), static_cast<unsigned long long>(seed));
  OwnedStream stream;
  Table kernels(kKernelHeader);
  Table results(
      {"family", "shape", "worst output", "max |err|", "rel L2 / bound", "first call ms", "us per call", "result"});
  std::vector<std::string> problems;

  printCacheLine();
  for (const auto& make : demoCases(seed)) {
    const std::unique_ptr<DemoCase> run = make(), ref = make();  // the same problem twice
    const DemoCall call = run->deviceCall();
    // Before the op's first call, which then finds its kernels in memory.
    for (const Specialization& spec : call.kernels(arch)) kernels.add(kernelRow(*run, *fetchKernel(*run, spec)));
    const WallTimer firstCall;
    call.run(stream.get());
    checkDeviceErrors(stream.get());  // synchronises; throws if a kernel flagged an index
    const double firstCallMs = firstCall.ms();
    ref->hostCall().run(nullptr);
    const std::vector<Checked> checked = checkOutputs(*run, *ref, call);
    // Timed after the check: the calls update states in place, so their results differ from here on.
    const double us = callTimeUs([&](CUstream s) { call.run(s); }, stream.get(), 10, 3);

    const Checked* worst = &checked.front();
    bool pass = true;
    for (const Checked& k : checked) {
      if (k.ratio() > worst->ratio()) worst = &k;
      if (!k.pass()) problems.push_back(caseLabel(*run) + ", " + k.name + ": " + k.why());
      pass = pass && k.pass();
    }
    results.add({run->family, run->shape, worst->name, strf("%.3g", worst->c.maxAbsErr),
                 strf("%.2g / %.1e", worst->c.relL2, worst->bound.relL2(worst->c.written)), strf("%.1f", firstCallMs),
                 strf("%.1f", us), pass ? "PASS" : "FAIL"});
  }

  std::printf("\nkernels:\n");
  kernels.printText();
  if (cudaJitCacheMayServe()) std::printf("(%s)\n", cudaJitCacheNote().c_str());
  std::printf(
      "\nresults against the float64 CPU reference (fresh random inputs, outputs poisoned; the worst output by rel L2 "
      "against its bound; first call: module load + launch + run, synchronised; us per call: CUDA events, median):\n");
  results.printText();
  if (!problems.empty()) {
    std::printf("\nFAIL:\n");
    for (const auto& p : problems) std::printf("  %s\n", p.c_str());
    return kExitFailure;
  }
  std::printf("\nPASS: every output of every op family matches the float64 reference\n");
  return kExitOk;
}

// ---------------------------------------------------------------------------------------------
// Without a GPU.

uint64_t fnv1a(const std::vector<uint8_t>& bytes, uint64_t h = 1469598103934665603ull) {
  for (uint8_t b : bytes) h = (h ^ b) * 1099511628211ull;
  return h;
}

// The case's kernels for `arch`: through the kernel cache with NVRTC, else CUDA C++ only.
void compileKernels(DemoCase& c, const std::string& arch, bool nvrtc, Table& kernels) {
  for (const Specialization& spec : c.hostCall().kernels(arch)) {
    if (nvrtc) {
      kernels.add(kernelRow(c, *fetchKernel(c, spec)));
      continue;
    }
    PipelineOptions o;
    o.runNvrtc = false;
    const WallTimer t;
    const CompiledKernel k = compileKernel(spec, o);
    std::printf("  %s (%s): CUDA C++ generated in %.1f ms\n", caseLabel(c).c_str(), spec.kernel.c_str(), t.ms());
    kernels.add(kernelRow(c, k));
  }
}

// The reference on case `make` makes: it must write finite values to exactly the elements its
// outputs own. Adds a row with their count, sum of magnitudes and hash; returns whether it passed.
bool runReferenceOnly(const std::function<std::unique_ptr<DemoCase>()>& make, Table& table) {
  const std::unique_ptr<DemoCase> ran = make(), before = make();
  const DemoCall call = ran->hostCall();
  call.run(nullptr);
  int64_t elements = 0;
  double sumAbs = 0;
  uint64_t hash = fnv1a({});
  std::string problem;
  for (const Checked& k : checkOutputs(*before, *ran, call)) {
    elements += k.c.written;
    if (k.c.violations > 0 && problem.empty()) problem = k.name + ": " + k.c.first;
  }
  for (const DemoOutput& o : before->outputs()) {
    const HostTensor& t = *ran->tensors()[o.index];
    const TensorView v = t.view();
    testing::forEachElement(v, [&](int64_t off, const std::vector<int64_t>& i) {
      if (o.written[static_cast<size_t>(i[0])]) sumAbs += std::fabs(testing::loadElement(v, off));
    });
    hash = fnv1a(t.bytes, hash);
  }
  if (problem.empty() && elements == 0) problem = "nothing was written";
  table.add({ran->family, ran->shape, std::to_string(elements), strf("%.6f", sumAbs),
             strf("%016llx", static_cast<unsigned long long>(hash)), problem.empty() ? "ok" : "FAIL: " + problem});
  return problem.empty();
}

int runWithoutGpu(const std::string& arch, uint64_t seed) {
  std::string nvrtcWhy;
  const bool nvrtc = nvrtcAvailable(&nvrtcWhy);
  if (!nvrtc) std::printf("NVRTC not available (%s): generating CUDA C++ only, no PTX or CUBIN\n", nvrtcWhy.c_str());
  if (nvrtc)
    printCacheLine();
  else  // the cache keys on NVRTC's version: without it, the CUDA C++ is generated uncached
    std::printf("kernels for %s (DSL + MLIR pipeline only, not cached):\n", arch.c_str());
  const auto makers = demoCases(seed);
  Table kernels(kKernelHeader);
  for (const auto& make : makers) compileKernels(*make(), arch, nvrtc, kernels);
  std::printf("\nkernels for %s:\n", arch.c_str());
  kernels.printText();

  std::printf(
      "\nCPU reference (float64) on random inputs, seed %llu (the outputs' written elements, the sum of "
      "their magnitudes, a hash of the outputs' bytes):\n",
      static_cast<unsigned long long>(seed));
  Table ref({"family", "shape", "elements", "sum |out|", "fnv1a(outputs)", "check"});
  bool ok = true;
  for (const auto& make : makers) ok = runReferenceOnly(make, ref) && ok;
  ref.printText();
  if (!nvrtc) {
    std::printf("\nFAIL: kernels were not compiled to PTX/CUBIN: NVRTC not available (%s)\n", nvrtcWhy.c_str());
    return kExitFailure;
  }
  std::printf(ok ? "\nOK: kernels compiled for %s and the CPU reference ran (no GPU checks)\n"
                 : "\nFAIL: the CPU reference produced bad values (see the table)\n",
              arch.c_str());
  return ok ? kExitOk : kExitFailure;
}

int runDemo(const DemoOptions& o) {
  checkArch(o.arch, "--arch");
  const uint64_t seed =
      o.seedGiven ? o.seed : (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  std::string why;
  if (o.noGpu) {
    why = "--no-gpu given";
  } else if (driver::available(&why)) {
    return runWithGpu(seed);
  }
  std::printf("no GPU found (%s): compiling kernels and running the CPU reference only\n\n", why.c_str());
  return runWithoutGpu(o.arch, seed);
}

}  // namespace

CommandRun defineDemoCommand(CLI::App* app) {
  auto o = std::make_shared<DemoOptions>();
  app->add_option("--arch", o->arch, "NVRTC target when no GPU is present (with a GPU the device's own arch is used)")
      ->capture_default_str();
  CLI::Option* seedOpt = app->add_option("--seed", o->seed, "Random seed (default: fresh each run; printed)");
  app->add_flag("--no-gpu", o->noGpu, "Behave as if no GPU were present (compile + CPU reference)");
  return [o, seedOpt] {
    o->seedGiven = seedOpt->count() > 0;
    return runDemo(*o);
  };
}

}  // namespace ssmjit::tool
