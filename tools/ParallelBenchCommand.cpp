// `ssmjit bench-parallel`: one Mamba-2 layer's prefill over several GPUs, one process each (under
// `ssmjit launch`), against the same call on one GPU: tensor parallel (--tp, with
// --sequence-parallel), or context parallel (--cp: one long sequence split over the ranks); with
// --backward also the prefill followed by the layer's backward. With --mamba1-scan,
// the Mamba-1 selective scan of one sequence instead (one GPU, or --cp; on one GPU also what a
// context-parallel part adds to it). Prints the time per call, tokens/s and the bytes each rank's
// collectives move per call; rank 0 speaks.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "runtime/CudaGraph.h"
#include "runtime/model/Mamba2WeightFields.h"
#include "runtime/model/OverlappedAllReduce.h"
#include "runtime/parallel/ScanCpCorrect.h"
#include "runtime/parallel/ScanCpStateGrad.h"
#include "ssmjit/mamba2_parallel.h"
#include "ssmjit/scan_parallel.h"
#include "tools/DeviceFill.h"
#include "tools/GpuTiming.h"
#include "tools/ParallelRanks.h"
#include "tools/ToolSupport.h"

namespace ssmjit::tool {
namespace {

struct ParallelBenchOptions {
  int tp = 1, cp = 1;
  bool sequenceParallel = false, backward = false, mamba1Scan = false;
  int64_t channels = 5120, scanState = 16;  // --mamba1-scan's D and N
  int64_t tokens = 16384, seqlen = 2048;
  int64_t hidden = 2560, heads = 80, headDim = 64, state = 128, groups = 8;
  std::string dtype = "bf16";
  int iters = 5, trials = 3;
  RankOptions ranks;
};

// Random weights and zero states of a layer of `d` (a shard's dims under TP).
struct BenchLayer {
  std::vector<DeviceTensor> t;
  Mamba2LayerWeights w;
  Mamba2LayerState s;
  BenchLayer(const Mamba2Dims& d, DType act, int64_t slots, std::mt19937_64& rng) {
    t.reserve(16);
    auto add = [&](DType dt, std::initializer_list<int64_t> shape, double lo, double hi) {
      t.emplace_back(dt, shape, lo, hi, rng);
      return t.back().view;
    };
    const double in = 1 / std::sqrt(double(d.hidden)), out = 1 / std::sqrt(double(d.dInner()));
    w.in_proj = add(act, {d.inProjRows(), d.hidden}, -in, in);
    w.conv_weight = add(act, {d.convDim(), d.conv_width}, -0.5, 0.5);
    w.conv_bias = add(act, {d.convDim()}, -0.1, 0.1);
    w.A = add(DType::F32, {d.heads}, -2.0, -0.5);
    w.D = add(DType::F32, {d.heads}, 0.5, 1.5);
    w.dt_bias = add(DType::F32, {d.heads}, -4.0, -2.0);
    w.norm_weight = add(act, {d.dInner()}, 0.5, 1.5);
    w.out_proj = add(act, {d.hidden, d.dInner()}, -out, out);
    s.conv_state = add(act, {slots, d.convDim(), d.conv_width - 1}, 0, 0);
    s.ssm_state = add(DType::F32, {slots, d.heads, d.head_dim, d.state}, 0, 0);
  }
};

// The gradients of a layer's backward, fp32 (as a mixed-precision trainer keeps them), and dout.
struct BenchGradients {
  std::vector<DeviceTensor> t;
  TensorView dout;
  Mamba2LayerGradients grads;
  BenchGradients(const Mamba2LayerWeights& w, const TensorView& hidden, const TensorView& out, std::mt19937_64& rng) {
    t.reserve(16);
    auto like = [&](const TensorView& v, DType dt, double lo, double hi) {
      if (!v.defined()) return TensorView{};
      if (dt == v.dtype)
        t.emplace_back(v, lo, hi, rng);
      else
        t.emplace_back(dt, std::initializer_list<int64_t>{v.numel()}, lo, hi, rng);
      TensorView g = v;
      g.data = t.back().view.data;
      g.dtype = dt;
      return g;
    };
    dout = like(out, out.dtype, -1, 1);
    grads.dhidden = like(hidden, hidden.dtype, 0, 0);
    const auto weights = detail::mamba2WeightFields(w);
    const auto g = detail::mamba2WeightFields(grads.weights);
    for (size_t k = 0; k < weights.size(); ++k) *g[k].second = like(*weights[k].second, DType::F32, 0, 0);
  }
};

// ms per call (callTimeUs), every wait the communicator's bounded one when there is one.
double msPerCall(const std::function<void(CUstream)>& call, Communicator* comm, CUstream s, int iters, int trials) {
  std::function<void(CUstream)> wait;
  if (comm) wait = [comm](CUstream st) { comm->synchronize(st, "the benchmark"); };
  return callTimeUs(call, s, iters, trials, wait) / 1e3;
}

// --mamba1-scan: one sequence of o.tokens through the Mamba-1 scan (u, delta, z, out and
// time-varying B/C in --dtype; A in [-8, -1] and softplus(delta + bias) in about [0.002, 0.1], as
// Mamba-1's initialisation has them), split over the ranks by selective_scan_cp when comm is
// given; with --backward, forward then backward with the sums over tokens all-reduced.
int runMamba1Scan(const ParallelBenchOptions& o, Communicator* comm) {
  const DType act = parseFloatDType(o.dtype, "--dtype");
  const int ranks = comm ? comm->size() : 1, rank = comm ? comm->rank() : 0;
  const int64_t L = o.tokens / ranks, D = o.channels, N = o.scanState;
  std::mt19937_64 rng(99 + rank);
  std::vector<DeviceTensor> t;
  t.reserve(24);
  auto add = [&](DType dt, std::initializer_list<int64_t> shape, double lo, double hi) {
    t.emplace_back(dt, shape, lo, hi, rng);
    return t.back().view;
  };
  SelectiveScanArgs a;
  a.u = add(act, {1, D, L}, -1, 1);
  a.delta = add(act, {1, D, L}, -1, 1);
  a.A = add(DType::F32, {D, N}, -8, -1);
  a.B = add(act, {1, 1, N, L}, -1, 1);
  a.C = add(act, {1, 1, N, L}, -1, 1);
  a.D = add(DType::F32, {D}, 0.5, 1.5);
  a.z = add(act, {1, D, L}, -1, 1);
  a.delta_bias = add(DType::F32, {D}, -6, -2.5);
  a.delta_softplus = true;
  a.out = add(act, {1, D, L}, 0, 0);
  const ContextPart part{rank > 0, rank < ranks - 1};
  const ScanCpCarry carry{add(DType::F32, {D, N}, 0, 0), add(DType::F32, {D, N}, 0, 0)};
  const int64_t need = comm ? selective_scan_cp_workspace_size(a, part, *comm)
                            : std::max(selective_scan_workspace_size(a), detail::scanCpCorrectWorkspaceFloats(a));
  DeviceBuffer ws(static_cast<size_t>(std::max<int64_t>(need, 1) * 4));
  a.workspace = TensorView::contiguous(ws.data(), DType::F32, {std::max<int64_t>(need, 1)});
  // Under CP a call ends with a barrier (an all-reduce of one float): a rank continuing from the
  // previous one scans after it, so without one, back-to-back calls would overlap and time the
  // ranks' throughput rather than one prefill's latency.
  const TensorView barrier = add(DType::F32, {1}, 0, 0);
  auto call = [&, a](CUstream s) {
    if (!comm) return selective_scan(a, s);
    selective_scan_cp(a, part, carry, *comm, s);
    comm->allReduceSum(barrier, s);
  };
  SelectiveScanBackwardArgs b;
  DeviceBuffer bws;
  if (o.backward) {
    b.forward = a;
    b.dout = add(act, {1, D, L}, -1, 1);
    b.du = add(act, {1, D, L}, 0, 0);
    b.ddelta = add(act, {1, D, L}, 0, 0);
    b.dz = add(act, {1, D, L}, 0, 0);
    b.dB = add(act, {1, 1, N, L}, 0, 0);
    b.dC = add(act, {1, 1, N, L}, 0, 0);
    b.dA = add(DType::F32, {D, N}, 0, 0);
    b.dD = add(DType::F32, {D}, 0, 0);
    b.ddelta_bias = add(DType::F32, {D}, 0, 0);
    const int64_t needB =
        comm ? selective_scan_cp_backward_workspace_size(b, part, *comm)
             : std::max(selective_scan_backward_workspace_size(b), detail::scanCpStateGradWorkspaceFloats(b));
    bws = DeviceBuffer(static_cast<size_t>(needB * 4));
    b.workspace = TensorView::contiguous(bws.data(), DType::F32, {needB});
  }
  auto step = [&, b](CUstream s) {
    call(s);
    if (!comm) return selective_scan_backward(b, s);
    selective_scan_cp_backward(b, part, carry, *comm, s);
    for (const TensorView& sum : {b.dA, b.dD, b.ddelta_bias}) comm->allReduceSum(sum, s);
  };
  OwnedStream stream;
  const double ms = msPerCall(call, comm, stream.get(), o.iters, o.trials);
  const double stepMs = o.backward ? msPerCall(step, comm, stream.get(), o.iters, o.trials) : 0;
  // On one GPU, what a part continuing from the previous rank adds, at this part's length: the
  // forward's correction by the incoming state and the backward's incoming-state gradient.
  double correctMs = 0, stateGradMs = 0;
  if (!comm) {
    correctMs = msPerCall([&, a](CUstream s) { detail::scanCpCorrect(a, carry.incoming, s); }, comm, stream.get(),
                          o.iters, o.trials);
    if (o.backward)
      stateGradMs = msPerCall([&, b, grad = add(DType::F32, {D, N}, 0, 0)](
                                  CUstream s) { detail::scanCpStateGrad(b, grad, b.workspace, s); },
                              comm, stream.get(), o.iters, o.trials);
  }
  if (rank == 0) {
    const std::string how = comm ? strf("context parallel over %d GPUs", ranks) : std::string("one GPU");
    std::printf("Mamba-1 selective scan: D %lld, N %lld, %s, one sequence of %lld tokens\n", (long long)D, (long long)N,
                o.dtype.c_str(), (long long)o.tokens);
    std::printf("%s: %.3f ms per call, %.0f tokens/s; collectives send %.2f MB per rank per call\n", how.c_str(), ms,
                o.tokens / (ms / 1e3), comm ? (ranks - 1) * 2 * D * N * 4 / 1e6 : 0.0);
    if (o.backward)
      std::printf("%s, forward + backward: %.3f ms per call (backward %.3f ms), %.0f tokens/s\n", how.c_str(), stepMs,
                  stepMs - ms, o.tokens / (stepMs / 1e3));
    if (!comm)
      std::printf(
          "as a context-parallel part continuing from the previous rank, it adds: the correction by the incoming "
          "state %.3f ms%s\n",
          correctMs, o.backward ? strf(", the incoming state's gradient %.3f ms", stateGradMs).c_str() : "");
  }
  return kExitOk;
}

int run(const ParallelBenchOptions& o) {
  if (o.tp > 1 && o.cp > 1) throw UsageError("--tp and --cp together: choose one");
  const int degree = std::max(o.tp, o.cp);
  if (o.tokens % degree != 0)
    throw UsageError("--tokens is " + std::to_string(o.tokens) + ", expected a multiple of the ranks (" +
                     std::to_string(degree) + ")");
  Mamba2Dims d;
  d.hidden = o.hidden;
  d.heads = o.heads;
  d.head_dim = o.headDim;
  d.state = o.state;
  d.groups = o.groups;
  const DType act = parseFloatDType(o.dtype, "--dtype");
  const char* mode = o.cp > 1 ? "--cp" : "--tp";
  const auto comm = joinRanks(
      mode, degree, o.ranks,
      {{"tokens", std::to_string(o.tokens)},
       {"seqlen", std::to_string(o.seqlen)},
       {"dims", strf("%lld/%lld/%lld/%lld/%lld", (long long)d.hidden, (long long)d.heads, (long long)d.head_dim,
                     (long long)d.state, (long long)d.groups)},
       {"dtype", o.dtype},
       {"sequence-parallel", o.sequenceParallel ? "1" : "0"},
       {"mamba1-scan", o.mamba1Scan ? strf("%lld/%lld", (long long)o.channels, (long long)o.scanState) : "0"}});
  driver::ensureContext();
  if (o.mamba1Scan) {
    if (o.tp > 1) throw UsageError("--mamba1-scan with --tp: the scan alone has no tensor parallel form here");
    return runMamba1Scan(o, comm.get());
  }
  const int rank = comm ? comm->rank() : 0;
  const Mamba2Dims local = o.tp > 1 ? mamba2_tp_shard_dims(d, o.tp) : d;
  // TP: packed sequences of --seqlen; CP: one sequence of every token.
  std::vector<int64_t> cu{0};
  const int64_t seqlen = o.cp > 1 ? o.tokens : std::min(o.seqlen, o.tokens);
  while (cu.back() < o.tokens) cu.push_back(std::min(cu.back() + seqlen, o.tokens));
  const auto nseq = static_cast<int64_t>(cu.size()) - 1;
  std::mt19937_64 rng(1234 + rank);
  BenchLayer L(local, act, nseq, rng);
  const bool split = o.cp > 1 || o.sequenceParallel;
  const int64_t rows = split ? o.tokens / degree : o.tokens;
  DeviceTensor hidden(act, {rows, d.hidden}, -1, 1, rng), out(act, {rows, d.hidden}, 0, 0, rng);
  std::vector<int32_t> cu32(cu.begin(), cu.end()), slots(static_cast<size_t>(nseq));
  for (int64_t i = 0; i < nseq; ++i) slots[i] = static_cast<int32_t>(i);
  const DeviceBuffer cub = DeviceBuffer::fromHost(cu32), slb = DeviceBuffer::fromHost(slots);
  OwnedStream stream;

  std::function<void(CUstream)> call;
  DeviceBuffer ws;
  const int64_t bytes = dtypeBytes(act);
  int64_t moved = 0;            // bytes each rank's collectives send per call (ring algorithms)
  Mamba2LayerArgs prefillArgs;  // without --cp
  Mamba2CpPrefillArgs cpArgs;   // with --cp
  if (o.cp > 1) {
    Mamba2CpPrefillArgs& a = cpArgs;
    a.hidden = hidden.view;
    a.out = out.view;
    a.cu_seqlens = cu;
    a.slots = slots;
    const int64_t need = mamba2_cp_layer_prefill_workspace_size(d, L.w, L.s, a, *comm);
    ws = DeviceBuffer(static_cast<size_t>(need * 4));
    a.workspace = TensorView::contiguous(ws.data(), DType::F32, {need});
    call = [&, a](CUstream s) { mamba2_cp_layer_prefill(d, L.w, L.s, a, *comm, s); };
    moved = (d.conv_width - 1) * d.inProjRows() * bytes + (o.cp - 1) * (d.heads + d.heads * d.head_dim * d.state) * 4;
  } else {
    Mamba2LayerArgs a;
    a.hidden = hidden.view;
    a.out = out.view;
    a.cu_seqlens = TensorView::contiguous(cub.data(), DType::I32, {nseq + 1});
    a.state_indices = TensorView::contiguous(slb.data(), DType::I32, {nseq});
    const int64_t need = comm ? mamba2_tp_layer_workspace_size(d, L.w, L.s, a, true, *comm, o.sequenceParallel)
                              : mamba2_layer_workspace_size(d, L.w, L.s, a, Mamba2LayerMode::Prefill);
    ws = DeviceBuffer(static_cast<size_t>(need * 4));
    a.workspace = TensorView::contiguous(ws.data(), DType::F32, {need});
    prefillArgs = a;
    if (comm)
      call = [&, a](CUstream s) { mamba2_tp_layer_prefill(d, L.w, L.s, a, *comm, o.sequenceParallel, s); };
    else
      call = [&, a](CUstream s) { mamba2_layer_prefill(d, L.w, L.s, a, s); };
    // All-reduce: 2 (t-1)/t of the rows; all-gather plus reduce-scatter: the same in two halves.
    if (comm) moved = 2 * (o.tp - 1) * o.tokens * d.hidden * bytes / o.tp;
  }
  // With --backward: the prefill then its backward, one training step of the layer.
  std::unique_ptr<BenchGradients> grads;
  DeviceBuffer bws;
  std::function<void(CUstream)> step;
  if (o.backward) {
    grads = std::make_unique<BenchGradients>(L.w, hidden.view, out.view, rng);
    if (o.cp > 1) {
      Mamba2CpBackwardArgs b;
      b.forward = cpArgs;
      b.dout = grads->dout;
      b.grads = grads->grads;
      const int64_t need = mamba2_cp_layer_backward_workspace_size(d, L.w, L.s, b, *comm);
      bws = DeviceBuffer(static_cast<size_t>(need * 4));
      b.workspace = TensorView::contiguous(bws.data(), DType::F32, {need});
      // The weights are replicated over the ranks: their gradients are all-reduced, as a trainer
      // does over data-parallel ranks.
      step = [&, b](CUstream s) {
        call(s);
        mamba2_cp_layer_backward(d, L.w, L.s, b, *comm, s);
        for (const auto& field : detail::mamba2WeightFields(b.grads.weights))
          if (field.second->defined()) comm->allReduceSum(*field.second, s);
      };
    } else {
      Mamba2LayerBackwardArgs b;
      b.forward = prefillArgs;
      b.dout = grads->dout;
      b.grads = grads->grads;
      const int64_t need = comm ? mamba2_tp_layer_backward_workspace_size(d, L.w, L.s, b, *comm, o.sequenceParallel)
                                : mamba2_layer_backward_workspace_size(d, L.w, L.s, b);
      bws = DeviceBuffer(static_cast<size_t>(need * 4));
      b.workspace = TensorView::contiguous(bws.data(), DType::F32, {need});
      step = [&, b](CUstream s) {
        call(s);
        if (comm)
          mamba2_tp_layer_backward(d, L.w, L.s, b, *comm, o.sequenceParallel, s);
        else
          mamba2_layer_backward(d, L.w, L.s, b, s);
      };
    }
  }
  const double ms = msPerCall(call, comm.get(), stream.get(), o.iters, o.trials);
  const double stepMs = o.backward ? msPerCall(step, comm.get(), stream.get(), o.iters, o.trials) : 0;
  // TP's collectives alone on the layer's rows: their share of the call.
  double collectiveMs = 0;
  if (o.tp > 1 && !o.sequenceParallel) {
    collectiveMs =
        msPerCall([&](CUstream st) { comm->allReduceSum(out.view, st); }, comm.get(), stream.get(), o.iters, o.trials);
  } else if (o.tp > 1) {
    const DeviceTensor gathered(act, {o.tokens, d.hidden}, 0, 0, rng);
    auto collectives = [&](CUstream st) {
      comm->allGather(hidden.view, gathered.view, st);
      comm->reduceScatterSum(gathered.view, out.view, st);
    };
    collectiveMs = msPerCall(collectives, comm.get(), stream.get(), o.iters, o.trials);
  }
  if (rank == 0) {
    std::printf(
        "Mamba-2 layer prefill: hidden %lld, %lld heads x %lld, state %lld, groups %lld, %s; %lld tokens in "
        "%lld sequence(s)\n",
        (long long)d.hidden, (long long)d.heads, (long long)d.head_dim, (long long)d.state, (long long)d.groups,
        o.dtype.c_str(), (long long)o.tokens, (long long)nseq);
    const std::string tpHow = o.sequenceParallel ? std::string(" (sequence parallel)")
                                                 : strf(" (out_proj in %d piece(s), SSMJIT_TP_OVERLAP_PIECES)",
                                                        detail::tpOverlapPieces(o.tokens));
    const std::string how = o.cp > 1   ? strf("context parallel over %d GPUs", o.cp)
                            : o.tp > 1 ? strf("tensor parallel over %d GPUs%s", o.tp, tpHow.c_str())
                                       : std::string("one GPU");
    std::printf("%s: %.3f ms per call, %.0f tokens/s; collectives send %.2f MB per rank per call\n", how.c_str(), ms,
                o.tokens / (ms / 1e3), moved / 1e6);
    if (o.backward)
      std::printf("%s, prefill + backward: %.3f ms per call (backward %.3f ms), %.0f tokens/s\n", how.c_str(), stepMs,
                  stepMs - ms, o.tokens / (stepMs / 1e3));
    if (collectiveMs > 0)
      std::printf("the call's collectives alone: %.3f ms (%.0f%% of the call)\n", collectiveMs,
                  100 * collectiveMs / ms);
  }
  return kExitOk;
}

}  // namespace

CommandRun defineParallelBenchCommand(CLI::App* app) {
  auto o = std::make_shared<ParallelBenchOptions>();
  app->add_option("--tp", o->tp, "Tensor parallel over this many GPUs (one process each)")->check(atLeast(1));
  app->add_option("--cp", o->cp, "Context parallel over this many GPUs: one sequence of --tokens split over them")
      ->check(atLeast(1));
  app->add_flag("--sequence-parallel", o->sequenceParallel, "With --tp: the residual stream split by tokens");
  app->add_flag("--backward", o->backward,
                "Also time the prefill followed by the layer's backward (fp32 weight gradients, all-reduced "
                "under --cp)");
  app->add_flag("--mamba1-scan", o->mamba1Scan,
                "Time the Mamba-1 selective scan of one sequence of --tokens instead (one GPU or --cp; on one GPU "
                "also its context-parallel correction and, with --backward, incoming-state gradient)");
  app->add_option("--channels", o->channels, "With --mamba1-scan: D")->check(atLeast(1))->capture_default_str();
  app->add_option("--scan-dstate", o->scanState, "With --mamba1-scan: N")->check(atLeast(1))->capture_default_str();
  app->add_option("--tokens", o->tokens, "Tokens per call")->check(atLeast(1))->capture_default_str();
  app->add_option("--seqlen", o->seqlen, "Without --cp: the packed row's sequence length")
      ->check(atLeast(1))
      ->capture_default_str();
  app->add_option("--hidden", o->hidden, "d_model")->capture_default_str();
  app->add_option("--heads", o->heads, "H")->capture_default_str();
  app->add_option("--headdim", o->headDim, "P")->capture_default_str();
  app->add_option("--dstate", o->state, "N")->capture_default_str();
  app->add_option("--groups", o->groups, "G (TP needs G % tp == 0)")->capture_default_str();
  app->add_option("--dtype", o->dtype, "Activations and weights")
      ->check(CLI::IsMember(floatDTypeNames()))
      ->capture_default_str();
  app->add_option("--iters", o->iters, "Calls per trial")->check(atLeast(1))->capture_default_str();
  app->add_option("--trials", o->trials, "Trials (the median is reported)")->check(atLeast(1))->capture_default_str();
  addRankOptions(app, o->ranks);
  return [o] { return run(*o); };
}

}  // namespace ssmjit::tool
