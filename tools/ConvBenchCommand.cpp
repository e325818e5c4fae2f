// `ssmjit bench-conv`: causal conv1d forward and backward (both memory orders, dense rows and one
// packed row of mixed-length sequences) and the decode update, on the GPU. Reports µs per call
// (CUDA events around back-to-back calls, median of trials), achieved TB/s (bytes that must move:
// x read, out written; backward x and dout read, dx written; update states read and written) and % of the
// device-to-device copy bandwidth measured in the same run, next to causal-conv1d's H100 numbers from
// shared/anchors.md. Ends with a Markdown table.
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
#include "tools/GpuTiming.h"
#include "tools/ToolSupport.h"
#include "tools/problems/ConvProblem.h"

namespace ssmjit::tool {
namespace {

struct ConvBenchOptions {
  int64_t dim = 5376, width = 4, batch = 8, seqlen = 2048, packedTokens = 16384;
  int64_t minLen = 57, maxLen = 2048;
  std::string dtype = "bf16";
  std::vector<std::string> parts{"fwd", "bwd", "update"};
  std::vector<std::string> layouts{"cf", "cl"};
  std::vector<int64_t> updateBatches{1, 16, 64, 256};
  std::vector<int64_t> updateTokens{1, 8};
  int iters = 20, trials = 5;
  uint64_t seed = 1;
};

struct Row {
  std::string what;
  double us = 0, bytes = 0;
  std::string anchor;
};

// A forward or backward case (the same input fields) of the benchmark's shapes.
template <class Case>
Case benchCase(const ConvBenchOptions& o, DType dt, ConvLayout layout, testing::ConvPacking packing,
               std::vector<int64_t> lens) {
  Case c;
  c.layout = layout;
  c.xType = dt;
  c.wType = DType::F32;
  c.W = static_cast<int>(o.width);
  c.D = o.dim;
  c.lens = std::move(lens);
  c.packing = packing;
  c.seed = o.seed;
  return c;
}

void runConvBench(const ConvBenchOptions& o) {
  const DType dt = parseFloatDType(o.dtype, "--dtype");
  if (o.width < 2 || o.width > kMaxConvWidth)
    throw UsageError(strf("--width is %lld, expected 2..%d", (long long)o.width, kMaxConvWidth));
  driver::ensureContext();
  CUstream s = nullptr;
  const double copy = reportCopyGBs(s);
  std::vector<Row> rows;
  const double eb = dtypeBytes(dt);

  auto wanted = [&](ConvLayout layout) {
    return std::find(o.layouts.begin(), o.layouts.end(), layout == ConvLayout::ChannelLast ? "cl" : "cf") !=
           o.layouts.end();
  };
  auto forward = [&](ConvLayout layout, testing::ConvPacking packing, std::vector<int64_t> lens, const char* anchor) {
    if (!wanted(layout)) return;
    const auto c = benchCase<testing::ConvCase>(o, dt, layout, packing, std::move(lens));
    testing::ConvProblem p(c);
    testing::DeviceTensors d(p.all());
    const CausalConv1dArgs a = testing::deviceArgs(p, d);
    const double us = callTimeUs([&](CUstream st) { causal_conv1d(a, st); }, s, o.iters, o.trials);
    const int64_t T = std::accumulate(c.lens.begin(), c.lens.end(), int64_t{0});
    const std::string shape = packing == testing::ConvPacking::Dense
                                  ? strf("%zux%lld", c.lens.size(), (long long)c.lens[0])
                                  : strf("packed %lld tokens, %zu seqs (%lld..%lld)%s", (long long)T, c.lens.size(),
                                         (long long)*std::min_element(c.lens.begin(), c.lens.end()),
                                         (long long)*std::max_element(c.lens.begin(), c.lens.end()),
                                         packing == testing::ConvPacking::Positions ? ", positions" : "");
    rows.push_back(
        {strf("fwd %s %s", layout == ConvLayout::ChannelLast ? "channel-last" : "channel-first", shape.c_str()), us,
         2.0 * static_cast<double>(T * o.dim) * eb, anchor});
    std::printf("%-70s %9.1f us\n", rows.back().what.c_str(), us);
  };
  auto part = [&](const char* p) { return std::find(o.parts.begin(), o.parts.end(), p) != o.parts.end(); };
  const std::vector<int64_t> dense(static_cast<size_t>(o.batch), o.seqlen);
  const std::vector<int64_t> mixed = mixedLengths(o.packedTokens, o.minLen, o.maxLen, o.seed);
  if (part("fwd")) {
    forward(ConvLayout::ChannelFirst, testing::ConvPacking::Dense, dense, "127 us");
    forward(ConvLayout::ChannelLast, testing::ConvPacking::Dense, dense, "138 us");
    forward(ConvLayout::ChannelFirst, testing::ConvPacking::CuSeqlens, mixed, "");
    forward(ConvLayout::ChannelLast, testing::ConvPacking::CuSeqlens, mixed, "190 us (seq_idx)");
    forward(ConvLayout::ChannelLast, testing::ConvPacking::Positions, mixed, "");
  }

  // Backward: x and dout read, dx written (the workspace and dweight are small next to them).
  auto backward = [&](ConvLayout layout, testing::ConvPacking packing, std::vector<int64_t> lens) {
    if (!wanted(layout)) return;
    const auto c = benchCase<testing::ConvBackwardCase>(o, dt, layout, packing, std::move(lens));
    testing::ConvBackwardProblem p(c);
    testing::DeviceTensors d(p.all());
    CausalConv1dBackwardArgs a = testing::deviceArgs(p, d);
    const int64_t wsElems = causal_conv1d_backward_workspace_size(a);
    DeviceBuffer ws(static_cast<size_t>(wsElems) * 4);
    a.workspace = TensorView::contiguous(ws.data(), DType::F32, {wsElems});
    const double us = callTimeUs([&](CUstream st) { causal_conv1d_backward(a, st); }, s, o.iters, o.trials);
    const int64_t T = std::accumulate(c.lens.begin(), c.lens.end(), int64_t{0});
    const std::string shape = packing == testing::ConvPacking::Dense
                                  ? strf("%zux%lld", c.lens.size(), (long long)c.lens[0])
                                  : strf("packed %lld tokens, %zu seqs", (long long)T, c.lens.size());
    rows.push_back(
        {strf("bwd %s %s", layout == ConvLayout::ChannelLast ? "channel-last" : "channel-first", shape.c_str()), us,
         3.0 * static_cast<double>(T * o.dim) * eb, ""});
    std::printf("%-70s %9.1f us\n", rows.back().what.c_str(), us);
  };
  if (part("bwd")) {
    backward(ConvLayout::ChannelFirst, testing::ConvPacking::Dense, dense);
    backward(ConvLayout::ChannelLast, testing::ConvPacking::Dense, dense);
    backward(ConvLayout::ChannelFirst, testing::ConvPacking::CuSeqlens, mixed);
    backward(ConvLayout::ChannelLast, testing::ConvPacking::CuSeqlens, mixed);
  }

  for (int64_t b : part("update") ? o.updateBatches : std::vector<int64_t>{})
    for (int64_t L : o.updateTokens) {
      testing::ConvUpdateCase c;
      c.xType = dt;
      c.stateType = dt;
      c.W = static_cast<int>(o.width);
      c.D = o.dim;
      c.batch = b;
      c.slots = b;
      c.L = L;
      c.indices = false;
      c.seed = o.seed;
      testing::ConvUpdateProblem p(c);
      testing::DeviceTensors d(p.all());
      const CausalConv1dUpdateArgs a = testing::deviceArgs(p, d);
      const double us = callTimeUs([&](CUstream st) { causal_conv1d_update(a, st); }, s, 100, o.trials);
      const double bytes = static_cast<double>(b * o.dim) * eb * (2.0 * (o.width - 1) + 2.0 * L);
      const char* anchor = b == 64 ? (L == 1 ? "12 us" : L == 8 ? "25 us" : "") : "";
      rows.push_back({strf("update batch %lld, %lld new token%s", (long long)b, (long long)L, L > 1 ? "s" : ""), us,
                      bytes, anchor});
      std::printf("%-70s %9.1f us\n", rows.back().what.c_str(), us);
    }

  std::printf("\n| %s, D %lld, W %lld | µs | TB/s | %% of copy | causal-conv1d (anchors.md) |\n|---|---|---|---|---|\n",
              o.dtype.c_str(), (long long)o.dim, (long long)o.width);
  for (const Row& r : rows) {
    const double gbs = r.bytes / (r.us * 1e-6) / 1e9;
    std::printf("| %s | %.1f | %.2f | %.0f%% | %s |\n", r.what.c_str(), r.us, gbs / 1e3, 100.0 * gbs / copy,
                r.anchor.c_str());
  }
  printCopyFooter(copy);
}

}  // namespace

CommandRun defineConvBenchCommand(CLI::App* app) {
  auto o = std::make_shared<ConvBenchOptions>();
  app->add_option("--dim", o->dim, "Channels D")->capture_default_str();
  app->add_option("--width", o->width, "Conv width W (2..8)")->capture_default_str();
  addRowOptions(app, o->batch, o->seqlen, o->packedTokens, o->minLen, o->maxLen);
  addFloatDTypeOption(app, "--dtype", o->dtype, "x/out (and update state) dtype: fp32, bf16, fp16");
  app->add_option("--parts", o->parts, "What to run, comma-separated: fwd, bwd, update")
      ->delimiter(',')
      ->check(CLI::IsMember({"fwd", "bwd", "update"}))
      ->capture_default_str();
  app->add_option("--layouts", o->layouts,
                  "Forward/backward layouts, comma-separated: cf (channel-first), cl (channel-last)")
      ->delimiter(',')
      ->check(CLI::IsMember({"cf", "cl"}))
      ->capture_default_str();
  app->add_option("--update-batch", o->updateBatches, "Update batch sizes, comma-separated")
      ->delimiter(',')
      ->capture_default_str();
  app->add_option("--update-tokens", o->updateTokens, "New tokens per update, comma-separated")
      ->delimiter(',')
      ->capture_default_str();
  addTrialOptions(app, o->iters, o->trials, o->seed, "Calls per trial (forward and backward)");
  return benchRun(o, runConvBench);
}

}  // namespace ssmjit::tool
