// `ssmjit demo`: the main job. With a GPU it runs the one-token and multi-token selective state
// update on Mamba-2 2.7B heads (fp32 and bf16 state, D, z, dt_bias, softplus, slot indices with a
// pad row) on fresh random inputs with poisoned outputs and checks them against the float64 CPU
// reference. Without one it compiles the same kernels for --arch and runs the CPU reference.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <array>
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
#include "runtime/DeviceBuffer.h"
#include "runtime/Driver.h"
#include "ssmjit/error.h"
#include "ssmjit/ops.h"
#include "ssmjit/reference.h"
#include "tools/SsuProblem.h"
#include "tools/ToolSupport.h"

namespace ssmjit::tool {
namespace {

struct DemoOptions {
  std::string arch = "sm_90a";
  uint64_t seed = 0;
  bool seedGiven = false;
  bool noGpu = false;
};

// Mamba-2 2.7B heads, batch 4: both state dtypes, one token and L = 4, every optional input, one
// pad row and two slots nobody reads (both must come back untouched).
std::vector<SsuShape> demoCases() {
  std::vector<SsuShape> cases;
  for (DType st : {DType::F32, DType::BF16})
    for (bool tokens : {false, true}) {
      SsuShape s;
      s.tokens = tokens;
      s.H = 80, s.P = 64, s.N = 128, s.G = 1;
      s.batch = 4;
      s.L = tokens ? 4 : 1;
      s.stateT = s.inT = s.outT = st;  // serving runs fp32 end to end, or bf16 end to end
      s.hasD = s.hasZ = s.hasDtBias = s.softplus = true;
      s.stateIdx = true;
      s.pads = 1;
      s.spareSlots = 2;
      cases.push_back(s);
    }
  return cases;
}

void runOp(const SsuShape& s, const SelectiveStateUpdateArgs& a, Stream stream) {
  if (s.tokens)
    selective_state_update_tokens(a, stream);
  else
    selective_state_update(a, stream);
}

void runReference(const SsuShape& s, const SelectiveStateUpdateArgs& a) {
  if (s.tokens)
    reference::selective_state_update_tokens(a);
  else
    reference::selective_state_update(a);
}

int64_t countLines(const std::string& s) {
  return static_cast<int64_t>(std::count(s.begin(), s.end(), '\n')) +
         (!s.empty() && s.back() != '\n');
}

std::string resourceCell(int v) { return v < 0 ? "n/a" : std::to_string(v); }

std::vector<std::string> kernelRow(const SsuShape& s, const CompiledKernel& k, double wallMs) {
  std::string spills = "n/a";
  if (k.resources.spillStoreBytes >= 0 || k.resources.spillLoadBytes >= 0)
    spills = resourceCell(k.resources.spillStoreBytes) + "/" + resourceCell(k.resources.spillLoadBytes);
  return {s.label(),
          k.entry,
          wallMs >= 0 ? strf("%.1f", wallMs) : "cached",
          resourceCell(k.resources.registers),
          spills,
          resourceCell(k.resources.sharedBytes),
          k.ptx.empty() ? "n/a" : std::to_string(countLines(k.ptx)),
          k.cubin.empty() ? "n/a" : std::to_string(k.cubin.size())};
}

const std::vector<std::string> kKernelHeader = {"case", "entry", "compile ms", "registers",
                                                "spills st/ld B", "shared B", "PTX lines",
                                                "CUBIN B"};

std::string resultCell(const Comparison& c, double tol) {
  return (c.compared > 0 && c.nonFinite == 0 && c.strayBytes == 0 && c.relL2 <= tol) ? "PASS"
                                                                                      : "FAIL";
}

// ---------------------------------------------------------------------------------------------
// With a GPU.

int runWithGpu(uint64_t seed) {
  driver::ensureContext();
  const std::string arch = driver::currentArch();
  std::printf("device: %s (%s)\nseed: %llu (rerun with --seed %llu)\n\n", driver::deviceName().c_str(),
              arch.c_str(), static_cast<unsigned long long>(seed),
              static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  OwnedStream stream;
  Table results({"case", "tensor", "compared", "max |err|", "rel L2", "tol", "result"});
  std::vector<std::string> header = kKernelHeader;
  header[2] = "first call ms";
  Table kernels(header);
  std::vector<std::string> problems;
  std::vector<std::string> notes;
  bool allPass = true;

  for (const SsuShape& s : demoCases()) {
    HostProblem host = makeHostProblem(s, rng);
    const HostProblem before = host;  // the bytes before the call: untouched rows must keep them

    std::array<DeviceBuffer, kNumTensors> dev;
    std::array<void*, kNumTensors> devPtrs{};
    for (int i = 0; i < kNumTensors; ++i) {
      if (!host.desc[i].present) continue;
      dev[i] = DeviceBuffer(host.data[i].size());
      dev[i].upload(host.data[i]);  // out goes up poisoned
      devPtrs[i] = dev[i].data();
    }
    // The uploads are synchronous copies on the legacy stream, which a non-blocking stream does
    // not wait for (and a pageable copy may return before its DMA lands): finish them first.
    driver::check(driver::api().cuCtxSynchronize(), "cuCtxSynchronize (after uploading inputs)");
    const SelectiveStateUpdateArgs devArgs = ssuArgs(s, devPtrs, DeviceKind::CUDA);

    const WallTimer firstCall;
    runOp(s, devArgs, stream.get());
    checkDeviceErrors(stream.get());  // synchronises; throws if the kernel flagged a slot
    const double firstCallMs = firstCall.ms();
    const std::vector<uint8_t> gotState = dev[kState].download<uint8_t>();
    const std::vector<uint8_t> gotOut = dev[kOut].download<uint8_t>();

    runReference(s, host.args());  // host now holds the reference result

    const Comparison out = compareRows(s.outT, gotOut, host.data[kOut], before.data[kOut],
                                       s.L * s.H * s.P, host.outRowsWritten());
    const Comparison st = compareRows(s.stateT, gotState, host.data[kState], before.data[kState],
                                      s.H * s.P * s.N, host.stateSlotsWritten());
    for (const auto& [name, c, dt] : {std::tuple{"out", &out, s.outT}, std::tuple{"state", &st, s.stateT}}) {
      const double tol = tolerance(dt);
      const std::string r = resultCell(*c, tol);
      results.add({s.label(), name, std::to_string(c->compared), strf("%.3g", c->maxAbsErr),
                   strf("%.3g", c->relL2), strf("%.0e", tol), r});
      if (r != "PASS") {
        allPass = false;
        std::string why = c->firstProblem;
        if (why.empty())
          why = c->compared == 0 ? "nothing was compared"
                                 : strf("rel L2 %.3g above tolerance %.0e", c->relL2, tol);
        problems.push_back(s.label() + ", " + name + ": " + why);
      }
    }

    // The op's kernel from the memory cache under the key `ssmjit inspect` builds. A hit takes
    // microseconds; a compile here means inspect's key differs from the op's.
    const Specialization spec = ssuSpecialization(devArgs, s.tokens, arch);
    const WallTimer lookup;
    const std::shared_ptr<const CompiledKernel> k = getOrCompileKernel(spec);
    const double lookupMs = lookup.ms();
    if (lookupMs > 5.0)
      notes.push_back("note: " + s.label() + ": the op's kernel was not cached under the key " +
                      "`ssmjit inspect` builds (looking it up compiled it in " +
                      strf("%.0f ms", lookupMs) + "); inspect may show a different variant. Key: " +
                      spec.canonical());
    std::vector<std::string> row = kernelRow(s, *k, -1);
    row[2] = strf("%.1f", firstCallMs);
    kernels.add(row);
  }

  std::printf("kernels (first call: compile + load + launch + run, synchronised):\n");
  kernels.printText();
  if (cudaJitCacheMayServe()) std::printf("(%s)\n", cudaJitCacheNote().c_str());
  std::printf("\nresults against the float64 CPU reference (fresh random inputs, outputs poisoned):\n");
  results.printText();
  for (const auto& n : notes) std::printf("%s\n", n.c_str());
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
  std::printf("kernels for %s (compile ms: wall time of DSL + MLIR pipeline%s):\n", arch.c_str(),
              nvrtc ? " + NVRTC" : "");
  Table kernels(kKernelHeader);
  for (const SsuShape& s : demoCases()) {
    const Specialization spec = ssuSpecialization(ssuArgsWithoutMemory(s), s.tokens, arch);
    PipelineOptions o;
    o.runNvrtc = nvrtc;
    const WallTimer t;
    const CompiledKernel k = compileKernel(spec, o);
    kernels.add(kernelRow(s, k, t.ms()));
  }
  kernels.printText();
  if (!nvrtc) ok = false;

  std::printf("\nCPU reference (float64) on random inputs, seed %llu:\n",
              static_cast<unsigned long long>(seed));
  Table ref({"case", "sum(out)", "sum(|out|)", "sum(state)", "fnv1a(out, state)", "check"});
  std::mt19937_64 rng(seed);
  for (const SsuShape& s : demoCases()) {
    HostProblem host = makeHostProblem(s, rng);
    const HostProblem before = host;
    runReference(s, host.args());
    // The reference must write finite values to exactly the rows it owns.
    const Comparison out = compareRows(s.outT, host.data[kOut], host.data[kOut],
                                       before.data[kOut], s.L * s.H * s.P, host.outRowsWritten());
    const Comparison st = compareRows(s.stateT, host.data[kState], host.data[kState],
                                      before.data[kState], s.H * s.P * s.N, host.stateSlotsWritten());
    double sumOut = 0, sumAbsOut = 0, sumState = 0;
    const auto outRows = host.outRowsWritten();
    const int64_t outRow = s.L * s.H * s.P;
    for (int64_t b = 0; b < s.batch; ++b)
      if (outRows[b])
        for (int64_t i = b * outRow; i < (b + 1) * outRow; ++i) {
          const double v = loadElement(s.outT, host.data[kOut].data(), i);
          sumOut += v;
          sumAbsOut += std::fabs(v);
        }
    const int64_t nState = host.desc[kState].numel();
    for (int64_t i = 0; i < nState; ++i) sumState += loadElement(s.stateT, host.data[kState].data(), i);
    const bool good = out.nonFinite == 0 && out.strayBytes == 0 && st.nonFinite == 0 &&
                      st.strayBytes == 0 && out.compared > 0;
    ok = ok && good;
    std::string check = good ? "ok" : "FAIL: " + (out.firstProblem.empty() ? st.firstProblem : out.firstProblem);
    ref.add({s.label(), strf("%.6f", sumOut), strf("%.6f", sumAbsOut), strf("%.6f", sumState),
             strf("%016llx", static_cast<unsigned long long>(
                                 fnv1a(host.data[kState], fnv1a(host.data[kOut])))),
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
