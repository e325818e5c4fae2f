// The Mamba-2 model's insides (runtime/model): its device buffers and the forward pass, shared by
// the model (Mamba2Model.cpp), its buffer layout (Mamba2Buffers.cpp) and its kernel list
// (Mamba2Kernels.cpp). Internal to the runtime.
#pragma once
#include <string>
#include <vector>

#include "runtime/DeviceBuffer.h"
#include "runtime/model/DeviceArena.h"
#include "runtime/model/Mamba2Sharding.h"
#include "runtime/model/Mamba2Weights.h"
#include "ssmjit/error.h"
#include "ssmjit/mamba2_model.h"

namespace ssmjit {

// What the forward pass does with each op call: launch it, or name its kernels (prewarm).
struct OpSink {
  virtual ~OpSink() = default;
  virtual void embedding(const EmbeddingArgs& a) = 0;
  virtual void rmsNorm(const RmsNormArgs& a) = 0;
  virtual void layer(const Mamba2Dims& d, const Mamba2LayerWeights& w, const Mamba2LayerState& s,
                     const Mamba2LayerArgs& a, Mamba2LayerMode mode) = 0;
  virtual void commit(const Mamba2Dims& d, const Mamba2LayerWeights& w, const Mamba2LayerState& s,
                      const TensorView& slotIds, const TensorView& numAccepted) = 0;
  virtual void linear(const LinearArgs& a) = 0;
};

struct Mamba2Model::Impl {
  Mamba2ModelConfig cfg;
  Mamba2ModelOptions opt;
  // The layers' dims and shard: the full layer on one GPU, H/t heads and G/t groups under tensor
  // parallelism (opt.tensor_parallel).
  model::Mamba2LayerShard shard;
  // The ranks a shard is planned for without a communicator (the kernels of a tensor-parallel
  // rank, listed for prewarm); with opt.tensor_parallel, its size.
  int listedRanks = 1;
  DeviceBuffer weightMem, stateMem, actMem, workMem;
  std::vector<Mamba2LayerWeights> layers;
  std::vector<TensorView> layerNorms;
  std::vector<Mamba2LayerState> states;
  TensorView embedding, normF, lmHead;
  // Activations, rows = max(max_prefill_tokens, max_batch).
  TensorView hidden, residual, normed, mixed;
  TensorView ids, cu, slots, last;  // prefill's int32 inputs
  TensorView gathered, gatheredResidual, gatheredNormed;
  TensorView workspace;

  // T rows of tokens through every layer; a verify's args carry num_accepted and L.
  void forwardLayers(int64_t T, Mamba2LayerMode mode, const TensorView& tokenIds, const Mamba2LayerArgs& layerArgs,
                     OpSink& ops) const;
  void logits(const TensorView& x, const TensorView& res, const TensorView& normedOut, const TensorView& out,
              OpSink& ops) const;
  // A prefill of T tokens in nseq sequences whose inputs are in ids, cu, slots and last.
  void prefillOps(int64_t T, int64_t nseq, const TensorView& logitsOut, OpSink& ops) const;
  void decodeOps(const TensorView& tokenIds, const TensorView& slotIds, const TensorView& logitsOut,
                 OpSink& ops) const;
  // B sequences of L tokens: tokenIds (B*L,), numAccepted (B,), logitsOut (B*L, vocab).
  void verifyOps(const TensorView& tokenIds, int64_t L, const TensorView& slotIds, const TensorView& numAccepted,
                 const TensorView& logitsOut, OpSink& ops) const;
  void commitOps(const TensorView& slotIds, const TensorView& numAccepted, OpSink& ops) const;
  int64_t cacheDepth() const { return opt.max_draft_tokens > 0 ? opt.max_draft_tokens + 1 : 0; }
};

namespace detail {

inline TensorView rows(const TensorView& t, int64_t n) { return t.narrow(0, 0, n); }

// Throws InvalidArgument "Mamba2Model: <msg>".
[[noreturn]] inline void modelArgError(const std::string& msg) {
  throw Error(Error::Kind::InvalidArgument, "Mamba2Model: " + msg);
}

// Throws naming the option for a batch or token count below 1 or an integer dtype.
void checkModelOptions(const Mamba2ModelOptions& o);

// A checkpoint tensor and the device view it fills (A from A_log: -exp), whole or the rows or
// columns `slice` selects (a tensor-parallel shard).
struct Upload {
  const TensorView* src;
  TensorView* dst;
  bool negExp;
  const model::TensorSlice* slice = nullptr;
};
// Plans m.shard (one rank's, or the whole layer) and places every weight in `arena`, in the model's dtype (A, D and dt_bias in fp32), and returns
// what fills each. The conv weight (convDim, 1, W) becomes (convDim, W): the same bytes.
std::vector<Upload> placeWeights(const model::Mamba2Weights& h, DType act, Mamba2Model::Impl& m, DeviceArena& arena);
// Copies each checkpoint tensor to its device view, converted to the view's dtype.
void uploadAll(const std::vector<Upload>& ups);
void placeStates(Mamba2Model::Impl& m, DeviceArena& a);
void placeActivations(Mamba2Model::Impl& m, DeviceArena& a);
// The layer workspace for the largest prefill and decode calls, and the lm_head GEMM's.
int64_t workspaceFloats(const Mamba2Model::Impl& m);

}  // namespace detail
}  // namespace ssmjit
