// generate() (mamba2_model.h): one packed prefill, then decode steps for every sequence at once.
// A step (the model's decode and the sampling that feeds the next step) is one CUDA graph per
// power-of-two batch bucket, so a step costs one launch and one copy of the new tokens back.
// With drafts, a step is a verify of each sequence's last token and its drafts with the draws at
// every position (one graph for the bucket too), then the acceptance on the host.
#include <algorithm>
#include <chrono>
#include <functional>
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

SampleArgs sampling(const GenerateOptions& o) {
  SampleArgs a;
  a.temperature = o.temperature;
  a.top_k = o.top_k;
  a.top_p = o.top_p;
  a.seed = o.seed;
  return a;
}

void sample(const StepBuffers& buf, int64_t rows, const GenerateOptions& o, bool padRows, CUstream s) {
  SampleArgs a = sampling(o);
  a.logits = buf.logitsView(rows);
  a.token_ids = buf.tokensView(rows);
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
  const int64_t maxDrafts = model.options().max_draft_tokens;
  if (o.draft_tokens < 0 || o.draft_tokens > maxDrafts)
    throw Error(Error::Kind::InvalidArgument, "generate: draft_tokens is " + std::to_string(o.draft_tokens) +
                                                  ", expected 0 to the model's max_draft_tokens (" +
                                                  std::to_string(maxDrafts) + ")");
  if (o.draft_tokens > 0 && !o.draft)
    throw Error(Error::Kind::InvalidArgument, "generate: draft_tokens is " + std::to_string(o.draft_tokens) +
                                                  ", expected a draft function with it (draft is empty)");
}

// The sequences' tokens and which are still running. A sequence that emits eos or reaches
// max_new_tokens leaves the batch: its slot becomes a pad row, so later steps neither advance its
// state nor sample for it.
struct Sequences {
  const GenerateOptions& o;
  GenerateResult r;
  std::vector<int32_t> slots;  // per bucket row; -1: pad
  int64_t live, made = 0;
  Sequences(const GenerateOptions& opt, int64_t n, int64_t bucket)
      : o(opt), slots(static_cast<size_t>(bucket), -1), live(n) {
    r.tokens.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) slots[i] = static_cast<int32_t>(i);
  }
  bool running(int64_t i) const { return slots[i] >= 0; }
  // Appends a token to sequence i; false once the sequence is done.
  bool emit(int64_t i, int32_t token) {
    r.tokens[i].push_back(token);
    ++made;
    if (token != o.eos_token && static_cast<int64_t>(r.tokens[i].size()) < o.max_new_tokens) return true;
    slots[i] = -1;
    --live;
    return false;
  }
};

// Waits for a step's tokens: under tensor parallelism through the communicator's bounded wait, so
// that a lost rank ends generation with an error instead of a hang.
void waitStep(const Mamba2Model& model, OwnedStream& stream) {
  if (Communicator* tp = model.options().tensor_parallel)
    tp->synchronize(stream.get(), "a generation step");
  else
    stream.synchronize();
}

// Runs `step` once per decode step until every sequence is done: eagerly first (it compiles and
// loads what the step needs, which a capture must not do), then as one graph captured once. Under
// tensor parallelism the graph holds NCCL's all-reduces too.
void decodeLoop(Sequences& q, CUstream stream, const std::function<void(CUstream)>& step,
                const std::function<void()>& before, const std::function<void()>& after) {
  const bool graphs = q.o.cuda_graphs;
  CudaGraph graph;
  const Clock::time_point t1 = Clock::now();
  while (q.live > 0) {
    before();
    if (graphs && q.r.decode_steps > 0 && !graph.valid()) graph = CudaGraph::capture(stream, step);
    if (graph.valid())
      graph.launch(stream);
    else
      step(stream);
    ++q.r.decode_steps;
    after();
    if (q.o.progress) q.o.progress(q.r.decode_steps, q.made);
  }
  q.r.decode_ms = msSince(t1);
}

// Plain decoding: one token per sequence and step.
void decodePlain(Mamba2Model& model, Sequences& q, StepBuffers& buf, int64_t bucket, OwnedStream& stream) {
  const auto n = static_cast<int64_t>(q.r.tokens.size());
  auto step = [&](CUstream s) {
    model.decode(buf.tokensView(bucket), buf.slotsView(bucket), buf.logitsView(bucket), s);
    sample(buf, bucket, q.o, true, s);
  };
  auto after = [&] {
    waitStep(model, stream);
    const std::vector<int32_t> tok = buf.tokens.download<int32_t>(n);
    const int64_t wasLive = q.live;
    for (int64_t i = 0; i < n; ++i)
      if (q.running(i)) q.emit(i, tok[i]);
    if (q.live != wasLive) buf.slots.upload(q.slots);
  };
  decodeLoop(q, stream.get(), step, [] {}, after);
}

// The verify step's device buffers for `rows` sequences of L tokens: the tokens (the last one
// kept, then the drafts), how many of the last verify's tokens were kept, the model's choice at
// every position, and the draws' keys (the sequence's slot; -1: pad) and counters (the index of
// the token drawn in its sequence: plain decoding's shared counter at that token).
struct VerifyBuffers {
  int64_t rows, L, vocab;
  DeviceBuffer tokens, accepted, logits, choices, keys, counters;
  VerifyBuffers(int64_t rows, int64_t L, int64_t vocab)
      : rows(rows), L(L), vocab(vocab), tokens(static_cast<size_t>(rows * L * 4)),
        accepted(static_cast<size_t>(rows * 4)), logits(static_cast<size_t>(rows * L * vocab * 4)),
        choices(static_cast<size_t>(rows * L * 4)), keys(static_cast<size_t>(rows * L * 4)),
        counters(static_cast<size_t>(rows * L * 8)) {}
  static TensorView view(const DeviceBuffer& b, DType t, std::initializer_list<int64_t> shape) {
    return TensorView::contiguous(b.data(), t, shape);
  }
};

// Speculative decoding: each step verifies every running sequence's last token and its drafts.
void decodeWithDrafts(Mamba2Model& model, const std::vector<std::vector<int32_t>>& prompts, Sequences& q,
                      StepBuffers& buf, int64_t bucket, OwnedStream& stream) {
  const GenerateOptions& o = q.o;
  const auto n = static_cast<int64_t>(prompts.size());
  const int64_t K = o.draft_tokens, L = K + 1, B = bucket;
  VerifyBuffers v(B, L, model.config().vocab);
  std::vector<int32_t> tokens(static_cast<size_t>(B * L), 0), accepted(static_cast<size_t>(B), 0),
      keys(static_cast<size_t>(B * L), -1);
  std::vector<int64_t> counters(static_cast<size_t>(B * L), 0);
  std::vector<std::vector<int32_t>> drafts(static_cast<size_t>(n));

  auto step = [&](CUstream s) {
    model.verify(v.view(v.tokens, DType::I32, {B, L}), buf.slotsView(B), v.view(v.accepted, DType::I32, {B}),
                 v.view(v.logits, DType::F32, {B * L, v.vocab}), s);
    SampleArgs a = sampling(o);
    a.logits = v.view(v.logits, DType::F32, {B * L, v.vocab});
    a.token_ids = v.view(v.choices, DType::I32, {B * L});
    a.step = v.view(v.counters, DType::I64, {B * L});
    a.row_state_indices = v.view(v.keys, DType::I32, {B * L});
    sample_tokens(a, s);
  };
  // The step's inputs, uploaded while the stream is idle (after the last step's synchronise).
  auto before = [&] {
    for (int64_t i = 0; i < n; ++i) {
      int32_t* row = &tokens[i * L];
      std::fill(row, row + L, 0);  // a pad row's tokens and a short draft's tail: any valid id
      if (!q.running(i)) {
        accepted[i] = 0;
        std::fill(&keys[i * L], &keys[i * L] + L, -1);
        continue;
      }
      const std::vector<int32_t>& made = q.r.tokens[i];
      std::vector<int32_t> context = prompts[i];
      context.insert(context.end(), made.begin(), made.end());
      drafts[i] = o.draft(i, context);
      if (static_cast<int64_t>(drafts[i].size()) > K) drafts[i].resize(K);
      for (size_t j = 0; j < drafts[i].size(); ++j)
        if (drafts[i][j] < 0 || drafts[i][j] >= v.vocab)
          throw Error(Error::Kind::InvalidArgument, "generate: draft(" + std::to_string(i) + ", ...)[" +
                                                        std::to_string(j) + "] is " + std::to_string(drafts[i][j]) +
                                                        ", expected a token id in [0, " + std::to_string(v.vocab) + ")");
      row[0] = made.back();
      std::copy(drafts[i].begin(), drafts[i].end(), row + 1);
      for (int64_t j = 0; j < L; ++j) {
        keys[i * L + j] = q.slots[i];
        counters[i * L + j] = static_cast<int64_t>(made.size()) + j;
      }
      q.r.drafted += static_cast<int64_t>(drafts[i].size());
    }
    v.tokens.upload(tokens);
    v.accepted.upload(accepted);
    v.keys.upload(keys);
    v.counters.upload(counters);
  };
  auto after = [&] {
    waitStep(model, stream);
    const std::vector<int32_t> choices = v.choices.download<int32_t>(static_cast<size_t>(n * L));
    const int64_t wasLive = q.live;
    for (int64_t i = 0; i < n; ++i) {
      if (!q.running(i)) continue;
      const std::vector<int32_t> own(choices.begin() + i * L, choices.begin() + (i + 1) * L);
      const std::vector<int32_t> keep = accepted_tokens(drafts[i], own);
      q.r.accepted += static_cast<int64_t>(keep.size()) - 1;
      accepted[i] = static_cast<int32_t>(keep.size());
      for (int32_t t : keep)
        if (!q.emit(i, t)) break;
    }
    if (q.live != wasLive) buf.slots.upload(q.slots);
  };
  decodeLoop(q, stream.get(), step, before, after);
}

}  // namespace

GenerateResult generate(Mamba2Model& model, const std::vector<std::vector<int32_t>>& prompts,
                        const GenerateOptions& o) {
  checkOptions(model, prompts, o);
  const auto n = static_cast<int64_t>(prompts.size());
  const int64_t bucket = std::min<int64_t>(nextPow2(n), model.options().max_batch);
  OwnedStream stream;
  StepBuffers buf(bucket, model.config().vocab);
  Sequences q(o, n, bucket);
  buf.slots.upload(q.slots);
  buf.tokens.fill(0);  // pad rows embed token 0 (and are skipped by every state update)

  const Clock::time_point t0 = Clock::now();
  const std::vector<int32_t> prefillSlots(q.slots.begin(), q.slots.begin() + n);
  model.prefill(prompts, prefillSlots, buf.logitsView(n), stream.get());
  sample(buf, n, o, false, stream.get());
  waitStep(model, stream);
  const std::vector<int32_t> first = buf.tokens.download<int32_t>(n);
  for (int64_t i = 0; i < n; ++i) q.emit(i, first[i]);
  buf.slots.upload(q.slots);
  if (o.progress) o.progress(0, q.made);
  q.r.prefill_ms = msSince(t0);

  if (o.draft_tokens > 0)
    decodeWithDrafts(model, prompts, q, buf, bucket, stream);
  else
    decodePlain(model, q, buf, bucket, stream);
  return q.r;
}

}  // namespace ssmjit
