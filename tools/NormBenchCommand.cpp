// `ssmjit bench-norm`: rms_norm (plain, and with the pre-norm residual add in fp32 in place),
// gated_rms_norm (groups, the gate before or after the norm) and its backward on the GPU. Reports µs per call (CUDA
// events around back-to-back calls, median of trials), achieved TB/s (bytes that must move: every
// row tensor read or written once; the weight is negligible) and % of the device-to-device copy
// bandwidth measured in the same run. Ends with a Markdown table.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "runtime/DeviceBuffer.h"
#include "runtime/Driver.h"
#include "ssmjit/ops.h"
#include "tools/GpuTiming.h"
#include "tools/ToolSupport.h"
#include "tools/problems/ConvProblem.h"  // DeviceTensors
#include "tools/problems/NormProblem.h"

namespace ssmjit::tool {
namespace {

struct NormBenchOptions {
  int64_t tokens = 16384, groups = 8;
  std::vector<int64_t> dims{2560, 5120};
  std::string dtype = "bf16";
  int iters = 20, trials = 5;
  uint64_t seed = 1;
};

struct Row {
  std::string what;
  double us = 0, bytes = 0;
};

void runNormBench(const NormBenchOptions& o) {
  const DType dt = parseFloatDType(o.dtype, "--dtype");
  driver::ensureContext();
  CUstream s = nullptr;
  const double copy = reportCopyGBs(s);
  std::vector<Row> rows;
  // A timed case: its row of the table, printed as it comes.
  auto record = [&](const std::string& what, const testing::NormCase& c, double us, double rowBytes) {
    rows.push_back({strf("%s, D %lld", what.c_str(), (long long)c.D), us, static_cast<double>(c.T * c.D) * rowBytes});
    std::printf("%-60s %9.1f us\n", rows.back().what.c_str(), us);
  };
  // One call of case c, whose row tensors move `rowBytes` bytes an element together.
  auto time = [&](const std::string& what, const testing::NormCase& c, double rowBytes) {
    testing::NormProblem p(c);
    testing::DeviceTensors d(p.all());
    const double us =
        c.gated
            ? callTimeUs([&, a = p.gatedArgs(d.viewer())](CUstream st) { gated_rms_norm(a, st); }, s, o.iters, o.trials)
            : callTimeUs([&, a = p.rmsArgs(d.viewer())](CUstream st) { rms_norm(a, st); }, s, o.iters, o.trials);
    record(what, c, us, rowBytes);
  };
  // gated_rms_norm_backward of case c (dout in x's dtype, dx and dz too, dweight fp32).
  auto timeBackward = [&](const std::string& what, const testing::NormCase& c, double rowBytes) {
    testing::NormProblem p(c);
    testing::DeviceTensors d(p.all());
    const size_t rowsBytes = static_cast<size_t>(c.T * c.D * dtypeBytes(dt));
    DeviceBuffer dout(rowsBytes), dx(rowsBytes), dz(rowsBytes), dw(static_cast<size_t>(c.D * 4));
    dout.fill(0);
    GatedRmsNormBackwardArgs a;
    a.forward = p.gatedArgs(d.viewer());
    a.forward.out = TensorView{};
    a.dout = TensorView::contiguous(dout.data(), dt, {c.T, c.D});
    a.dx = TensorView::contiguous(dx.data(), dt, {c.T, c.D});
    a.dz = TensorView::contiguous(dz.data(), dt, {c.T, c.D});
    a.dweight = TensorView::contiguous(dw.data(), DType::F32, {c.D});
    const int64_t n = gated_rms_norm_backward_workspace_size(a);
    DeviceBuffer ws(static_cast<size_t>(n * 4));
    a.workspace = TensorView::contiguous(ws.data(), DType::F32, {n});
    const double us = callTimeUs([&](CUstream st) { gated_rms_norm_backward(a, st); }, s, o.iters, o.trials);
    record(what, c, us, rowBytes);
  };
  const double eb = dtypeBytes(dt);
  for (int64_t D : o.dims) {
    testing::NormCase c;
    c.xType = dt;
    c.T = o.tokens;
    c.D = D;
    c.seed = o.seed;
    time("rms_norm", c, 2 * eb);
    c.residual = c.residualOut = c.residualInPlace = true;  // residual_in_fp32, updated in place
    time("rms_norm, fp32 residual in place", c, 2 * eb + 8);
    if (D % o.groups != 0) continue;
    testing::NormCase g;
    g.gated = true;
    g.xType = dt;
    g.T = o.tokens;
    g.D = D;
    g.groups = o.groups;
    g.seed = o.seed;
    for (testing::NormGate gate : {testing::NormGate::GateFirst, testing::NormGate::NormFirst}) {
      g.gate = gate;
      time(strf("gated_rms_norm, %lld groups, %s", (long long)o.groups,
                gate == testing::NormGate::GateFirst ? "gate first" : "norm first"),
           g, 3 * eb);
      // x, z and dout read, dx and dz written.
      timeBackward(strf("gated_rms_norm_backward, %lld groups, %s", (long long)o.groups,
                        gate == testing::NormGate::GateFirst ? "gate first" : "norm first"),
                   g, 5 * eb);
    }
  }
  std::printf("\n| %s, %lld tokens | µs | TB/s | %% of copy |\n|---|---|---|---|\n", o.dtype.c_str(),
              (long long)o.tokens);
  for (const Row& r : rows) {
    const double gbs = r.bytes / (r.us * 1e-6) / 1e9;
    std::printf("| %s | %.1f | %.2f | %.0f%% |\n", r.what.c_str(), r.us, gbs / 1e3, 100.0 * gbs / copy);
  }
  printCopyFooter(copy);
}

}  // namespace

CommandRun defineNormBenchCommand(CLI::App* app) {
  auto o = std::make_shared<NormBenchOptions>();
  app->add_option("--tokens", o->tokens, "Rows T")->capture_default_str();
  app->add_option("--dims", o->dims, "Channels D, comma-separated")->delimiter(',')->capture_default_str();
  app->add_option("--groups", o->groups, "Groups of gated_rms_norm (skipped where D % groups != 0)")
      ->capture_default_str();
  addFloatDTypeOption(app, "--dtype", o->dtype, "x/z/out dtype: fp32, bf16, fp16");
  addTrialOptions(app, o->iters, o->trials, o->seed, "Calls per trial");
  return benchRun(o, runNormBench);
}

}  // namespace ssmjit::tool
