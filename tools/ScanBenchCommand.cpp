// `ssmjit bench-scan`: the Mamba-1 selective scan forward (selective_scan) and backward
// (selective_scan_backward: all gradients, the forward recomputed from checkpoints) on the GPU at the
// shapes of shared/anchors.md (Mamba-1 2.8B: D 5120, N 16; time-varying B and C, D, z,
// delta_bias, softplus): dense rows, one long sequence, and one packed row of mixed lengths with
// the same token count as the dense rows. Reports ms (median of trials of back-to-back calls),
// the bytes the call must move (u, delta, z read, out written, B and C read) over the time, as
// TB/s and % of the copy bandwidth measured in the same run, and the ratio to mamba_ssm's CUDA
// scan from anchors.md (a measurement of its own, not of this run; anchors.md has no backward
// figure). The backward's bytes: u, delta, z, dout, B, C read, du, ddelta, dz, dB, dC written.
// Ends with a Markdown table.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "runtime/DeviceBuffer.h"
#include "runtime/Driver.h"
#include "ssmjit/ops.h"
#include "tools/DeviceFill.h"
#include "tools/GpuTiming.h"
#include "tools/ToolSupport.h"

namespace ssmjit::tool {
namespace {

struct ScanBenchOptions {
  int64_t dim = 5120, stateSize = 16, batch = 8, seqlen = 2048, longSeqlen = 16384, packedTokens = 16384;
  int64_t minLen = 57, maxLen = 2048, serialSeqlen = 0;
  std::vector<int64_t> packedLengths;  // when given, the packed row's sequences (else drawn)
  std::string dtype = "bf16", bc = "varying", passes = "both";
  std::vector<std::string> cases{"dense", "long", "packed"};
  int iters = 5, trials = 5;
  uint64_t seed = 1;
};

void runScanBench(const ScanBenchOptions& o) {
  const DType dt = parseFloatDType(o.dtype, "--dtype");
  driver::ensureContext();
  CUstream s = nullptr;
  const double copy = reportCopyGBs(s);
  const int64_t D = o.dim, N = o.stateSize;
  std::mt19937_64 rng(o.seed);
  Table table({"case", "pass", "tokens", "ms", "TB/s", "% of copy", "mamba_ssm (anchors.md)", "ratio"});
  double denseMs = 0, denseBwdMs = 0;

  auto run = [&](const std::string& what, int64_t rowsB, int64_t L, const std::vector<int64_t>* lens, double anchorMs) {
    DeviceTensor u(dt, {rowsB, D, L}, -1, 1, rng), delta(dt, {rowsB, D, L}, -4, 0, rng),
        z(dt, {rowsB, D, L}, -1, 1, rng);
    DeviceTensor out(dt, {rowsB, D, L}, 0, 0, rng);
    DeviceTensor A(DType::F32, {D, N}, -2, -0.5, rng), Dv(DType::F32, {D}, -1, 1, rng),
        bias(DType::F32, {D}, -1, 0, rng);
    const bool varying = o.bc == "varying";
    const DType bcType = varying ? dt : DType::F32;
    DeviceTensor B =
        varying ? DeviceTensor(dt, {rowsB, 1, N, L}, -1, 1, rng) : DeviceTensor(bcType, {D, N}, -1, 1, rng);
    DeviceTensor C =
        varying ? DeviceTensor(dt, {rowsB, 1, N, L}, -1, 1, rng) : DeviceTensor(bcType, {D, N}, -1, 1, rng);
    std::unique_ptr<DeviceBuffer> cu;
    SelectiveScanArgs a;
    a.u = u.view, a.delta = delta.view, a.z = z.view, a.out = out.view, a.A = A.view, a.D = Dv.view;
    a.delta_bias = bias.view, a.B = B.view, a.C = C.view, a.delta_softplus = true;
    a.serial_seqlen = o.serialSeqlen;
    if (lens) {
      std::vector<int32_t> c{0};
      for (int64_t l : *lens) c.push_back(c.back() + static_cast<int32_t>(l));
      cu = std::make_unique<DeviceBuffer>(DeviceBuffer::fromHost(c));
      a.cu_seqlens = TensorView::contiguous(cu->data(), DType::I32, {static_cast<int64_t>(c.size())});
      a.max_seqlen = *std::max_element(lens->begin(), lens->end());
    }
    DeviceBuffer ws(static_cast<size_t>(selective_scan_workspace_size(a)) * 4);
    a.workspace = TensorView::contiguous(ws.data(), DType::F32, {static_cast<int64_t>(ws.bytes() / 4)});
    const bool fwd = o.passes != "backward", bwd = o.passes != "forward";
    const double ms = fwd ? 1e-3 * callTimeUs([&](CUstream st) { selective_scan(a, st); }, s, o.iters, o.trials) : 0;
    const double bdl = double(rowsB) * D * L * dtypeBytes(dt),
                 bnl = varying ? double(rowsB) * N * L * dtypeBytes(dt) : 0;
    auto row = [&](const char* pass, double t, double bytes, double anchorMs, double denseT) {
      const double tbs = bytes / (t * 1e-3) / 1e12;
      std::string anchor = anchorMs > 0 ? strf("%.2f ms", anchorMs) : "";
      std::string ratio = anchorMs > 0 ? strf("%.2fx faster", anchorMs / t) : "";
      if (lens) ratio = denseT > 0 ? strf("%+.1f%% vs dense", 100.0 * (t / denseT - 1)) : "(no dense case run)";
      table.add({what, pass, std::to_string(rowsB * L), strf("%.3f", t), strf("%.2f", tbs),
                 strf("%.0f%%", 100 * tbs * 1e3 / copy), anchor, ratio});
      std::printf("%-50s %-8s %8.3f ms\n", what.c_str(), pass, t);
    };
    if (fwd) row("forward", ms, 4 * bdl + 2 * bnl, varying ? anchorMs : 0, denseMs);  // the anchors are for varying B/C
    if (!bwd) return ms;

    DeviceTensor dout(dt, {rowsB, D, L}, -1, 1, rng), du(dt, {rowsB, D, L}, 0, 0, rng),
        ddelta(dt, {rowsB, D, L}, 0, 0, rng);
    DeviceTensor dz(dt, {rowsB, D, L}, 0, 0, rng);
    DeviceTensor dB = varying ? DeviceTensor(dt, {rowsB, 1, N, L}, 0, 0, rng) : DeviceTensor(bcType, {D, N}, 0, 0, rng);
    DeviceTensor dC = varying ? DeviceTensor(dt, {rowsB, 1, N, L}, 0, 0, rng) : DeviceTensor(bcType, {D, N}, 0, 0, rng);
    DeviceTensor dA(DType::F32, {D, N}, 0, 0, rng), dD(DType::F32, {D}, 0, 0, rng), dbias(DType::F32, {D}, 0, 0, rng);
    SelectiveScanBackwardArgs b;
    b.forward = a;
    b.forward.out = {};
    b.forward.workspace = {};
    b.dout = dout.view, b.du = du.view, b.ddelta = ddelta.view, b.dz = dz.view, b.dA = dA.view, b.dB = dB.view;
    b.dC = dC.view, b.dD = dD.view, b.ddelta_bias = dbias.view;
    DeviceBuffer bws(static_cast<size_t>(selective_scan_backward_workspace_size(b)) * 4);
    b.workspace = TensorView::contiguous(bws.data(), DType::F32, {static_cast<int64_t>(bws.bytes() / 4)});
    const double bwdMs = 1e-3 * callTimeUs([&](CUstream st) { selective_scan_backward(b, st); }, s, o.iters, o.trials);
    row("backward", bwdMs, 7 * bdl + 4 * bnl, 0, denseBwdMs);
    if (!lens && rowsB == o.batch) denseBwdMs = bwdMs;
    return ms;
  };
  auto wanted = [&](const char* c) { return std::find(o.cases.begin(), o.cases.end(), c) != o.cases.end(); };
  if (wanted("dense"))
    denseMs = run(strf("dense %lldx%lld", (long long)o.batch, (long long)o.seqlen), o.batch, o.seqlen, nullptr, 1.45);
  if (wanted("long")) run(strf("dense 1x%lld", (long long)o.longSeqlen), 1, o.longSeqlen, nullptr, 1.93);
  if (wanted("packed")) {
    const std::vector<int64_t> lens =
        o.packedLengths.empty() ? mixedLengths(o.packedTokens, o.minLen, o.maxLen, o.seed) : o.packedLengths;
    const int64_t packedTokens = std::accumulate(lens.begin(), lens.end(), int64_t{0});
    run(strf("packed %lld tokens, %zu seqs (%lld..%lld)", (long long)packedTokens, lens.size(),
             (long long)*std::min_element(lens.begin(), lens.end()),
             (long long)*std::max_element(lens.begin(), lens.end())),
        1, packedTokens, &lens, 0);
  }
  std::printf(
      "\nMamba-1 selective scan forward and backward: D %lld, N %lld, %s u/delta/z/out, %s, D, z, "
      "delta_bias, softplus; median of %d trials of %d calls\n\n",
      (long long)D, (long long)N, o.dtype.c_str(),
      o.bc == "varying" ? "time-varying B and C (G 1) in that dtype" : "constant B and C (D, N) fp32", o.trials,
      o.iters);
  printTableAndCopy(table, copy);
}

}  // namespace

CommandRun defineScanBenchCommand(CLI::App* app) {
  auto o = std::make_shared<ScanBenchOptions>();
  app->add_option("--dim", o->dim, "Channels D")->capture_default_str();
  app->add_option("--state-size", o->stateSize, "State size N")->capture_default_str();
  const auto [tokens, minLen, maxLen] = addRowOptions(app, o->batch, o->seqlen, o->packedTokens, o->minLen, o->maxLen);
  app->add_option("--long-seqlen", o->longSeqlen, "Length of the single long sequence")->capture_default_str();
  app->add_option("--packed-lengths", o->packedLengths,
                  "The packed row's sequence lengths, comma-separated (instead of drawing them with --packed-tokens, "
                  "--min-len, --max-len)")
      ->delimiter(',')
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30))
      ->excludes(tokens)
      ->excludes(minLen)
      ->excludes(maxLen);
  app->add_option("--serial-seqlen", o->serialSeqlen,
                  "The forward's serial_seqlen (ssmjit/ops.h): sequences of at most this many tokens scanned serially; "
                  "0: every sequence in parallel")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30))
      ->capture_default_str();
  addFloatDTypeOption(app, "--dtype", o->dtype, "u, delta, z, out, B, C dtype: fp32, bf16, fp16");
  app->add_option("--bc", o->bc,
                  "B and C: varying (B, 1, N, L) in --dtype, or constant (D, N) fp32; the anchors "
                  "are for varying")
      ->check(CLI::IsMember({"varying", "constant"}))
      ->capture_default_str();
  app->add_option("--passes", o->passes, "Which passes to time: forward, backward or both")
      ->check(CLI::IsMember({"forward", "backward", "both"}))
      ->capture_default_str();
  app->add_option("--cases", o->cases,
                  "Which cases to run, comma-separated: dense (--batch x --seqlen), long (1 x --long-seqlen), packed "
                  "(the packed row's ratio is to dense, when dense runs)")
      ->delimiter(',')
      ->check(CLI::IsMember({"dense", "long", "packed"}))
      ->capture_default_str();
  addTrialOptions(app, o->iters, o->trials, o->seed, "Calls per trial");
  return benchRun(o, runScanBench);
}

}  // namespace ssmjit::tool
