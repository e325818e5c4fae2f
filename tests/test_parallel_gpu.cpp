// Mamba-2 over several GPUs, one process per GPU (tests/support/RankProcesses.h): each parent test
// runs its ParallelWorker twin in SSMJIT_TEST_GPUS (default 2) processes and expects every rank to
// pass. The workers check, on fp32 layers and a tiny fp32 model:
//   - the tensor-parallel layer (prefill of a packed row, then decode steps with a pad row; the
//     prefill's out_proj also in row pieces overlapping their all-reduces, eager and in a graph)
//     and the sequence-parallel one against the whole layer on one GPU: the same numbers up to
//     the order of the sums (out_proj's over d_inner is split over ranks and summed by NCCL), and
//     each rank's SSM states equal to its heads of the whole layer's;
//   - the tensor-parallel model's logits (prefill with out_proj in pieces, decode) and generate()'s
//     tokens against one GPU;
//   - the context-parallel layer prefill (a sequence crossing every rank boundary) against one GPU;
//   - the tensor- and sequence-parallel layer's backward and the context-parallel one against the
//     whole layer's backward on one GPU: dhidden and every weight's gradient;
//   - the SSD's context-parallel forward and backward (ssd_cp, ssd_cp_backward) on that row against
//     ssd and ssd_backward of the whole row on one GPU: out and every gradient;
// The context-parallel checks and the tensor-parallel backward also run with their ranks as threads
// on one GPU (RankThreads.h), at 2 and 4 ranks, where NCCL's runs lack the GPUs.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "GpuTest.h"
#include "runtime/CudaGraph.h"
#include "runtime/DeviceBuffer.h"
#include "runtime/Driver.h"
#include "runtime/reference/Mamba2ModelRef.h"
#include "runtime/model/Mamba2Sharding.h"
#include "runtime/model/Mamba2WeightFields.h"
#include "ssmjit/error.h"
#include "ssmjit/mamba2_model.h"
#include "ssmjit/mamba2_parallel.h"
#include "ssmjit/parallel.h"
#include "ssmjit/ssd_parallel.h"
#include "support/LayerSizes.h"
#include "support/RandomMamba2Layer.h"
#include "support/RankChecks.h"
#include "support/RankProcesses.h"
#include "support/RankThreads.h"
#include "support/ReferenceMamba2Layer.h"
#include "support/ScratchDir.h"
#include "support/TinyMamba2Cases.h"

namespace ssmjit {
namespace {

using testing::DeviceMamba2Layer;
using testing::HostMamba2Layer;
using testing::join;
using testing::onDevice;
using testing::range;
using testing::worstError;

// G 4 and H 8 split over 1, 2 or 4 ranks; T 140 and B 4 split into as many row blocks.
Mamba2Dims layerDims() {
  Mamba2Dims d = testing::mamba2Dims(64, 8, 16, 16, 4);
  d.chunk_size = 64;
  return d;
}

// The inputs of a layer run: a packed prefill of three sequences, then two decode steps of four
// rows, the last a pad row.
struct LayerInputs {
  int64_t T = 140, B = 4;
  std::vector<int32_t> cu = {0, 37, 137, 140}, slots = {0, 1, 2}, decodeSlots = {0, 1, 2, -1};
  std::vector<float> prefill;
  std::vector<std::vector<float>> decode;
};

LayerInputs layerInputs(int64_t hidden) {
  LayerInputs in;
  std::mt19937_64 rng(4711);
  in.prefill = testing::randomTensor(rng, {in.T, hidden}, -1, 1).v;
  for (int s = 0; s < 2; ++s) in.decode.push_back(testing::randomTensor(rng, {in.B, hidden}, -1, 1).v);
  return in;
}

struct LayerOutputs {
  std::vector<float> prefill;
  std::vector<std::vector<float>> decode;
  std::vector<float> ssm;  // the SSM states after every call
};

TensorView rowsView(const DeviceBuffer& b, int64_t rows, int64_t cols) { return onDevice(b, DType::F32, {rows, cols}); }

// Runs the layer on this rank's rows: the whole layer (comm == nullptr), tensor parallel, or
// tensor and sequence parallel (each rank its block of rows). With `graph`, the prefill's output
// is that of a CUDA graph of the call, replayed over a poisoned out after the eager call.
LayerOutputs runLayer(DeviceMamba2Layer& L, const Mamba2Dims& full, const LayerInputs& in, Communicator* comm, bool sp,
                      bool graph = false) {
  const int64_t H = full.hidden, parts = sp ? comm->size() : 1, part = sp ? comm->rank() : 0;
  OwnedStream stream;
  auto wait = [&] {
    if (comm)
      comm->synchronize(stream.get(), "the layer");
    else
      stream.synchronize();
    checkDeviceErrors(stream.get());
  };
  auto call = [&](const std::vector<float>& hostRows, int64_t rows, const DeviceBuffer& cu, const DeviceBuffer& slots,
                  int64_t nslots, bool prefill) {
    const int64_t mine = rows / parts;
    DeviceBuffer hidden(static_cast<size_t>(mine * H * 4)), out(static_cast<size_t>(mine * H * 4));
    hidden.upload(hostRows.data() + part * mine * H, static_cast<size_t>(mine * H));
    out.fill(0xFF);
    Mamba2LayerArgs a;
    a.hidden = rowsView(hidden, mine, H);
    a.out = rowsView(out, mine, H);
    if (prefill) a.cu_seqlens = onDevice(cu, DType::I32, {nslots + 1});
    a.state_indices = onDevice(slots, DType::I32, {nslots});
    const int64_t need = comm ? mamba2_tp_layer_workspace_size(full, L.w, L.s, a, prefill, *comm, sp)
                              : mamba2_layer_workspace_size(
                                    L.dims, L.w, L.s, a, prefill ? Mamba2LayerMode::Prefill : Mamba2LayerMode::Decode);
    DeviceBuffer ws(static_cast<size_t>(need * 4));
    a.workspace = onDevice(ws, DType::F32, {need});
    if (!comm && prefill) mamba2_layer_prefill(L.dims, L.w, L.s, a, stream.get());
    if (!comm && !prefill) mamba2_layer_decode(L.dims, L.w, L.s, a, stream.get());
    if (comm && prefill) mamba2_tp_layer_prefill(full, L.w, L.s, a, *comm, sp, stream.get());
    if (comm && !prefill) mamba2_tp_layer_decode(full, L.w, L.s, a, *comm, sp, stream.get());
    wait();
    if (graph && prefill) {
      // The same states result: the prefill starts every sequence from zero.
      const CudaGraph g = CudaGraph::capture(
          stream.get(), [&](CUstream st) { mamba2_tp_layer_prefill(full, L.w, L.s, a, *comm, sp, st); });
      out.fill(0xFF);
      g.launch(stream.get());
      wait();
    }
    return out.download<float>();
  };
  LayerOutputs o;
  const DeviceBuffer cu = DeviceBuffer::fromHost(in.cu), slots = DeviceBuffer::fromHost(in.slots),
                     decodeSlots = DeviceBuffer::fromHost(in.decodeSlots);
  o.prefill = call(in.prefill, in.T, cu, slots, 3, true);
  for (const auto& step : in.decode) o.decode.push_back(call(step, in.B, cu, decodeSlots, in.B, false));
  const int64_t n = L.s.ssm_state.numel();
  o.ssm.resize(static_cast<size_t>(n));
  driver::check(driver::api().cuMemcpyDtoH(o.ssm.data(), reinterpret_cast<CUdeviceptr>(L.s.ssm_state.data), n * 4),
                "download ssm_state");
  return o;
}

// This rank's heads of the whole layer's SSM states (S, H, P, N).
std::vector<float> headsOf(const std::vector<float>& whole, const Mamba2Dims& d, const model::Mamba2LayerShard& s) {
  const int64_t per = d.head_dim * d.state, S = int64_t(whole.size()) / (d.heads * per);
  std::vector<float> out;
  for (int64_t slot = 0; slot < S; ++slot) {
    const auto from = whole.begin() + (slot * d.heads + s.heads.ranges[0].start) * per;
    out.insert(out.end(), from, from + s.local.heads * per);
  }
  return out;
}

constexpr double kLayerBound = testing::kRankBound;

TEST(ParallelWorker, DISABLED_TensorAndSequenceParallelLayer) {
  testing::WorkerRank wr;
  if (!testing::workerRank(&wr)) GTEST_SKIP() << "runs inside ParallelMamba2.TensorAndSequenceParallelLayer";
  const Mamba2Dims full = layerDims();
  HostMamba2Layer host = testing::randomMamba2Layer(full, 4601);
  const LayerInputs in = layerInputs(full.hidden);
  auto comm = join(wr, {{"test", "layer"}});
  DeviceMamba2Layer whole(host, nullptr, 4);
  const LayerOutputs ref = runLayer(whole, full, in, nullptr, false);
  const model::Mamba2LayerShard plan = model::planMamba2Shard(full, wr.rank, wr.size);
  // TP's prefill of T = 140 rows: one all-reduce after out_proj by default; in 3 row pieces
  // overlapping it (eager, then replayed from a graph: the side stream's fork and join).
  struct Mode {
    const char* name;
    bool sp;
    const char* pieces;  // SSMJIT_TP_OVERLAP_PIECES, nullptr: unset
    bool graph;
  };
  for (const Mode& m : {Mode{"TP", false, nullptr, false}, Mode{"TP in 3 pieces", false, "3", false},
                        Mode{"TP in 3 pieces, graph", false, "3", true}, Mode{"SP", true, nullptr, false}}) {
    const char* mode = m.name;
    const bool sp = m.sp;
    if (m.pieces)
      setenv("SSMJIT_TP_OVERLAP_PIECES", m.pieces, 1);
    else
      unsetenv("SSMJIT_TP_OVERLAP_PIECES");
    DeviceMamba2Layer part(host, &plan, 4);
    const LayerOutputs got = runLayer(part, full, in, comm.get(), sp, m.graph);
    const int64_t Tm = sp ? in.T / wr.size : in.T, Bm = sp ? in.B / wr.size : in.B;
    const double pre = worstError(got.prefill, ref.prefill, full.hidden, range(sp ? wr.rank * Tm : 0, Tm));
    std::fprintf(stderr, "[ measured ] %s prefill out: worst %.2e (bound %.0e)\n", mode, pre, kLayerBound);
    EXPECT_LE(pre, kLayerBound) << mode << " prefill";
    for (size_t s = 0; s < in.decode.size(); ++s) {
      std::vector<int64_t> rows;
      std::vector<float> live;
      for (int64_t i = 0; i < Bm; ++i) {
        const int64_t row = (sp ? wr.rank * Bm : 0) + i;
        if (in.decodeSlots[row] < 0) continue;  // a pad row: not written
        rows.push_back(row);
        live.insert(live.end(), got.decode[s].begin() + i * full.hidden, got.decode[s].begin() + (i + 1) * full.hidden);
      }
      const double dec = worstError(live, ref.decode[s], full.hidden, rows);
      std::fprintf(stderr, "[ measured ] %s decode step %zu out: worst %.2e\n", mode, s, dec);
      EXPECT_LE(dec, kLayerBound) << mode << " decode step " << s;
    }
    const std::vector<float> mine = headsOf(ref.ssm, full, plan);
    const double st = worstError(got.ssm, mine, 1, range(0, int64_t(mine.size())));
    std::fprintf(stderr, "[ measured ] %s ssm states: worst %.2e\n", mode, st);
    EXPECT_LE(st, kLayerBound) << mode << " states";
  }
}

TEST(ParallelMamba2, TensorAndSequenceParallelLayer) {
  testing::expectRanksPass("TensorAndSequenceParallelLayer", 300);
}

TEST(ParallelWorker, DISABLED_TensorParallelModel) {
  testing::WorkerRank wr;
  if (!testing::workerRank(&wr)) GTEST_SKIP() << "runs inside ParallelMamba2.TensorParallelModel";
  testing::TinyMamba2 m = testing::tinyMamba2(32, 8, 8, 16, 4);
  m.use_bias = true;
  testing::ScratchDir dir;
  testing::writeTinyMamba2(dir.path(), m, testing::tinyMamba2Tensors(m, 77));
  auto comm = join(wr, {{"test", "model"}});
  // The prefills' out_proj in 3 row pieces whose all-reduces overlap the GEMM (unset: one piece
  // below 4096 rows).
  setenv("SSMJIT_TP_OVERLAP_PIECES", "3", 1);
  Mamba2ModelOptions o;
  o.dtype = DType::F32;
  o.max_batch = 4;
  o.max_prefill_tokens = 128;
  auto single = Mamba2Model::load(dir.path(), o);
  o.tensor_parallel = comm.get();
  auto tp = Mamba2Model::load(dir.path(), o);
  const int64_t V = single->config().vocab;

  std::vector<std::vector<int32_t>> prompts = {{3, 1, 4}, {}};
  for (int t = 0; t < 70; ++t) prompts[1].push_back((t * 7 + 3) % 50);  // crosses a chunk of 64
  auto logitsOf = [&](Mamba2Model& model, bool isTp) {
    DeviceBuffer logits(static_cast<size_t>(2 * V * 4));
    OwnedStream s;
    model.prefill(prompts, {0, 1}, onDevice(logits, DType::F32, {2, V}), s.get());
    if (isTp) comm->synchronize(s.get(), "the prefill");
    s.synchronize();
    std::vector<float> out = logits.download<float>();
    const std::vector<int32_t> ids = {5, 9}, slots = {0, 1};
    const DeviceBuffer idb = DeviceBuffer::fromHost(ids), slb = DeviceBuffer::fromHost(slots);
    for (int step = 0; step < 3; ++step) {
      model.decode(onDevice(idb, DType::I32, {2}), onDevice(slb, DType::I32, {2}), onDevice(logits, DType::F32, {2, V}),
                   s.get());
      if (isTp) comm->synchronize(s.get(), "a decode step");
      s.synchronize();
      const std::vector<float> d = logits.download<float>();
      out.insert(out.end(), d.begin(), d.end());
    }
    return out;
  };
  const std::vector<float> ref = logitsOf(*single, false), got = logitsOf(*tp, true);
  const double err = worstError(got, ref, V, range(0, int64_t(ref.size()) / V));
  std::fprintf(stderr, "[ measured ] TP model logits (prefill, 3 decode steps): worst %.2e (bound %.0e)\n", err,
               kLayerBound);
  EXPECT_LE(err, kLayerBound);

  GenerateOptions g;
  g.max_new_tokens = 8;
  const GenerateResult a = generate(*single, prompts, g), b = generate(*tp, prompts, g);
  EXPECT_EQ(a.tokens, b.tokens) << "greedy tokens of the tensor-parallel model differ from one GPU's";
  g.cuda_graphs = false;  // the steps above replayed a graph holding the all-reduces
  EXPECT_EQ(generate(*tp, prompts, g).tokens, b.tokens) << "tensor-parallel tokens with graphs differ from eager";
}

TEST(ParallelMamba2, TensorParallelModel) { testing::expectRanksPass("TensorParallelModel", 300); }

// The layer's gradients of one prefill of in.prefill (final states kept, none read) with dout:
// dhidden (this rank's rows under SP) and the weights' (the shard's under TP), in Mamba2LayerWeights' order.
std::vector<float> downloadF32(const TensorView& t);

struct LayerGradients {
  std::vector<float> dhidden;
  std::vector<std::vector<float>> weights;  // empty where the weight is absent
};

// The weights' names, in that order.
const char* weightName(size_t k) {
  Mamba2LayerWeights w;
  return detail::mamba2WeightFields(w)[k].first;
}

std::vector<TensorView*> weightList(Mamba2LayerWeights& w) {
  std::vector<TensorView*> out;
  for (const auto& f : detail::mamba2WeightFields(w)) out.push_back(f.second);
  return out;
}

LayerGradients runBackward(DeviceMamba2Layer& L, const Mamba2Dims& full, const LayerInputs& in,
                           const std::vector<float>& dout, Communicator* comm, bool sp) {
  const int64_t H = full.hidden, parts = sp ? comm->size() : 1, part = sp ? comm->rank() : 0, rows = in.T / parts;
  OwnedStream stream;
  std::vector<DeviceBuffer> bufs;
  auto rowsOf = [&](const std::vector<float>& host) {
    bufs.emplace_back(static_cast<size_t>(rows * H * 4));
    if (host.empty())
      bufs.back().fill(0xFF);
    else
      bufs.back().upload(host.data() + part * rows * H, static_cast<size_t>(rows * H));
    return onDevice(bufs.back(), DType::F32, {rows, H});
  };
  const DeviceBuffer cu = DeviceBuffer::fromHost(in.cu), slots = DeviceBuffer::fromHost(in.slots);
  Mamba2LayerArgs a;
  a.hidden = rowsOf(in.prefill);
  a.out = rowsOf({});
  a.cu_seqlens = onDevice(cu, DType::I32, {4});
  a.state_indices = onDevice(slots, DType::I32, {3});
  const int64_t fws = comm ? mamba2_tp_layer_workspace_size(full, L.w, L.s, a, true, *comm, sp)
                           : mamba2_layer_workspace_size(L.dims, L.w, L.s, a, Mamba2LayerMode::Prefill);
  DeviceBuffer fwsBuf(static_cast<size_t>(fws * 4));
  a.workspace = onDevice(fwsBuf, DType::F32, {fws});
  Mamba2LayerBackwardArgs b;
  b.forward = a;
  b.dout = rowsOf(dout);
  b.grads.dhidden = rowsOf({});
  std::vector<TensorView*> ws = weightList(L.w), gs = weightList(b.grads.weights);
  for (size_t k = 0; k < ws.size(); ++k)
    if (ws[k]->defined()) {
      bufs.emplace_back(static_cast<size_t>(ws[k]->numel() * 4));
      bufs.back().fill(0xFF);
      *gs[k] = *ws[k];
      gs[k]->data = bufs.back().data();
    }
  const int64_t bws = comm ? mamba2_tp_layer_backward_workspace_size(full, L.w, L.s, b, *comm, sp)
                           : mamba2_layer_backward_workspace_size(L.dims, L.w, L.s, b);
  DeviceBuffer bwsBuf(static_cast<size_t>(bws * 4));
  b.workspace = onDevice(bwsBuf, DType::F32, {bws});
  if (comm) {
    mamba2_tp_layer_prefill(full, L.w, L.s, a, *comm, sp, stream.get());
    mamba2_tp_layer_backward(full, L.w, L.s, b, *comm, sp, stream.get());
    comm->synchronize(stream.get(), "the layer's backward");
  } else {
    mamba2_layer_prefill(L.dims, L.w, L.s, a, stream.get());
    mamba2_layer_backward(L.dims, L.w, L.s, b, stream.get());
    stream.synchronize();
  }
  checkDeviceErrors(stream.get());
  LayerGradients g;
  g.dhidden = downloadF32(b.grads.dhidden);
  for (TensorView* t : gs) g.weights.push_back(t->defined() ? downloadF32(*t) : std::vector<float>{});
  return g;
}

// The shard's part of each whole-layer gradient, sliced as Mamba2Sharding slices the weights.
std::vector<std::vector<float>> shardOf(const LayerGradients& whole, const Mamba2Dims& d,
                                        const model::Mamba2LayerShard& s) {
  const std::vector<std::vector<int64_t>> shapes = {{d.inProjRows(), d.hidden},
                                                    {d.inProjRows()},
                                                    {d.convDim(), d.conv_width},
                                                    {d.convDim()},
                                                    {d.heads},
                                                    {d.heads},
                                                    {d.heads},
                                                    {d.dInner()},
                                                    {d.hidden, d.dInner()},
                                                    {d.hidden}};
  const model::TensorSlice* slices[] = {&s.inProj, &s.inProj, &s.conv,     &s.conv,    &s.heads,
                                        &s.heads,  &s.heads,  &s.channels, &s.outProj, nullptr};
  std::vector<std::vector<float>> out;
  for (size_t k = 0; k < shapes.size(); ++k) {
    testing::HostTensorF32 t{shapes[k], whole.weights[k]};
    if (!slices[k]) {  // out_proj's bias: rank 0's alone
      out.push_back(s.outProjBias ? t.v : std::vector<float>{});
      continue;
    }
    std::vector<char> bytes;
    model::sliceTensor(t.view(), *slices[k], DType::F32, bytes);
    std::vector<float> v(bytes.size() / 4);
    std::memcpy(v.data(), bytes.data(), bytes.size());
    out.push_back(v);
  }
  return out;
}

// The tensor- and sequence-parallel layer's backward, rank `rank` of comm's ranks (processes on
// GPUs, or threads on one), against the whole layer's on one GPU.
void tpLayerBackwardRank(int rank, Communicator& ranks) {
  Communicator* comm = &ranks;
  const Mamba2Dims full = layerDims();
  HostMamba2Layer host = testing::randomMamba2Layer(full, 4605);
  const LayerInputs in = layerInputs(full.hidden);
  std::mt19937_64 rng(4606);
  const std::vector<float> dout = testing::randomTensor(rng, {in.T, full.hidden}, -1, 1).v;
  DeviceMamba2Layer whole(host, nullptr, 4);
  const LayerGradients ref = runBackward(whole, full, in, dout, nullptr, false);
  const model::Mamba2LayerShard plan = model::planMamba2Shard(full, rank, comm->size());
  const std::vector<std::vector<float>> refShard = shardOf(ref, full, plan);
  for (const bool sp : {false, true}) {
    const char* mode = sp ? "SP" : "TP";
    DeviceMamba2Layer part(host, &plan, 4);
    const LayerGradients got = runBackward(part, full, in, dout, comm, sp);
    const int64_t rows = sp ? in.T / comm->size() : in.T;
    const double dh = worstError(got.dhidden, ref.dhidden, full.hidden, range(sp ? rank * rows : 0, rows));
    std::fprintf(stderr, "[ measured ] %s backward dhidden: worst %.2e (bound %.0e)\n", mode, dh, kLayerBound);
    EXPECT_LE(dh, kLayerBound) << mode << " dhidden";
    for (size_t k = 0; k < refShard.size(); ++k) {
      ASSERT_EQ(got.weights[k].size(), refShard[k].size()) << mode << " " << weightName(k);
      if (refShard[k].empty()) continue;
      const double e = worstError(got.weights[k], refShard[k], 1, range(0, int64_t(refShard[k].size())));
      std::fprintf(stderr, "[ measured ] %s backward d%s: worst %.2e\n", mode, weightName(k), e);
      EXPECT_LE(e, kLayerBound) << mode << " d" << weightName(k);
    }
  }
}

TEST(ParallelWorker, DISABLED_TensorParallelLayerBackward) {
  testing::WorkerRank wr;
  if (!testing::workerRank(&wr)) GTEST_SKIP() << "runs inside ParallelMamba2.TensorParallelLayerBackward";
  tpLayerBackwardRank(wr.rank, *join(wr, {{"test", "layer backward"}}));
}

TEST(ParallelMamba2, TensorParallelLayerBackward) { testing::expectRanksPass("TensorParallelLayerBackward", 300); }

// The same ranks as threads of this process on one GPU (RankThreads.h), 2 and 4 of them.
TEST(ParallelMamba2, TensorParallelLayerBackwardAsThreads) {
  SSMJIT_REQUIRE_GPU();
  for (int n : {2, 4}) testing::runRankThreads(n, tpLayerBackwardRank, 300);
}

std::vector<float> downloadF32(const TensorView& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  driver::check(driver::api().cuMemcpyDtoH(v.data(), reinterpret_cast<CUdeviceptr>(t.data), v.size() * 4), "download");
  return v;
}

// Slot `slot` of a (S, ...) state tensor's host copy.
std::vector<float> slotOf(const std::vector<float>& states, int64_t slots, int64_t slot) {
  const size_t per = states.size() / size_t(slots);
  return std::vector<float>(states.begin() + slot * per, states.begin() + (slot + 1) * per);
}

// One packed row of T = 96 c tokens over c ranks: a sequence ending on rank 0, one crossing every
// rank boundary (with c >= 3 it spans whole ranks: their decays pass its state on), one short one
// at the end. Chunks of 64 do not line up with the parts, so the sums run in another order. Rank
// `rank` of comm's ranks (processes on GPUs, or threads on one).
void cpPrefillRank(int rank, Communicator& ranks) {
  Communicator* comm = &ranks;
  const Mamba2Dims full = layerDims();
  HostMamba2Layer host = testing::randomMamba2Layer(full, 4603);
  const int64_t Tr = 96, T = Tr * comm->size(), S = 4, Hd = full.hidden;
  const std::vector<int64_t> cu = {0, 40, T - 20, T};
  const std::vector<int32_t> slots = {0, 1, 2};
  std::mt19937_64 rng(99);
  const std::vector<float> hidden = testing::randomTensor(rng, {T, Hd}, -1, 1).v;
  OwnedStream stream;

  DeviceMamba2Layer whole(host, nullptr, S);
  std::vector<float> ref;
  {
    const std::vector<int32_t> cu32(cu.begin(), cu.end());
    const DeviceBuffer h = DeviceBuffer::fromHost(hidden), cub = DeviceBuffer::fromHost(cu32),
                       slb = DeviceBuffer::fromHost(slots);
    DeviceBuffer out(static_cast<size_t>(T * Hd * 4));
    Mamba2LayerArgs a;
    a.hidden = rowsView(h, T, Hd);
    a.out = rowsView(out, T, Hd);
    a.cu_seqlens = onDevice(cub, DType::I32, {4});
    a.state_indices = onDevice(slb, DType::I32, {3});
    const int64_t need = mamba2_layer_workspace_size(full, whole.w, whole.s, a, Mamba2LayerMode::Prefill);
    DeviceBuffer ws(static_cast<size_t>(need * 4));
    a.workspace = onDevice(ws, DType::F32, {need});
    mamba2_layer_prefill(full, whole.w, whole.s, a, stream.get());
    stream.synchronize();
    checkDeviceErrors(stream.get());
    ref = out.download<float>();
  }

  DeviceMamba2Layer part(host, nullptr, S);
  DeviceBuffer h(static_cast<size_t>(Tr * Hd * 4)), out(static_cast<size_t>(Tr * Hd * 4));
  h.upload(hidden.data() + rank * Tr * Hd, static_cast<size_t>(Tr * Hd));
  out.fill(0xFF);
  Mamba2CpPrefillArgs a;
  a.hidden = rowsView(h, Tr, Hd);
  a.out = rowsView(out, Tr, Hd);
  a.cu_seqlens = cu;
  a.slots = slots;
  const int64_t need = mamba2_cp_layer_prefill_workspace_size(full, part.w, part.s, a, *comm);
  DeviceBuffer ws(static_cast<size_t>(need * 4));
  a.workspace = onDevice(ws, DType::F32, {need});
  mamba2_cp_layer_prefill(full, part.w, part.s, a, *comm, stream.get());
  comm->synchronize(stream.get(), "the context-parallel prefill");
  checkDeviceErrors(stream.get());
  const double err = worstError(out.download<float>(), ref, Hd, range(rank * Tr, Tr));
  std::fprintf(stderr, "[ measured ] CP rank %d out: worst %.2e (bound %.0e)\n", rank, err, kLayerBound);
  EXPECT_LE(err, kLayerBound);
  // The final states of the sequences that end on this rank.
  const std::vector<float> ssmRef = downloadF32(whole.s.ssm_state), ssmGot = downloadF32(part.s.ssm_state);
  const std::vector<float> convRef = downloadF32(whole.s.conv_state), convGot = downloadF32(part.s.conv_state);
  for (size_t i = 0; i < slots.size(); ++i) {
    if (cu[i + 1] <= rank * Tr || cu[i + 1] > (rank + 1) * Tr) continue;
    const std::vector<float> want = slotOf(ssmRef, S, slots[i]), wantConv = slotOf(convRef, S, slots[i]);
    const double e = worstError(slotOf(ssmGot, S, slots[i]), want, 1, range(0, int64_t(want.size())));
    const double ec = worstError(slotOf(convGot, S, slots[i]), wantConv, 1, range(0, int64_t(wantConv.size())));
    std::fprintf(stderr, "[ measured ] CP rank %d sequence %zu final ssm state %.2e, conv state %.2e\n", rank, i, e,
                 ec);
    EXPECT_LE(e, kLayerBound) << "sequence " << i;
    EXPECT_LE(ec, kLayerBound) << "sequence " << i;  // in_proj's rows (its GEMM may pick another algorithm)
  }
}

TEST(ParallelWorker, DISABLED_ContextParallelPrefill) {
  testing::WorkerRank wr;
  if (!testing::workerRank(&wr)) GTEST_SKIP() << "runs inside ParallelMamba2.ContextParallelPrefill";
  cpPrefillRank(wr.rank, *join(wr, {{"test", "cp"}}));
}

TEST(ParallelMamba2, ContextParallelPrefill) { testing::expectRanksPass("ContextParallelPrefill", 300); }

// The same ranks as threads of this process on one GPU (RankThreads.h), 2 and 4 of them.
TEST(ParallelMamba2, ContextParallelPrefillAsThreads) {
  SSMJIT_REQUIRE_GPU();
  for (int n : {2, 4}) testing::runRankThreads(n, cpPrefillRank, 300);
}

// The context-parallel layer's backward on the prefill's row (a sequence crossing every rank
// boundary) against the whole layer's backward on one GPU: this rank's rows of dhidden, and every
// weight's gradient once the ranks' part sums are all-reduced. Rank `rank` of comm's ranks
// (processes on GPUs, or threads on one).
void cpLayerBackwardRank(int rank, Communicator& ranks) {
  Communicator* comm = &ranks;
  const Mamba2Dims full = layerDims();
  HostMamba2Layer host = testing::randomMamba2Layer(full, 4607);
  const int64_t Tr = 96, T = Tr * comm->size(), S = 4, Hd = full.hidden;
  LayerInputs in;
  in.T = T;
  in.cu = {0, 40, static_cast<int32_t>(T - 20), static_cast<int32_t>(T)};
  std::mt19937_64 rng(4608);
  in.prefill = testing::randomTensor(rng, {T, Hd}, -1, 1).v;
  const std::vector<float> dout = testing::randomTensor(rng, {T, Hd}, -1, 1).v;
  DeviceMamba2Layer whole(host, nullptr, S);
  const LayerGradients ref = runBackward(whole, full, in, dout, nullptr, false);

  OwnedStream stream;
  DeviceMamba2Layer part(host, nullptr, S);
  std::vector<DeviceBuffer> bufs;
  auto rows = [&](const std::vector<float>& host) {
    bufs.emplace_back(static_cast<size_t>(Tr * Hd * 4));
    if (host.empty())
      bufs.back().fill(0xFF);
    else
      bufs.back().upload(host.data() + rank * Tr * Hd, static_cast<size_t>(Tr * Hd));
    return rowsView(bufs.back(), Tr, Hd);
  };
  Mamba2CpBackwardArgs b;
  Mamba2CpPrefillArgs& a = b.forward;
  a.hidden = rows(in.prefill);
  a.out = rows({});
  a.cu_seqlens = std::vector<int64_t>(in.cu.begin(), in.cu.end());
  a.slots = in.slots;
  const int64_t fws = mamba2_cp_layer_prefill_workspace_size(full, part.w, part.s, a, *comm);
  DeviceBuffer fwsBuf(static_cast<size_t>(fws * 4));
  a.workspace = onDevice(fwsBuf, DType::F32, {fws});
  b.dout = rows(dout);
  b.grads.dhidden = rows({});
  std::vector<TensorView*> ws = weightList(part.w), gs = weightList(b.grads.weights);
  for (size_t k = 0; k < ws.size(); ++k) {
    bufs.emplace_back(static_cast<size_t>(ws[k]->numel() * 4));
    bufs.back().fill(0xFF);
    *gs[k] = *ws[k];
    gs[k]->data = bufs.back().data();
  }
  const int64_t bws = mamba2_cp_layer_backward_workspace_size(full, part.w, part.s, b, *comm);
  DeviceBuffer bwsBuf(static_cast<size_t>(bws * 4));
  bwsBuf.fill(0xFF);  // its contents on entry must not matter
  b.workspace = onDevice(bwsBuf, DType::F32, {bws});
  mamba2_cp_layer_prefill(full, part.w, part.s, a, *comm, stream.get());
  mamba2_cp_layer_backward(full, part.w, part.s, b, *comm, stream.get());
  for (TensorView* g : gs) comm->allReduceSum(*g, stream.get());  // the parts' sums
  comm->synchronize(stream.get(), "the context-parallel backward");
  checkDeviceErrors(stream.get());
  const double dh = worstError(downloadF32(b.grads.dhidden), ref.dhidden, Hd, range(rank * Tr, Tr));
  std::fprintf(stderr, "[ measured ] CP rank %d backward dhidden: worst %.2e (bound %.0e)\n", rank, dh, kLayerBound);
  EXPECT_LE(dh, kLayerBound) << "dhidden";
  // dA and ddt_bias sum terms that cancel over every token, so their fp32 rounding shows (with 4
  // ranks, one GPU's own result is 1.2-1.5e-4 from the float64 adjoint): they are held to being no
  // further from the float64 adjoint than one GPU's result (twice its distance, or kLayerBound).
  testing::ReferenceLayer R(host);
  const int64_t Dc = full.convDim(), W1 = full.conv_width - 1, ssm = full.heads * full.head_dim * full.state;
  const std::vector<reference::Mamba2SequenceState> zeros(
      in.cu.size() - 1, {std::vector<double>(Dc * W1, 0.0), std::vector<double>(ssm, 0.0)});
  const reference::Mamba2LayerGradientsRef exact = reference::mamba2_layer_backward(
      R.cfg, R.w, std::vector<double>(in.prefill.begin(), in.prefill.end()),
      std::vector<int64_t>(in.cu.begin(), in.cu.end()), zeros, std::vector<double>(dout.begin(), dout.end()), zeros);
  // Worst error against the float64 gradient (dA compared as dA_log = dA * A).
  auto fromExact = [&](const std::vector<float>& g, const std::vector<double>& x, bool isA) {
    std::vector<float> scaled(g.size()), xs(x.size());
    for (size_t i = 0; i < g.size(); ++i) scaled[i] = isA ? g[i] * host.A.v[i] : g[i], xs[i] = float(x[i]);
    return worstError(scaled, xs, 1, range(0, int64_t(xs.size())));
  };
  for (size_t k = 0; k < gs.size(); ++k) {
    const std::vector<float> got = downloadF32(*gs[k]);
    const std::string name = weightName(k);
    if (name == "A" || name == "dt_bias") {
      const std::vector<double>& x = name == "A" ? exact.A_log : exact.dt_bias;
      const double cp = fromExact(got, x, name == "A"), one = fromExact(ref.weights[k], x, name == "A");
      std::fprintf(stderr, "[ measured ] CP rank %d backward d%s from float64: worst %.2e (one GPU's %.2e)\n", rank,
                   name.c_str(), cp, one);
      EXPECT_LE(cp, std::max(2 * one, kLayerBound)) << "d" << name;
      continue;
    }
    const double e = worstError(got, ref.weights[k], 1, range(0, int64_t(got.size())));
    std::fprintf(stderr, "[ measured ] CP rank %d backward d%s: worst %.2e\n", rank, name.c_str(), e);
    EXPECT_LE(e, kLayerBound) << "d" << name;
  }
}

TEST(ParallelWorker, DISABLED_ContextParallelLayerBackward) {
  testing::WorkerRank wr;
  if (!testing::workerRank(&wr)) GTEST_SKIP() << "runs inside ParallelMamba2.ContextParallelLayerBackward";
  cpLayerBackwardRank(wr.rank, *join(wr, {{"test", "cp backward"}}));
}

TEST(ParallelMamba2, ContextParallelLayerBackward) { testing::expectRanksPass("ContextParallelLayerBackward", 300); }

// The same ranks as threads of this process on one GPU (RankThreads.h), 2 and 4 of them.
TEST(ParallelMamba2, ContextParallelLayerBackwardAsThreads) {
  SSMJIT_REQUIRE_GPU();
  for (int n : {2, 4}) testing::runRankThreads(n, cpLayerBackwardRank, 300);
}

// The SSD's context-parallel training step (ssd_parallel.h): the row of the prefill test above,
// as SSD inputs (fp32, z, D, dt_bias with softplus), forward by ssd_cp and backward by
// ssd_cp_backward on each rank's part, against ssd and ssd_backward of the whole row on one GPU.
// A's small decays (|dt' A| about 0.02 a token) leave a whole part's decay near 0.2, so with
// c >= 3 the middle ranks' a passes a real share of the state and of its adjoint on; with c = 2
// rank 0 takes G from rank 1 and rank 1 gives its incoming state's gradient, one pass each.
struct SsdRow {
  int64_t T = 0, H = 8, P = 16, G = 2, N = 16;
  std::vector<float> x, dt, A, B, C, D, z, dtBias, dout;
};

SsdRow randomSsdRow(int64_t T) {
  SsdRow r;
  r.T = T;
  std::mt19937_64 rng(4711);
  auto rnd = [&](std::vector<int64_t> shape, double lo, double hi) {
    return testing::randomTensor(rng, std::move(shape), lo, hi).v;
  };
  r.x = rnd({T, r.H, r.P}, -1, 1);
  r.dt = rnd({T, r.H}, -1, 1);
  r.A = rnd({r.H}, -0.1, -0.02);
  r.B = rnd({T, r.G, r.N}, -1, 1);
  r.C = rnd({T, r.G, r.N}, -1, 1);
  r.D = rnd({r.H}, 0.5, 1.5);
  r.z = rnd({T, r.H, r.P}, -1, 1);
  r.dtBias = rnd({r.H}, -2, -1);
  r.dout = rnd({T, r.H, r.P}, -1, 1);
  return r;
}

// out and every gradient, as downloaded.
struct SsdStep {
  std::vector<float> out, dx, ddt, dA, dB, dC, dD, dz, ddtBias;
};

// Forward and backward over rows [p0, p0 + L) of the row, its sequences `cu` (from p0): the plain
// ops without `comm`, else the context-parallel ones with the sums over tokens all-reduced.
SsdStep ssdStep(const SsdRow& r, int64_t p0, int64_t L, const std::vector<int32_t>& cu, Communicator* comm,
                const ContextPart& part) {
  OwnedStream stream;
  const int64_t H = r.H, P = r.P, G = r.G, N = r.N, HP = H * P, GN = G * N;
  auto rows = [&](const std::vector<float>& v, int64_t cols) {
    return DeviceBuffer::fromHost(std::vector<float>(v.begin() + p0 * cols, v.begin() + (p0 + L) * cols));
  };
  auto poisoned = [](int64_t floats) {
    DeviceBuffer b(static_cast<size_t>(floats * 4));
    b.fill(0xFF);
    return b;
  };
  const DeviceBuffer x = rows(r.x, HP), dt = rows(r.dt, H), B = rows(r.B, GN), C = rows(r.C, GN), z = rows(r.z, HP),
                     dout = rows(r.dout, HP), A = DeviceBuffer::fromHost(r.A), D = DeviceBuffer::fromHost(r.D),
                     dtBias = DeviceBuffer::fromHost(r.dtBias), cub = DeviceBuffer::fromHost(cu);
  DeviceBuffer out = poisoned(L * HP), dx = poisoned(L * HP), ddt = poisoned(L * H), dA = poisoned(H),
               dB = poisoned(L * GN), dC = poisoned(L * GN), dD = poisoned(H), dz = poisoned(L * HP),
               ddtBias = poisoned(H), incoming = poisoned(H * P * N), decay = poisoned(H);
  SsdArgs a;
  a.x = onDevice(x, DType::F32, {1, L, H, P});
  a.dt = onDevice(dt, DType::F32, {1, L, H});
  a.A = onDevice(A, DType::F32, {H});
  a.B = onDevice(B, DType::F32, {1, L, G, N});
  a.C = onDevice(C, DType::F32, {1, L, G, N});
  a.D = onDevice(D, DType::F32, {H});
  a.z = onDevice(z, DType::F32, {1, L, H, P});
  a.dt_bias = onDevice(dtBias, DType::F32, {H});
  a.dt_softplus = true;
  a.chunk_size = 64;
  a.out = onDevice(out, DType::F32, {1, L, H, P});
  a.cu_seqlens = onDevice(cub, DType::I32, {int64_t(cu.size())});
  const SsdCpCarry carry{onDevice(incoming, DType::F32, {H, P, N}), onDevice(decay, DType::F32, {H})};
  const int64_t need = comm ? ssd_cp_workspace_size(a, part, *comm) : ssd_workspace_size(a);
  DeviceBuffer ws(static_cast<size_t>(need * 4));
  a.workspace = onDevice(ws, DType::F32, {need});
  if (comm)
    ssd_cp(a, part, carry, *comm, stream.get());
  else
    ssd(a, stream.get());

  SsdBackwardArgs b;
  b.forward = a;
  b.dout = onDevice(dout, DType::F32, {1, L, H, P});
  b.dx = onDevice(dx, DType::F32, {1, L, H, P});
  b.ddt = onDevice(ddt, DType::F32, {1, L, H});
  b.dA = onDevice(dA, DType::F32, {H});
  b.dB = onDevice(dB, DType::F32, {1, L, G, N});
  b.dC = onDevice(dC, DType::F32, {1, L, G, N});
  b.dD = onDevice(dD, DType::F32, {H});
  b.dz = onDevice(dz, DType::F32, {1, L, H, P});
  b.ddt_bias = onDevice(ddtBias, DType::F32, {H});
  const int64_t needB = comm ? ssd_cp_backward_workspace_size(b, part, *comm) : ssd_backward_workspace_size(b);
  DeviceBuffer wsB(static_cast<size_t>(needB * 4));
  b.workspace = onDevice(wsB, DType::F32, {needB});
  if (comm) {
    ssd_cp_backward(b, part, carry, *comm, stream.get());
    for (const TensorView& sum : {b.dA, b.dD, b.ddt_bias}) comm->allReduceSum(sum, stream.get());
    comm->synchronize(stream.get(), "the context-parallel SSD");
  } else {
    ssd_backward(b, stream.get());
    stream.synchronize();
  }
  checkDeviceErrors(stream.get());
  return {out.download<float>(), dx.download<float>(), ddt.download<float>(),
          dA.download<float>(),  dB.download<float>(), dC.download<float>(),
          dD.download<float>(),  dz.download<float>(), ddtBias.download<float>()};
}

// The SSD's context parallelism over comm's ranks (processes on GPUs, or threads on one), rank
// `rank`'s part of a row whose middle sequence crosses every boundary, against one GPU.
void cpSsdTrainingRank(int rank, Communicator& ranks) {
  Communicator* comm = &ranks;
  // Ranks compile different backward kernels (pass 1 or 2) while the others wait in a collective.
  const int64_t Tr = 96, T = Tr * comm->size(), p0 = rank * Tr, p1 = p0 + Tr;
  const std::vector<int64_t> cu = {0, 40, T - 20, T};
  const SsdRow r = randomSsdRow(T);
  const SsdStep ref = ssdStep(r, 0, T, std::vector<int32_t>(cu.begin(), cu.end()), nullptr, {});

  // This rank's pieces of the sequences and how they continue across its edges.
  std::vector<int32_t> cuLocal{0};
  ContextPart part;
  for (size_t i = 0; i + 1 < cu.size(); ++i) {
    const int64_t s = std::max(cu[i], p0), e = std::min(cu[i + 1], p1);
    if (s >= e) continue;
    if (cuLocal.size() == 1) part.from_previous = cu[i] < p0;
    part.to_next = cu[i + 1] > p1;
    cuLocal.push_back(static_cast<int32_t>(e - p0));
  }
  const SsdStep got = ssdStep(r, p0, Tr, cuLocal, comm, part);

  const int64_t HP = r.H * r.P, GN = r.G * r.N;
  const struct {
    const char* name;
    const std::vector<float>&g, &want;
    int64_t cols;
    bool perToken;
  } checks[] = {{"out", got.out, ref.out, HP, true},
                {"dx", got.dx, ref.dx, HP, true},
                {"ddt", got.ddt, ref.ddt, r.H, true},
                {"dB", got.dB, ref.dB, GN, true},
                {"dC", got.dC, ref.dC, GN, true},
                {"dz", got.dz, ref.dz, HP, true},
                {"dA", got.dA, ref.dA, r.H, false},
                {"dD", got.dD, ref.dD, r.H, false},
                {"ddt_bias", got.ddtBias, ref.ddtBias, r.H, false}};
  for (const auto& c : checks) {
    const double err = worstError(c.g, c.want, c.cols, c.perToken ? range(p0, Tr) : range(0, 1));
    std::fprintf(stderr, "[ measured ] CP SSD rank %d (from_previous %d, to_next %d) %s: worst %.2e (bound %.0e)\n",
                 rank, int(part.from_previous), int(part.to_next), c.name, err, kLayerBound);
    EXPECT_LE(err, kLayerBound) << c.name;
  }
}

TEST(ParallelWorker, DISABLED_ContextParallelSsdTraining) {
  testing::WorkerRank wr;
  if (!testing::workerRank(&wr)) GTEST_SKIP() << "runs inside ParallelMamba2.ContextParallelSsdTraining";
  cpSsdTrainingRank(wr.rank, *join(wr, {{"test", "cp-ssd"}}, 300));
}

TEST(ParallelMamba2, ContextParallelSsdTraining) { testing::expectRanksPass("ContextParallelSsdTraining", 540); }

// The same ranks as threads of this process on one GPU (RankThreads.h), 2 and 4 of them.
TEST(ParallelMamba2, ContextParallelSsdTrainingAsThreads) {
  SSMJIT_REQUIRE_GPU();
  for (int n : {2, 4}) testing::runRankThreads(n, cpSsdTrainingRank, 540);
}

}  // namespace
}  // namespace ssmjit
