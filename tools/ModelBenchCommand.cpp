// `ssmjit bench-model`: a Mamba-2 checkpoint's prefill and decode speed on the GPU
// (ssmjit/mamba2_model.h): packed prefill of B prompts of L tokens, and decode steps at several
// batch sizes, each step as a CUDA graph and as eager launches.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/CudaGraph.h"
#include "runtime/DeviceBuffer.h"
#include "ssmjit/mamba2_model.h"
#include "tools/GpuTiming.h"
#include "tools/ToolSupport.h"

namespace ssmjit::tool {
namespace {

struct ModelBenchOptions {
  std::string model;
  std::string dtype = "bf16", stateDtype = "fp32";
  std::string prefill = "1x2048,8x2048";
  std::vector<int64_t> batches{1, 16, 64};
  int iters = 20, trials = 5;
  uint64_t seed = 1;
};

struct Shape {
  int64_t batch, len;
};

std::vector<Shape> parseShapes(const std::string& text) {
  std::vector<Shape> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.empty()) continue;
    Shape s{};
    char x = 0;
    std::stringstream one(item);
    if (!(one >> s.batch >> x >> s.len) || x != 'x' || s.batch < 1 || s.len < 1 || !one.eof())
      throw UsageError("--prefill: '" + item + "' is not BxL with B, L >= 1");
    out.push_back(s);
  }
  return out;
}

int run(const ModelBenchOptions& o) {
  const std::vector<Shape> shapes = parseShapes(o.prefill);
  Mamba2ModelOptions mo;
  mo.dtype = parseFloatDType(o.dtype, "--dtype");
  mo.state_dtype = parseFloatDType(o.stateDtype, "--state-dtype");
  mo.max_batch = *std::max_element(o.batches.begin(), o.batches.end());
  mo.max_prefill_tokens = 1;
  for (const Shape& s : shapes) {
    mo.max_batch = std::max(mo.max_batch, s.batch);
    mo.max_prefill_tokens = std::max(mo.max_prefill_tokens, s.batch * s.len);
  }
  auto model = Mamba2Model::load(o.model, mo);
  const Mamba2ModelConfig& c = model->config();
  const int64_t V = c.vocab;
  std::printf("bench-model %s: %lld layers, hidden %lld, %lld heads x %lld, state %lld, vocab %lld; %s, state %s\n",
              o.model.c_str(), static_cast<long long>(c.layers), static_cast<long long>(c.dims.hidden),
              static_cast<long long>(c.dims.heads), static_cast<long long>(c.dims.head_dim),
              static_cast<long long>(c.dims.state), static_cast<long long>(V), o.dtype.c_str(), o.stateDtype.c_str());
  OwnedStream stream;
  DeviceBuffer logits(static_cast<size_t>(mo.max_batch * V * 4));
  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(V - 1));
  Table table({"case", "ms", "tokens/s"});

  for (const Shape& s : shapes) {
    std::vector<std::vector<int32_t>> prompts(s.batch, std::vector<int32_t>(s.len));
    for (auto& p : prompts)
      for (int32_t& t : p) t = token(rng);
    std::vector<int32_t> slots(s.batch);
    for (int64_t i = 0; i < s.batch; ++i) slots[i] = static_cast<int32_t>(i);
    const TensorView lv = TensorView::contiguous(logits.data(), DType::F32, {s.batch, V});
    const double us = callTimeUs([&](CUstream st) { model->prefill(prompts, slots, lv, st); }, stream, 1, o.trials);
    table.add({strf("prefill %lldx%lld", static_cast<long long>(s.batch), static_cast<long long>(s.len)),
               strf("%.3f", us / 1e3), strf("%.0f", s.batch * s.len / (us / 1e6))});
  }
  for (int64_t b : o.batches) {
    std::vector<int32_t> ids(b), slots(b);
    for (int64_t i = 0; i < b; ++i) {
      ids[i] = token(rng);
      slots[i] = static_cast<int32_t>(i);
    }
    DeviceBuffer idBuf = DeviceBuffer::fromHost(ids), slotBuf = DeviceBuffer::fromHost(slots);
    const TensorView iv = TensorView::contiguous(idBuf.data(), DType::I32, {b});
    const TensorView sv = TensorView::contiguous(slotBuf.data(), DType::I32, {b});
    const TensorView lv = TensorView::contiguous(logits.data(), DType::F32, {b, V});
    auto step = [&](CUstream st) { model->decode(iv, sv, lv, st); };
    const double eager = callTimeUs(step, stream, o.iters, o.trials);
    const CudaGraph graph = CudaGraph::capture(stream, step);
    const double graphed = callTimeUs([&](CUstream st) { graph.launch(st); }, stream, o.iters, o.trials);
    for (auto [label, us] : {std::pair{"graph", graphed}, std::pair{"eager", eager}})
      table.add({strf("decode batch %lld (%s)", static_cast<long long>(b), label), strf("%.3f", us / 1e3),
                 strf("%.0f", b / (us / 1e6))});
  }
  table.printText();
  std::printf("\n");
  table.printMarkdown();
  return kExitOk;
}

}  // namespace

CommandRun defineModelBenchCommand(CLI::App* app) {
  auto o = std::make_shared<ModelBenchOptions>();
  addModelOptions(app, o->model, o->dtype, o->stateDtype);
  app->add_option("--prefill", o->prefill, "Prefill shapes BxL (B prompts of L tokens as one packed row), comma-separated; '' for none")
      ->capture_default_str();
  app->add_option("--decode-batch", o->batches, "Decode batch sizes")->check(atLeast(1))->capture_default_str();
  addTrialOptions(app, o->iters, o->trials, o->seed, "Decode steps per trial");
  return [o] { return run(*o); };
}

}  // namespace ssmjit::tool
