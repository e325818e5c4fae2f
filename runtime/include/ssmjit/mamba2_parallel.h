// The Mamba-2 mixer layer (mamba2.h) split over the ranks of a Communicator (parallel.h).
//
// Tensor parallel (t = comm.size()): each rank holds the shard of H/t heads and G/t groups (G and
// H divisible by t: a B/C group and its gated-norm group stay on one rank): its rows of in_proj
// [z | x | B | C | dt], its conv channels [x | B | C], its heads' dt_bias, A and D, its channels'
// norm weight and its columns of out_proj, with out_proj's bias on rank 0 only. Each rank runs the
// layer of H/t heads on every token and the ranks' outputs are summed by an all-reduce; a prefill's
// out_proj runs in row pieces, each piece's all-reduce overlapping the next piece's GEMM
// (SSMJIT_TP_OVERLAP_PIECES: default 4 from 4096 rows on, else 1).
// `Mamba2Model` with `options.tensor_parallel` loads exactly that shard from a checkpoint.
//
// Sequence parallel (sequence_parallel = true): the residual stream stays split by tokens. hidden
// and out are this rank's T/t rows (rank r: rows [r T/t, (r + 1) T/t) of the call); the rows are
// all-gathered before in_proj and the outputs reduce-scattered after out_proj, so each rank ends
// with its own rows of the sum. cu_seqlens and state_indices describe all T rows, as in
// mamba2.h.
//
// The states are the shard's: conv_state (S, convDim of the shard, W - 1), ssm_state (S, H/t, P,
// N). The workspace is sized by mamba2_tp_layer_workspace_size. The collectives go on `stream`;
// wait with comm.synchronize() for a bounded wait.
//
// Context parallel prefill by state passing (c = comm.size()): one packed row of T tokens is cut
// into c parts, rank r holding tokens [r T/c, (r + 1) T/c) (T % c == 0, T/c >= W - 1); sequences
// may cross rank boundaries. Every rank holds the whole layer's weights. The conv takes a halo of
// the W - 1 tokens before the part from the previous rank; the SSD runs from a zero start without
// out (states only, with each sequence's total decay), the ranks all-gather (decay, end state) of
// the sequence crossing into the next rank, each computes its incoming state by an exclusive scan
// in fp32 on the device, and the SSD resumes from it (the chunks' own states, computed once, kept
// in the workspace between the two). Every sequence starts from zero states;
// its final states go to slot slots[i] of `s` on the rank where it ends (-1: not kept). In fp32
// the result equals one GPU's up to the order of the sums (the incoming state is combined across
// ranks rather than across chunks). The SSD's part is ssd_cp (ssd_parallel.h), which has a
// context-parallel backward (ssd_cp_backward), which the layer's (mamba2_cp_layer_backward) runs.
#pragma once
#include <vector>

#include "ssmjit/mamba2.h"
#include "ssmjit/parallel.h"

namespace ssmjit {

// The dims of one rank's shard; throws naming G, H and t when they do not split.
Mamba2Dims mamba2_tp_shard_dims(const Mamba2Dims& full, int ranks);

int64_t mamba2_tp_layer_workspace_size(const Mamba2Dims& full, const Mamba2LayerWeights& shard,
                                       const Mamba2LayerState& s, const Mamba2LayerArgs& args, bool prefill,
                                       const Communicator& comm, bool sequence_parallel);
void mamba2_tp_layer_prefill(const Mamba2Dims& full, const Mamba2LayerWeights& shard, const Mamba2LayerState& s,
                             const Mamba2LayerArgs& args, Communicator& comm, bool sequence_parallel,
                             Stream stream = nullptr);
void mamba2_tp_layer_decode(const Mamba2Dims& full, const Mamba2LayerWeights& shard, const Mamba2LayerState& s,
                            const Mamba2LayerArgs& args, Communicator& comm, bool sequence_parallel,
                            Stream stream = nullptr);

// The tensor-parallel layer's backward (mamba2_layer_backward on the shard, mamba2.h): `a.forward`
// is the mamba2_tp_layer_prefill call (the same sequence_parallel), its workspace as that call left
// it; the gradients are the shard's (out_proj_bias's on rank 0 only, as the weight). dout is the
// whole of out's gradient (T, hidden) on every rank, or under sequence parallelism this rank's rows
// (T/t, hidden), all-gathered first. The ranks' partial input gradients are summed by an
// all-reduce into grads.dhidden (T, hidden), or reduce-scattered into this rank's rows of it.
int64_t mamba2_tp_layer_backward_workspace_size(const Mamba2Dims& full, const Mamba2LayerWeights& shard,
                                                const Mamba2LayerState& s, const Mamba2LayerBackwardArgs& args,
                                                const Communicator& comm, bool sequence_parallel);
void mamba2_tp_layer_backward(const Mamba2Dims& full, const Mamba2LayerWeights& shard, const Mamba2LayerState& s,
                              const Mamba2LayerBackwardArgs& args, Communicator& comm, bool sequence_parallel,
                              Stream stream = nullptr);

struct Mamba2CpPrefillArgs {
  TensorView hidden;                // (T/c, hidden): this rank's tokens
  TensorView out;                   // (T/c, hidden)
  std::vector<int64_t> cu_seqlens;  // the whole row's (nseq + 1), the same on every rank
  std::vector<int32_t> slots;       // (nseq): each sequence's state slot, -1: not kept
  TensorView workspace;             // float32, mamba2_cp_layer_prefill_workspace_size() elements
};
int64_t mamba2_cp_layer_prefill_workspace_size(const Mamba2Dims& dims, const Mamba2LayerWeights& w,
                                               const Mamba2LayerState& s, const Mamba2CpPrefillArgs& args,
                                               const Communicator& comm);
void mamba2_cp_layer_prefill(const Mamba2Dims& dims, const Mamba2LayerWeights& w, const Mamba2LayerState& s,
                             const Mamba2CpPrefillArgs& args, Communicator& comm, Stream stream = nullptr);

// The context-parallel layer's backward (mamba2_layer_backward's, mamba2.h, over the parts):
// `forward` is the mamba2_cp_layer_prefill call, its workspace as that call left it; dout and
// grads.dhidden this rank's rows (T/c, hidden). The SSD's state gradients pass backward over the
// ranks (ssd_cp_backward), and the gradient of the conv's halo goes back to the previous rank,
// where it joins the gradient of its last W - 1 rows of in_proj's output. The weights' gradients
// are this part's sums: the caller sums them over the ranks (an all-reduce, as for any weight
// replicated over context-parallel ranks). No state gradients (every sequence starts from zero,
// and final states get none); grads.initial_states must be empty.
struct Mamba2CpBackwardArgs {
  Mamba2CpPrefillArgs forward;
  TensorView dout;             // (T/c, hidden)
  Mamba2LayerGradients grads;  // dhidden (T/c, hidden); the weights' as mamba2_layer_backward
  TensorView workspace;        // float32, mamba2_cp_layer_backward_workspace_size() elements
};
int64_t mamba2_cp_layer_backward_workspace_size(const Mamba2Dims& dims, const Mamba2LayerWeights& w,
                                                const Mamba2LayerState& s, const Mamba2CpBackwardArgs& args,
                                                const Communicator& comm);
void mamba2_cp_layer_backward(const Mamba2Dims& dims, const Mamba2LayerWeights& w, const Mamba2LayerState& s,
                              const Mamba2CpBackwardArgs& args, Communicator& comm, Stream stream = nullptr);

}  // namespace ssmjit
