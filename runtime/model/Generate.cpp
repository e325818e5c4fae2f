// generate() (mamba2_model.h): one packed prefill, then decode steps for every sequence at once.
// A step (the model's decode and the sampling that feeds the next step) is one CUDA graph per
// power-of-two batch bucket, so a step costs one launch and one copy of the new tokens back.
#include <algorithm>
#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "compiler/IntMath.h"
#include "runtime/CudaGraph.h"
#include "runtime/DeviceBuffer.h"
#include "runtime/Driver.h"
#include "ssmjit/mamba2_model.h"

namespace ssmjit {
namespace {

using Clock = std::chrono::steady_clock;

double msSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// The device buffers of a generation: a bucket's rows of logits, tokens and slots, and the
// sampler's step counter.
struct StepBuffers {
  DeviceBuffer logits, tokens, slots, step;
  int64_t vocab = 0;
  int device = driver::currentDeviceId();  // the model's: its views must say so
  StepBuffers(int64_t rows, int64_t vocab)
      : logits(static_cast<size_t>(rows * vocab * 4)), tokens(static_cast<size_t>(rows * 4)),
        slots(static_cast<size_t>(rows * 4)), step(8), vocab(vocab) {
    step.fill(0);
  }
  TensorView on(const DeviceBuffer& b, DType t, std::initializer_list<int64_t> shape) const {
    return TensorView::contiguous(b.data(), t, shape, DeviceKind::CUDA, device);
  }
  TensorView logitsView(int64_t b) const { return on(logits, DType::F32, {b, vocab}); }
  TensorView tokensView(int64_t b) const { return on(tokens, DType::I32, {b}); }
  TensorView slotsView(int64_t b) const { return on(slots, DType::I32, {b}); }
};

void sample(const StepBuffers& buf, int64_t rows, const GenerateOptions& o, bool padRows, CUstream s) {
  SampleArgs a;
  a.logits = buf.logitsView(rows);
  a.token_ids = buf.tokensView(rows);
  a.temperature = o.temperature;
  a.top_k = o.top_k;
  a.top_p = o.top_p;
  a.seed = o.seed;
  a.step = buf.on(buf.step, DType::I64, {1});
  if (padRows) a.row_state_indices = buf.slotsView(rows);
  sample_tokens(a, s);
}

void checkOptions(const Mamba2Model& model, const std::vector<std::vector<int32_t>>& prompts,
                  const GenerateOptions& o) {
  const int64_t maxBatch = model.options().max_batch;
  if (prompts.empty() || static_cast<int64_t>(prompts.size()) > maxBatch)
    throw Error(Error::Kind::InvalidArgument, "generate: got " + std::to_string(prompts.size()) +
                                                  " prompts, expected 1 to the model's max_batch (" +
                                                  std::to_string(maxBatch) + ")");
  if (o.max_new_tokens < 1)
    throw Error(Error::Kind::InvalidArgument,
                "generate: max_new_tokens is " + std::to_string(o.max_new_tokens) + ", expected >= 1");
  if (!(o.top_p > 0.0f && o.top_p <= 1.0f))
    throw Error(Error::Kind::InvalidArgument,
                "generate: top_p is " + std::to_string(o.top_p) + ", expected a value in (0, 1]");
}

}  // namespace

GenerateResult generate(Mamba2Model& model, const std::vector<std::vector<int32_t>>& prompts,
                        const GenerateOptions& o) {
  checkOptions(model, prompts, o);
  const auto n = static_cast<int64_t>(prompts.size());
  const int64_t bucket = std::min<int64_t>(nextPow2(n), model.options().max_batch);
  OwnedStream stream;
  StepBuffers buf(bucket, model.config().vocab);
  std::vector<int32_t> slots(static_cast<size_t>(bucket), -1);
  for (int64_t i = 0; i < n; ++i) slots[i] = static_cast<int32_t>(i);
  buf.slots.upload(slots);
  buf.tokens.fill(0);  // pad rows embed token 0 (and are skipped by every state update)

  GenerateResult r;
  r.tokens.resize(n);
  std::vector<bool> done(n, false);
  int64_t live = n;
  // Appends the step's tokens; a sequence that emits eos leaves the batch (its slot becomes a pad
  // row, so later steps neither advance its state nor sample for it).
  int64_t made = 0;
  Communicator* tp = model.options().tensor_parallel;
  auto collect = [&]() {
    if (tp)
      tp->synchronize(stream.get(), "a generation step");  // bounded: a lost rank ends it with an error
    else
      stream.synchronize();
    const std::vector<int32_t> tok = buf.tokens.download<int32_t>(n);
    bool slotsChanged = false;
    for (int64_t i = 0; i < n; ++i) {
      if (done[i]) continue;
      r.tokens[i].push_back(tok[i]);
      ++made;
      if (tok[i] == o.eos_token || static_cast<int64_t>(r.tokens[i].size()) >= o.max_new_tokens) {
        done[i] = true;
        --live;
        slots[i] = -1;
        slotsChanged = true;
      }
    }
    if (slotsChanged) buf.slots.upload(slots);
    if (o.progress) o.progress(r.decode_steps, made);
  };

  const Clock::time_point t0 = Clock::now();
  std::vector<int32_t> prefillSlots(slots.begin(), slots.begin() + n);
  model.prefill(prompts, prefillSlots, buf.logitsView(n), stream.get());
  sample(buf, n, o, false, stream.get());
  collect();
  r.prefill_ms = msSince(t0);

  auto step = [&](CUstream s) {
    model.decode(buf.tokensView(bucket), buf.slotsView(bucket), buf.logitsView(bucket), s);
    sample(buf, bucket, o, true, s);
  };
  // The first step runs eagerly: it compiles and loads what the step needs, which a capture must
  // not do. The graph is captured once then and replayed for every later step. Under tensor
  // parallelism every step runs eagerly: NCCL's non-blocking calls are not captured.
  const bool graphs = o.cuda_graphs && !tp;
  CudaGraph graph;
  const Clock::time_point t1 = Clock::now();
  while (live > 0) {
    if (graphs && r.decode_steps > 0 && !graph.valid()) graph = CudaGraph::capture(stream.get(), step);
    if (graph.valid())
      graph.launch(stream.get());
    else
      step(stream.get());
    ++r.decode_steps;
    collect();
  }
  r.decode_ms = msSince(t1);
  return r;
}

}  // namespace ssmjit
