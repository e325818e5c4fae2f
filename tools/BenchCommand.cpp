// `ssmjit bench`: GPU time, achieved bandwidth against the device's measured copy bandwidth,
// fused multi-token against L one-token calls and against one cold one-token call, host overhead
// per cached call, and compile time.
//
// Method. Kernel time comes from CUDA graphs of back-to-back calls replayed between two CUDA
// events (the median of several trials), so launch overhead does not hide small kernels; the
// calls rotate over enough independent input sets that the working set exceeds the L2 cache
// several times, so each call reads from DRAM as it would in serving. Host overhead is measured
// separately, on the host clock, over eager calls.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cache/KernelCache.h"
#include "compiler/Nvrtc.h"
#include "runtime/CudaGraph.h"
#include "runtime/DeviceBuffer.h"
#include "runtime/Driver.h"
#include "runtime/OpSpecializations.h"
#include "ssmjit/error.h"
#include "ssmjit/ops.h"
#include "tools/CallOptions.h"
#include "tools/DeviceFill.h"
#include "tools/GpuTiming.h"
#include "tools/SsuCall.h"
#include "tools/ToolSupport.h"
#include "tools/problems/SsuProblem.h"

namespace ssmjit::tool {
namespace {

using testing::kDstIdx;
using testing::kNumTensors;
using testing::kOut;
using testing::kStateIdx;
using testing::runOp;
using testing::TensorDesc;

struct BenchOptions {
  OpShapeOptions shape;
  std::vector<int64_t> batches{1, 16, 64, 256};
  std::vector<int64_t> tokens{1, 2, 4, 8, 16};
  bool tokensGiven = false;
  std::vector<std::string> stateDtypes{"fp32"};
  std::string inputDtype = "fp32";
  std::string stateWrite = "final";
  int iters = 200;
  int trials = 5;
  bool noStateIdx = false;
  uint64_t seed = 1;
};

// Each trial runs at most --iters calls and stops adding replays past this much GPU time, which
// keeps the default case list within about two minutes.
constexpr double kTrialTargetMs = 40.0;
// Input sets: enough that their total is this many times the L2 size, within a memory budget.
constexpr double kL2Multiple = 3.0;
constexpr int kMaxSets = 64;
constexpr size_t kSetMemoryBudget = size_t(8) << 30;
constexpr size_t kPitchAlign = 256;  // what cuMemAlloc guarantees: same alignment classes per set

// `nsets` independent copies of every tensor of one call, one allocation per tensor.
struct DeviceSets {
  int nsets = 0;
  std::array<DeviceBuffer, kNumTensors> buf;
  std::array<size_t, kNumTensors> pitch{};
  std::vector<SelectiveStateUpdateArgs> args;  // per set
};

size_t setBytes(const SsuCase& s) {
  size_t total = 0;
  for (const TensorDesc& d : testing::ssuTensors(s))
    if (d.present) total += (d.bytes() + kPitchAlign - 1) / kPitchAlign * kPitchAlign;
  return total;
}

DeviceSets makeDeviceSets(const SsuCase& s, int nsets, std::mt19937_64& rng) {
  DeviceSets d;
  d.nsets = nsets;
  const auto descs = testing::ssuTensors(s);
  for (int i = 0; i < kNumTensors; ++i) {
    if (!descs[i].present) continue;
    d.pitch[i] = (descs[i].bytes() + kPitchAlign - 1) / kPitchAlign * kPitchAlign;
    d.buf[i] = DeviceBuffer(d.pitch[i] * static_cast<size_t>(nsets));
  }
  for (int k = 0; k < nsets; ++k) {
    std::array<void*, kNumTensors> ptrs{};
    for (int i = 0; i < kNumTensors; ++i) {
      if (!descs[i].present) continue;
      const size_t off = d.pitch[i] * static_cast<size_t>(k);
      ptrs[i] = static_cast<char*>(d.buf[i].data()) + off;
      if (i == kOut) continue;  // written by every call
      if (i == kStateIdx) {     // a random permutation of the slots, as a serving batch has
        std::vector<int32_t> perm(static_cast<size_t>(s.batch));
        std::iota(perm.begin(), perm.end(), 0);
        std::shuffle(perm.begin(), perm.end(), rng);
        d.buf[i].upload(perm, off / sizeof(int32_t));
        continue;
      }
      if (i == kDstIdx)  // runBench rejects per-token before any allocation
        throw Error(Error::Kind::Internal,
                    "bench: dst_state_indices has no fill (per-token writes are not benchmarked)");
      const auto [lo, hi] = testing::valueRange(static_cast<testing::SsuTensor>(i), s);
      fillDeviceUniform(d.buf[i], off, descs[i].dtype, descs[i].numel(), lo, hi, rng);
    }
    d.args.push_back(contiguousArgs(s, ptrs, DeviceKind::CUDA));
  }
  // The uploads are synchronous copies on the legacy stream, which the benchmark's non-blocking
  // stream does not wait for (and a pageable copy may return before its DMA lands).
  driver::check(driver::api().cuCtxSynchronize(), "cuCtxSynchronize (after uploading inputs)");
  return d;
}

// Microseconds per unit of work of graph `g` (which holds `unitsPerReplay` units), median over
// the trials. A unit is one op call (fused) or one group of L one-token calls (the baseline).
double graphMicroseconds(const CudaGraph& g, int unitsPerReplay, const BenchOptions& o, CUstream s) {
  Event e0, e1;
  g.launch(s);  // the first replay uploads the graph to the device
  e0.record(s);
  g.launch(s);
  e1.record(s);
  const double estMs = std::max(1e-3, static_cast<double>(e1.since(e0)));
  const int maxReplays = std::max(1, (o.iters + unitsPerReplay - 1) / unitsPerReplay);
  const int replays = std::clamp(static_cast<int>(std::ceil(kTrialTargetMs / estMs)), 1, maxReplays);
  std::vector<double> us;
  for (int t = 0; t < o.trials; ++t) {
    e0.record(s);
    for (int r = 0; r < replays; ++r) g.launch(s);
    e1.record(s);
    us.push_back(1000.0 * e1.since(e0) / (static_cast<double>(replays) * unitsPerReplay));
  }
  return median(us);
}

struct CaseResult {
  SsuCase shape;
  Traffic traffic;
  int nsets = 0;
  double us = 0;           // one call (fused: one multi-token call)
  double graphUs = 0;      // tokens op: L one-token calls replayed from a graph
  double coldOneUs = 0;    // tokens op: one one-token call, inputs rotated like the fused call's
  double hostUs = 0;       // host time per cached call
  double passUs = 0;       // the in-place pass over the state's bytes (the floor at this size)
  double passBytes = 0;    // what that pass reads and writes
  double firstCallMs = 0;  // the op's first call of a new variant after its lookup: load + launch + run
  KernelSource source = KernelSource::Memory;  // where the variant's kernel came from
  double lookupMs = 0;                         // wall time of that lookup
  bool newVariant() const { return source != KernelSource::Memory; }
  // The call's bytes a µs against the in-place pass's: its share of what this size allows.
  double ofInPlacePass() const { return (static_cast<double>(traffic.total()) / us) / (passBytes / passUs); }
};

class Bench {
 public:
  explicit Bench(const BenchOptions& o) : o_(o), rng_(o.seed) {}

  int run(const std::vector<SsuCase>& cases);

 private:
  CaseResult runCase(const SsuCase& s);
  std::string deviceSummary() const;  // the device, its arch and L2 size
  std::string copySummary() const;    // the measured copy bandwidth
  std::string hostSummary() const;    // how host time is measured, and the driver's floor
  // Calls per host-time trial: few enough that the launch queue never fills.
  int hostCalls() const { return std::clamp(o_.iters, 1, 100); }
  void printTable(const std::vector<CaseResult>& results) const;
  void printTargets(const std::vector<CaseResult>& results) const;

  const BenchOptions& o_;
  std::mt19937_64 rng_;
  std::string arch_, device_;
  double copyGBs_ = 0;
  double driverFloorUs_ = 0;  // cuLaunchKernel of an empty kernel, host µs per call
  std::unique_ptr<InPlacePass> inPlacePass_;
  int64_t l2Bytes_ = 0;
  std::unique_ptr<OwnedStream> stream_;
};

CaseResult Bench::runCase(const SsuCase& s) {
  CaseResult r;
  r.shape = s;
  r.traffic = ssuTraffic(s);
  const CUstream st = stream_->get();

  const size_t perSet = setBytes(s);
  int nsets = static_cast<int>(std::ceil(kL2Multiple * static_cast<double>(l2Bytes_) / static_cast<double>(perSet)));
  nsets = std::clamp(nsets, 1, kMaxSets);
  nsets = std::max(1, std::min<int>(nsets, static_cast<int>(kSetMemoryBudget / perSet)));
  r.nsets = nsets;
  DeviceSets sets = makeDeviceSets(s, nsets, rng_);

  // The variant's kernel through the kernel cache as the op's first call would get it (so that
  // the op then finds it in memory): compiled, loaded from disk, or from memory for an earlier
  // row's variant. Then the op's first call: module load + launch + run.
  {
    const WallTimer t;
    r.source = lookupOrCompileKernel(opspec::ssu(sets.args[0], s.tokens, arch_)).source;
    r.lookupMs = t.ms();
  }
  {
    const WallTimer t;
    runOp(s.tokens, sets.args[0], st);
    stream_->synchronize();
    r.firstCallMs = t.ms();
  }
  // Kernel time: a graph of back-to-back calls rotating over the sets (at least 16 calls).
  const int units = nsets * ((16 + nsets - 1) / nsets);
  {
    const CudaGraph g = CudaGraph::capture(st, [&](CUstream cs) {
      for (int i = 0; i < units; ++i) runOp(s.tokens, sets.args[i % nsets], cs);
    });
    r.us = graphMicroseconds(g, units, o_, st);
  }

  // The baseline of the tokens op: L one-token calls on consecutive token slices, one graph.
  if (s.tokens) {
    std::vector<std::vector<SelectiveStateUpdateArgs>> slices(static_cast<size_t>(nsets));
    for (int k = 0; k < nsets; ++k)
      for (int64_t t = 0; t < s.L; ++t) slices[k].push_back(testing::oneTokenArgs(sets.args[k], t));
    runOp(false, slices[0][0], st);  // compile the one-token variant outside the capture
    stream_->synchronize();
    const int64_t perSetCalls = s.L;
    const int groups = nsets * static_cast<int>((std::max<int64_t>(1, 16 / perSetCalls) + nsets - 1) / nsets);
    const CudaGraph g = CudaGraph::capture(st, [&](CUstream cs) {
      for (int i = 0; i < groups; ++i)
        for (const auto& a : slices[i % nsets]) runOp(false, a, cs);
    });
    r.graphUs = graphMicroseconds(g, groups, o_, st);
    // One decode step as a model meets it: one one-token call whose state comes from DRAM (the
    // calls rotate over the sets, as the fused calls do). In the graph above the state stays in
    // L2 after its first call when it fits there, so its per-call time can lie under what the
    // fused call's own bytes take at copy bandwidth.
    const CudaGraph cold = CudaGraph::capture(st, [&](CUstream cs) {
      for (int i = 0; i < units; ++i) runOp(false, slices[i % nsets][0], cs);
    });
    r.coldOneUs = graphMicroseconds(cold, units, o_, st);
  }

  // Host overhead per cached call: bursts of eager calls, no synchronisation inside.
  {
    int i = 0;
    r.hostUs = hostCallUs([&] { runOp(s.tokens, sets.args[i++ % nsets], st); }, st, hostCalls(), o_.trials);
  }
  checkDeviceErrors(st);  // synchronises; throws if a kernel flagged a bad slot

  // The floor at this size: a kernel that reads the state's bytes as 16-byte vectors and writes
  // them back in place, over the same sets in the same graph form as the calls.
  {
    const size_t vectors = testing::ssuTensors(s)[testing::kState].bytes() / 16;
    const size_t pitch = sets.pitch[testing::kState];
    const CudaGraph g = CudaGraph::capture(st, [&](CUstream cs) {
      for (int i = 0; i < units; ++i)
        inPlacePass_->launch(sets.buf[testing::kState].ptr() + pitch * (i % nsets), vectors, cs);
    });
    r.passUs = graphMicroseconds(g, units, o_, st);
    r.passBytes = 2.0 * 16.0 * static_cast<double>(vectors);
  }
  return r;
}

std::string Bench::deviceSummary() const {
  return strf("device: %s (%s), L2 %.0f MiB", device_.c_str(), arch_.c_str(),
              static_cast<double>(l2Bytes_) / (1 << 20));
}

std::string Bench::copySummary() const {
  return strf("device-to-device copy: %.0f GB/s (cuMemcpyDtoDAsync of 1 GiB, bytes read + written)", copyGBs_);
}

std::string Bench::hostSummary() const {
  return strf(
      "host: median over %d trials of the wall time of %d eager cached calls (from an idle stream) / %d; "
      "the driver's floor, cuLaunchKernel of an empty kernel measured the same way: %.2f us/call",
      o_.trials, hostCalls(), hostCalls(), driverFloorUs_);
}

int Bench::run(const std::vector<SsuCase>& cases) {
  std::string why;
  if (!driver::available(&why)) {
    std::fprintf(stderr,
                 "ssmjit bench: no GPU found (%s): the benchmark needs a GPU; "
                 "`ssmjit inspect --stage resources` works without one\n",
                 why.c_str());
    return kExitFailure;
  }
  driver::ensureContext();
  arch_ = driver::currentArch();
  device_ = driver::deviceName();
  l2Bytes_ = deviceAttribute(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, "cuDeviceGetAttribute(L2_CACHE_SIZE)");
  stream_ = std::make_unique<OwnedStream>();
  std::printf("%s\n", deviceSummary().c_str());
  std::fflush(stdout);
  copyGBs_ = measureCopyGBs(stream_->get());
  std::printf("%s\n", copySummary().c_str());
  std::fflush(stdout);

  // Load NVRTC and its builtins once, so that the first variant's compile time is its own.
  {
    std::string nvrtcWhy;
    if (!nvrtcAvailable(&nvrtcWhy))
      throw Error(Error::Kind::Unavailable, "NVRTC is not available (" + nvrtcWhy + "): cannot compile kernels");
    // The same empty kernel measures the driver's own launch floor.
    const NvrtcResult empty = nvrtcCompile("extern \"C\" __global__ void ssmjit_empty() {}", "empty.cu", arch_, {});
    driverFloorUs_ = driverLaunchFloorUs(empty.cubin, stream_->get(), hostCalls(), o_.trials);
    inPlacePass_ = std::make_unique<InPlacePass>(arch_);
  }
  std::printf("%s\n", hostSummary().c_str());

  std::vector<CaseResult> results;
  int i = 0;
  for (const SsuCase& s : cases) {
    ++i;
    const CaseResult r = runCase(s);
    const double tbs = static_cast<double>(r.traffic.total()) / (r.us * 1e-6) / 1e12;
    std::printf("[%d/%zu] %s: %.2f us, %.2f TB/s (%.0f%% of copy)", i, cases.size(), caseLabel(s).c_str(), r.us, tbs,
                100.0 * tbs * 1e3 / copyGBs_);
    if (s.tokens)
      std::printf(
          ", %lld one-token calls %.2f us (fused / one-token %.2f), one cold one-token call %.2f us "
          "(fused / cold one-token %.2f)",
          static_cast<long long>(s.L), r.graphUs, r.us / (r.graphUs / s.L), r.coldOneUs, r.us / r.coldOneUs);
    std::printf(", host %.2f us/call\n", r.hostUs);
    std::fflush(stdout);
    results.push_back(r);
  }
  printTable(results);
  printTargets(results);
  return kExitOk;
}

void Bench::printTable(const std::vector<CaseResult>& results) const {
  const bool tokens = o_.shape.tokens();
  std::printf("\n## ssmjit bench: %s\n\n", tokens ? "selective_state_update_tokens" : "selective_state_update");
  std::printf("- %s\n", deviceSummary().c_str());
  std::printf("- %s\n", copySummary().c_str());
  std::printf("- shape: H %lld, P %lld, N %lld, G %lld; D, z, dt_bias, softplus%s; state write %s\n",
              static_cast<long long>(o_.shape.heads), static_cast<long long>(o_.shape.headDim),
              static_cast<long long>(o_.shape.dstate), static_cast<long long>(o_.shape.groups),
              o_.noStateIdx ? "" : ", state_batch_indices", o_.stateWrite.c_str());
  std::printf(
      "- kernel time: median of %d trials, CUDA graphs of back-to-back calls, inputs rotated "
      "over `sets` copies (>= %.0fx L2 where memory allows); bytes = state read + state "
      "written + inputs + outputs, once per call\n",
      o_.trials, kL2Multiple);
  std::printf(
      "- in-place pass: the floor at the call's size, a kernel that reads each set's state as 16-byte vectors and "
      "writes them back, timed the same way; %% of its rate: the call's bytes a µs against the pass's\n");
  std::printf("- %s\n", hostSummary().c_str());
  std::printf(
      "- kernel: where the variant's kernel came from and the wall time of that lookup: "
      "compiled (DSL + MLIR pipeline + NVRTC, NVRTC already loaded; %s), disk (the disk "
      "cache) or memory (an earlier row's variant); first launch: the op's first call after "
      "it (module load + launch + run, synchronised)\n\n",
      cudaJitCacheNote().c_str());
  std::vector<std::string> header = {"batch"};
  if (tokens) header.push_back("L");
  for (const char* h :
       {"state", "inputs", "sets", "MB/call", "µs", "TB/s", "% copy", "in-place pass µs", "% of its rate"})
    header.push_back(h);
  if (tokens)
    for (const char* h :
         {"L×1-token graph µs", "fused / 1-token", "L calls / fused", "cold 1-token µs", "fused / cold 1-token"})
      header.push_back(h);
  for (const char* h : {"host µs/call", "kernel", "first launch ms"}) header.push_back(h);
  Table t(header);
  for (const CaseResult& r : results) {
    const SsuCase& s = r.shape;
    const double tbs = static_cast<double>(r.traffic.total()) / (r.us * 1e-6) / 1e12;
    std::vector<std::string> row = {std::to_string(s.batch)};
    if (tokens) row.push_back(std::to_string(s.L));
    row.push_back(shortDTypeName(s.stateT));
    row.push_back(shortDTypeName(s.inT));
    row.push_back(std::to_string(r.nsets));
    row.push_back(strf("%.2f", static_cast<double>(r.traffic.total()) / 1e6));
    row.push_back(strf("%.2f", r.us));
    row.push_back(strf("%.2f", tbs));
    row.push_back(strf("%.0f%%", 100.0 * tbs * 1e3 / copyGBs_));
    row.push_back(strf("%.2f", r.passUs));
    row.push_back(strf("%.0f%%", 100.0 * r.ofInPlacePass()));
    if (tokens) {
      row.push_back(strf("%.2f", r.graphUs));
      row.push_back(strf("%.2f×", r.us / (r.graphUs / static_cast<double>(s.L))));
      row.push_back(strf("%.2f×", r.graphUs / r.us));
      row.push_back(strf("%.2f", r.coldOneUs));
      row.push_back(strf("%.2f×", r.us / r.coldOneUs));
    }
    row.push_back(strf("%.2f", r.hostUs));
    row.push_back(r.source == KernelSource::Compiled ? strf("compiled %.0f ms", r.lookupMs)
                  : r.source == KernelSource::Disk   ? strf("disk %.1f ms", r.lookupMs)
                                                     : std::string("memory"));
    row.push_back(r.newVariant() ? strf("%.2f", r.firstCallMs) : "cached");
    t.add(row);
  }
  t.printMarkdown();
}

// The targets, checked on the rows this run measured.
void Bench::printTargets(const std::vector<CaseResult>& results) const {
  auto line = [](const char* what, bool measured, bool met, const std::string& worst) {
    if (!measured)
      std::printf("- %s: not measured by these cases\n", what);
    else
      std::printf("- %s: %s (worst %s)\n", what, met ? "met" : "MISSED", worst.c_str());
  };
  std::printf("\ntargets:\n");
  double worstCopy = 1e9, worstPass = 1e9, worstRatio = 0, worstCold = 0, worstHost = 0, worstCompile = 0;
  bool copyMeasured = false, ratioMeasured = false, compileMeasured = false;
  int ratioRows = 0, underFloor = 0;  // rows where 1.5x the graph's per-call time < the fused call's floor
  for (const CaseResult& r : results) {
    const SsuCase& s = r.shape;
    const double pct = 100.0 * (static_cast<double>(r.traffic.total()) / (r.us * 1e-6) / 1e12) * 1e3 / copyGBs_;
    if (!s.tokens && s.batch >= 16) {
      copyMeasured = true;
      worstCopy = std::min(worstCopy, pct);
      worstPass = std::min(worstPass, 100.0 * r.ofInPlacePass());
    }
    if (s.tokens && s.L == 16 && s.batch >= 16) {
      ratioMeasured = true;
      worstRatio = std::max(worstRatio, r.us / (r.graphUs / 16.0));
      worstCold = std::max(worstCold, r.us / r.coldOneUs);
      const double floorUs = static_cast<double>(r.traffic.total()) / (copyGBs_ * 1e3);  // bytes at copy rate
      ++ratioRows;
      if (1.5 * r.graphUs / 16.0 < floorUs) ++underFloor;
    }
    worstHost = std::max(worstHost, r.hostUs);
    if (r.source == KernelSource::Compiled) {
      compileMeasured = true;
      worstCompile = std::max(worstCompile, r.lookupMs);
    }
  }
  line("one token >= 90% of copy bandwidth at batch >= 16", copyMeasured, worstCopy >= 90.0,
       strf("%.0f%%; %.0f%% of an in-place pass over its state", worstCopy, worstPass));
  // "One one-token call" read two ways: a decode step's call, its state from DRAM; and the
  // per-call time of 16 one-token calls in one graph, whose state stays in L2 when it fits.
  line("fused L = 16 within 1.5x of one one-token call (cold: state from DRAM) at batch >= 16", ratioMeasured,
       worstCold <= 1.5, strf("%.2fx", worstCold));
  line("fused L = 16 within 1.5x of the per-call time of 16 one-token calls in one graph at batch >= 16", ratioMeasured,
       worstRatio <= 1.5,
       strf("%.2fx; in %d of %d rows 1.5x that time is under the fused call's own bytes at copy bandwidth", worstRatio,
            underFloor, ratioRows));
  line("<= 5 us host time per cached call", !results.empty(), worstHost <= 5.0,
       strf("%.2f us; the driver's empty-kernel launch: %.2f us", worstHost, driverFloorUs_));
  line("first compile of a variant <= 300 ms", compileMeasured, worstCompile <= 300.0, strf("%.0f ms", worstCompile));
}

// The cases of the command line, in the order they run: state dtype, then batch, then L.
std::vector<SsuCase> benchCases(const BenchOptions& o) {
  std::vector<SsuCase> cases;
  for (const std::string& st : o.stateDtypes)
    for (int64_t b : o.batches)
      for (int64_t L : o.shape.tokens() ? o.tokens : std::vector<int64_t>{1}) {
        SsuCase s = o.shape.call();
        s.batch = b;
        s.L = L;
        s.stateT = parseFloatDType(st, "--state-dtype");
        s.inT = s.outT = parseFloatDType(o.inputDtype, "--input-dtype");
        s.stateIdx = !o.noStateIdx;
        s.write = parseStateWrite(o.stateWrite, "--state-write");
        cases.push_back(s);
      }
  return cases;
}

int runBench(BenchOptions& o) {
  const std::string& op = o.shape.op;
  if (op != "ssu" && op != "ssu-tokens") throw UsageError("--op is '" + op + "', expected ssu or ssu-tokens");
  if (op == "ssu" && o.tokensGiven)
    throw UsageError("--tokens applies to --op ssu-tokens only (the one-token op has L = 1)");
  if (op == "ssu" && o.stateWrite == "per-token")
    throw UsageError("--state-write per-token applies to --op ssu-tokens only");
  if (o.stateWrite == "per-token")
    throw UsageError(
        "--state-write per-token is not benchmarked (it needs batch * L extra state "
        "slots); use final or none");
  if (o.iters < 1) throw UsageError(strf("--iters is %d, expected at least 1", o.iters));
  if (o.trials < 1) throw UsageError(strf("--trials is %d, expected at least 1", o.trials));
  // Check every shape with the op's own argument check before touching the GPU.
  const std::vector<SsuCase> cases = benchCases(o);
  for (const SsuCase& s : cases) checkShapeOptions(s);
  Bench bench(o);
  return bench.run(cases);
}

}  // namespace

CommandRun defineBenchCommand(CLI::App* app) {
  auto o = std::make_shared<BenchOptions>();
  addOpShapeOptions(app, o->shape);
  app->add_option("--batch", o->batches, "Batch sizes, comma-separated")
      ->delimiter(',')
      ->check(atLeast(1))
      ->capture_default_str();
  CLI::Option* tokensOpt = app->add_option("--tokens", o->tokens, "Tokens per sequence L (ssu-tokens), comma-separated")
                               ->delimiter(',')
                               ->check(CLI::Range(1, kMaxTokens))
                               ->capture_default_str();
  app->add_option("--state-dtype", o->stateDtypes, "State storage dtypes (fp32, bf16, fp16), comma-separated")
      ->delimiter(',')
      ->check(CLI::IsMember(floatDTypeNames()))
      ->capture_default_str();
  addFloatDTypeOption(app, "--input-dtype", o->inputDtype, "Dtype of x, dt, B, C, z and out (fp32, bf16, fp16)");
  app->add_option("--state-write", o->stateWrite, "final (in place), none (verify only) or per-token")
      ->check(CLI::IsMember(stateWriteNames()))
      ->capture_default_str();
  app->add_flag("--no-state-indices", o->noStateIdx, "Call without state_batch_indices (sequence b uses slot b)");
  addTrialOptions(app, o->iters, o->trials, o->seed,
                  "Timed calls per trial (fewer for cases slower than ~40 ms per trial)");
  return [o, tokensOpt] {
    o->tokensGiven = tokensOpt->count() > 0;
    return runBench(*o);
  };
}

}  // namespace ssmjit::tool
