// `ssmjit bench-decode`: one Mamba-2 mixer layer's speculative-decoding step on the GPU, per
// batch and draft count L, with a fixed mixed pattern of accepted counts (uniform in 0..L per row):
//   verify   the verify pass alone (mamba2_decode_step, VerifyOnly);
//   (a)      the fused replay-and-verify launch (ReplayAndVerify);
//   (b)      replay then verify as two launches (ReplayOnly, then VerifyOnly);
//   (c)      the snapshot convention: the verify writes the SSM state after every draft into
//            snapshot slots (selective_state_update over L tokens, StateWrite::PerToken, after
//            causal_conv1d_update over the L drafts without commit) and the next step reads the
//            accepted snapshot. (Its conv state is not snapshotted, which only flatters (c).)
//   (d)      deferred commit: the fused launch with a ring of depth R (ReplayAndVerify), which
//            writes the states only when a row's ring overflows. The ring starts empty and fills,
//            overflows and empties over the graph's steps, so its time is the average over them.
// Each is timed as a CUDA graph of back-to-back steps (no host launch cost), median of trials.
// State bytes per accepted token: the SSM and conv state bytes the step reads and writes (for (d)
// also the ring rows it replays and appends), averaged over the graph's steps, over the accepted
// tokens of a step. Ends with a Markdown table; (d)/verify and (d)/(a) are the ratios the
// deferred mode is judged by.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "runtime/CudaGraph.h"
#include "runtime/DeviceBuffer.h"
#include "runtime/Driver.h"
#include "ssmjit/ops.h"
#include "tools/GpuTiming.h"
#include "tools/ToolSupport.h"
#include "tools/problems/DecodeProblem.h"

namespace ssmjit::tool {
namespace {

using testing::loadElement;
using testing::storeElement;

constexpr size_t kRingTokens = 19;  // ringTokens' place in DecodeProblem::all()

struct DecodeBenchOptions {
  int64_t heads = 80, headDim = 64, stateSize = 128, groups = 1, width = 4;
  std::vector<int64_t> batches{1, 4, 16, 64};
  std::vector<int64_t> drafts{4, 8};
  std::vector<int64_t> rings{0};  // ring depths R of (d); 0: R = L
  std::string stateDtype = "fp32", dtype = "bf16";
  int iters = 20, trials = 5;
  uint64_t seed = 1;
};

// Microseconds per step of `step` captured `iters` times into one graph, median over trials.
double graphStepUs(const std::function<void(CUstream)>& step, CUstream s, int iters, int trials) {
  step(s);  // compile and load outside the capture
  driver::check(driver::api().cuStreamSynchronize(s), "cuStreamSynchronize");
  CudaGraph g = CudaGraph::capture(s, [&](CUstream cs) {
    for (int i = 0; i < iters; ++i) step(cs);
  });
  g.launch(s);  // the first replay uploads the graph
  Event e0, e1;
  std::vector<double> us;
  for (int t = 0; t < trials; ++t) {
    e0.record(s);
    g.launch(s);
    e1.record(s);
    us.push_back(1e3 * e1.since(e0) / iters);
  }
  checkDeviceErrors(s);
  return median(us);
}

void runDecodeBench(const DecodeBenchOptions& o) {
  const DType st = parseFloatDType(o.stateDtype, "--state-dtype"), xt = parseFloatDType(o.dtype, "--dtype");
  driver::ensureContext();
  OwnedStream stream;
  const double copy = reportCopyGBs(stream);
  const int64_t H = o.heads, P = o.headDim, N = o.stateSize, G = o.groups, W = o.width;
  const int64_t Dc = H * P + 2 * G * N;
  Table table({"batch", "L", "R", "accepted (sum)", "verify µs", "(a) fused µs", "(a)/verify", "(b) replay+verify µs",
               "(c) snapshots µs", "(d) deferred µs", "(d)/verify", "(d)/(a)", "(a) state B/accepted tok",
               "(c) state B/accepted tok", "(d) state B/accepted tok"});
  for (int64_t B : o.batches)
    for (int64_t L : o.drafts) {
      std::vector<int64_t> depths;
      for (int64_t r : o.rings) depths.push_back(r > 0 ? r : L);
      testing::DecodeCase c;
      c.H = H, c.P = P, c.N = N, c.G = G, c.W = W;
      c.batch = B, c.slots = B, c.L = L, c.Lc = L, c.R = *std::max_element(depths.begin(), depths.end());
      c.ssmStateType = st;
      c.convStateType = xt;
      c.xType = c.dtType = xt;
      c.indices = false;
      c.seed = o.seed;
      testing::DecodeProblem p(c);
      // A fixed mixed accept pattern; every cache full, so any count up to L is valid.
      std::mt19937_64 rng(o.seed + static_cast<uint64_t>(B * 100 + L));
      int64_t accepted = 0;
      for (int64_t b = 0; b < B; ++b) {
        const int64_t n = std::uniform_int_distribution<int64_t>(0, L)(rng);
        storeElement(p.accepted.view(), b, static_cast<double>(n));
        storeElement(p.cachedTokens.view(), b, static_cast<double>(L));
        storeElement(p.ringTokens.view(), b, 0.0);
        accepted += n;
      }
      testing::DeviceTensors d(p.all());
      const Mamba2DecodeState dsRing = testing::deviceState(p, d);
      Mamba2DecodeState ds = dsRing;  // (a), (b) and verify: no ring
      ds.xbc_ring = ds.dt_ring = ds.ring_tokens = {};
      const Mamba2MixerWeights dw = testing::deviceWeights(p, d);
      Mamba2DecodeStepArgs fused = testing::deviceArgs(p, d), verify = fused, replay = fused;
      verify.parts = DecodeStepParts::VerifyOnly;
      verify.num_accepted = {};
      replay.parts = DecodeStepParts::ReplayOnly;
      replay.xBC = replay.dt = replay.z = replay.y = {};
      const double usVerify =
          graphStepUs([&](CUstream s) { mamba2_decode_step(ds, dw, verify, s); }, stream, o.iters, o.trials);
      const double usFused =
          graphStepUs([&](CUstream s) { mamba2_decode_step(ds, dw, fused, s); }, stream, o.iters, o.trials);
      const double usSplit = graphStepUs(
          [&](CUstream s) {
            mamba2_decode_step(ds, dw, replay, s);
            mamba2_decode_step(ds, dw, verify, s);
          },
          stream, o.iters, o.trials);

      // (c): L + 1 SSM slots a row (the read slot holds the accepted snapshot of the last step).
      const int64_t S2 = B * (L + 1);
      DeviceBuffer snap(static_cast<size_t>(S2 * H * P * N * dtypeBytes(st))),
          convOut(static_cast<size_t>(B * L * Dc * dtypeBytes(xt)));
      snap.fill(0);
      std::vector<int32_t> readSlot(static_cast<size_t>(B)), dst(static_cast<size_t>(B * L));
      for (int64_t b = 0; b < B; ++b) {
        readSlot[size_t(b)] =
            static_cast<int32_t>(b * (L + 1) + static_cast<int64_t>(loadElement(p.accepted.view(), b)));
        for (int64_t t = 0; t < L; ++t) dst[size_t(b * L + t)] = static_cast<int32_t>(b * (L + 1) + 1 + t);
      }
      DeviceBuffer readBuf = DeviceBuffer::fromHost(readSlot), dstBuf = DeviceBuffer::fromHost(dst);
      driver::check(driver::api().cuCtxSynchronize(), "cuCtxSynchronize (after uploads)");
      CausalConv1dUpdateArgs cu;
      cu.conv_state = ds.conv_state;
      cu.x = fused.xBC;
      cu.weight = dw.conv_weight;
      cu.bias = dw.conv_bias;
      cu.out = TensorView::contiguous(convOut.data(), xt, {B, L, Dc});
      cu.silu = true;
      cu.commit = false;
      SelectiveStateUpdateArgs su;
      su.state = TensorView::contiguous(snap.data(), st, {S2, H, P, N});
      auto part = [&](int64_t off, std::initializer_list<int64_t> shape) {
        TensorView v = TensorView::contiguous(static_cast<char*>(convOut.data()) + off * dtypeBytes(xt), xt, shape);
        v.strides[0] = L * Dc;
        v.strides[1] = Dc;
        return v;
      };
      su.x = part(0, {B, L, H, P});
      su.B = part(H * P, {B, L, G, N});
      su.C = part(H * P + G * N, {B, L, G, N});
      su.dt = fused.dt;
      su.A = dw.A;
      su.D = dw.D;
      su.dt_bias = dw.dt_bias;
      su.z = fused.z;
      su.out = fused.y;
      su.dt_softplus = dw.dt_softplus;
      su.state_batch_indices = TensorView::contiguous(readBuf.data(), DType::I32, {B});
      su.dst_state_indices = TensorView::contiguous(dstBuf.data(), DType::I32, {B, L});
      su.state_write = StateWrite::PerToken;
      const double usSnap = graphStepUs(
          [&](CUstream s) {
            causal_conv1d_update(cu, s);
            selective_state_update_tokens(su, s);
          },
          stream, o.iters, o.trials);

      // State traffic per step: (a) reads both states once and writes the rows that accepted
      // any token; (c) reads the SSM state once and writes it L times (conv state read once).
      const double ssmRow = static_cast<double>(H * P * N * dtypeBytes(st)),
                   convRow = static_cast<double>(Dc * (W - 1) * dtypeBytes(xt));
      int64_t committedRows = 0;
      for (int64_t b = 0; b < B; ++b) committedRows += loadElement(p.accepted.view(), b) > 0;
      const double bytesA = B * (ssmRow + convRow) + committedRows * (ssmRow + convRow);
      const double bytesC = B * (ssmRow + convRow) + B * L * ssmRow;
      const double perTok = static_cast<double>(std::max<int64_t>(1, accepted));
      std::printf(
          "batch %3lld L %lld: verify %.1f us, fused %.1f us (%.2fx), replay+verify %.1f us, snapshots %.1f us\n",
          (long long)B, (long long)L, usVerify, usFused, usFused / usVerify, usSplit, usSnap);

      // (d) per ring depth, from empty rings (the ring rows past R unused).
      const std::vector<int32_t> emptyRings(static_cast<size_t>(B), 0);
      for (int64_t R : depths) {
        Mamba2DecodeState dsR = dsRing;
        dsR.xbc_ring.shape[1] = dsR.dt_ring.shape[1] = R;
        d.bufs[kRingTokens].uploadBytes(emptyRings.data(), emptyRings.size() * sizeof(int32_t));
        driver::check(driver::api().cuCtxSynchronize(), "cuCtxSynchronize (after uploads)");
        const double usDeferred =
            graphStepUs([&](CUstream s) { mamba2_decode_step(dsR, dw, fused, s); }, stream, o.iters, o.trials);
        // Both states read every step and written at a row's overflow; the ring's rows read (the
        // replayed ones) and written (the appended ones), averaged over the graph's steps from
        // empty rings (the timed graphs go on from there: the same cycle).
        const double ringRow = static_cast<double>((Dc + H) * dtypeBytes(xt));
        double bytesD = 0;
        for (int64_t b = 0; b < B; ++b) {
          const int64_t n = static_cast<int64_t>(loadElement(p.accepted.view(), b));
          int64_t r = 0;
          for (int i = 0; i < o.iters; ++i) {
            bytesD += ssmRow + convRow + r * ringRow;
            if (r + n > R) {
              bytesD += ssmRow + convRow;
              r = 0;
            } else {
              bytesD += n * ringRow;
              r += n;
            }
          }
        }
        bytesD /= o.iters;
        table.add({std::to_string(B), std::to_string(L), std::to_string(R), std::to_string(accepted),
                   strf("%.1f", usVerify), strf("%.1f", usFused), strf("%.2f", usFused / usVerify),
                   strf("%.1f", usSplit), strf("%.1f", usSnap), strf("%.1f", usDeferred),
                   strf("%.2f", usDeferred / usVerify), strf("%.2f", usDeferred / usFused),
                   strf("%.2f MB", bytesA / perTok / 1e6), strf("%.2f MB", bytesC / perTok / 1e6),
                   strf("%.2f MB", bytesD / perTok / 1e6)});
        std::printf("batch %3lld L %lld R %lld: deferred %.1f us (%.2fx verify, %.2fx fused)\n", (long long)B,
                    (long long)L, (long long)R, usDeferred, usDeferred / usVerify, usDeferred / usFused);
      }
    }
  std::printf(
      "\nMamba-2 mixer H %lld, P %lld, N %lld, G %lld, conv %lld channels W %lld; SSM state %s, drafts/conv state %s; "
      "CUDA graphs of %d steps, median of %d trials\n\n",
      (long long)H, (long long)P, (long long)N, (long long)G, (long long)Dc, (long long)W, o.stateDtype.c_str(),
      o.dtype.c_str(), o.iters, o.trials);
  printTableAndCopy(table, copy);
}

}  // namespace

CommandRun defineDecodeBenchCommand(CLI::App* app) {
  auto o = std::make_shared<DecodeBenchOptions>();
  app->add_option("--heads", o->heads, "Heads H")->capture_default_str();
  app->add_option("--head-dim", o->headDim, "Head dim P")->capture_default_str();
  app->add_option("--state-size", o->stateSize, "State size N")->capture_default_str();
  app->add_option("--groups", o->groups, "Groups G")->capture_default_str();
  app->add_option("--width", o->width, "Conv width W (2..8)")->capture_default_str();
  app->add_option("--batch", o->batches, "Batch sizes, comma-separated")->delimiter(',')->capture_default_str();
  app->add_option("--drafts", o->drafts, "Drafts per step L, comma-separated")->delimiter(',')->capture_default_str();
  app->add_option("--ring", o->rings, "Ring depths R of the deferred mode (d), comma-separated; 0: R = L")
      ->delimiter(',')
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  addFloatDTypeOption(app, "--state-dtype", o->stateDtype, "SSM state dtype: fp32, bf16, fp16");
  addFloatDTypeOption(app, "--dtype", o->dtype, "Drafts, caches, y and conv state dtype: fp32, bf16, fp16");
  addTrialOptions(app, o->iters, o->trials, o->seed, "Steps per graph");
  return benchRun(o, runDecodeBench);
}

}  // namespace ssmjit::tool
