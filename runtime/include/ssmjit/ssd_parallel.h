// The Mamba-2 SSD (ops.h: ssd, ssd_backward) split over the ranks of a Communicator (parallel.h)
// by context parallelism, forward and backward, at op level: a training framework calls these
// beside its autograd, each rank holding its part's tensors. (The layer's context-parallel prefill
// in mamba2_parallel.h runs the same forward.) A header of its own: it needs ops.h and
// parallel.h, not the layer.
//
// One packed row (batch 1) is cut into c = comm.size() contiguous parts, rank r holding the r-th;
// `args` are that part's: its tokens and its own cu_seqlens (its pieces of the row's sequences,
// each from the part's start). A sequence may cross rank boundaries: ContextPart says whether the
// part's first sequence continues from rank r - 1 and its last continues into rank r + 1 (rank r's
// to_next must equal rank r + 1's from_previous; rank 0 has no from_previous, rank c - 1 no
// to_next). Every rank calls each function (they are collectives), in the same order, with the
// same H, P and N. c == 1 is allowed and equals the plain op.
//
// Forward (ssd_cp): the part's SSD runs from a zero start for a summary (the end state of its last
// sequence when it continues, and the part's decay a = exp(sum of dt' A) per head when the part is
// one sequence continuing on both sides, else 0); the ranks all-gather (a, end state); each
// computes its incoming state S_in(r) = a(r-1) S_in(r-1) + end(r-1) by a scan in fp32 on the
// device, and the SSD resumes from it (the chunks' states computed once). The state entering the
// part and a go to `carry` for the backward.
//
// Backward (ssd_cp_backward): state adjoints pass the other way. G(r) = dL/d(end state of rank
// r's last sequence) = dL/d S_in(r+1) = a(r+1) G(r+1) + dS_in_local(r+1), with dS_in_local the
// gradient of rank r+1's incoming state when its own crossing-out sequence gets no final-state
// gradient: a reverse exclusive scan over ranks of the forward's form. A summary first, on parts
// continuing from the previous rank: dS_in_local alone (the forward's chunk states recomputed and
// the states' gradients passed back along the chunks with dfinal = 0, no token gradients); the
// ranks all-gather (a, dS_in_local) and scan them in reverse rank order for G(r); then the part's
// ssd_backward from the incoming state, with dfinal = G(r) for the crossing-out sequence. So the
// ranks wait on each other only for the summaries, and no part runs the token kernels twice.
//
// Gradients: dx, ddt, dB, dC, dz and dinitial_states are this part's, exactly. dA, dD and
// ddt_bias are sums over tokens: each rank gets its part's sum, and the caller sums them over the
// ranks (an all-reduce, as for every weight replicated over the context-parallel ranks).
//
// What the parts' args may hold: batch 1; no block states (block_state_tokens 0) and no
// sequence_decay. With from_previous, no initial_states (the first sequence starts from the
// incoming state, the others from zero; no dinitial_states either); without it, initial_states
// and dinitial_states are the caller's, as in ssd. Final states are the caller's as in ssd (with
// to_next, the last sequence's slot, normally -1, gets its state at the part's end); with to_next
// the backward takes no dfinal_states (the crossing-out sequence's gradient is G(r), the others'
// zero). fp32 results equal one GPU's up to the order of the sums (the state entering a part is
// combined across ranks rather than across chunks).
//
// Workspace: float32 in args.workspace, at least ssd_cp_workspace_size / ssd_cp_backward_workspace_size
// elements. The collectives go on `stream`; wait with comm.synchronize() for a bounded wait.
#pragma once
#include <cstdint>

#include "ssmjit/ops.h"
#include "ssmjit/parallel.h"

namespace ssmjit {

// What the forward keeps for the backward, fp32, contiguous, on x's device.
struct SsdCpCarry {
  TensorView incoming;  // (H, P, N): the state entering the part's first sequence (0 without from_previous)
  TensorView decay;     // (H,): a, the part's decay passed on (0 unless one sequence continuing both ways)
};

int64_t ssd_cp_workspace_size(const SsdArgs& args, const ContextPart& part, const Communicator& comm);
// args.out is required. Writes out, the caller's final states and `carry`.
void ssd_cp(const SsdArgs& args, const ContextPart& part, const SsdCpCarry& carry, Communicator& comm,
            Stream stream = nullptr);

int64_t ssd_cp_backward_workspace_size(const SsdBackwardArgs& args, const ContextPart& part, const Communicator& comm);
// args.forward as given to ssd_cp; carry as ssd_cp wrote it.
void ssd_cp_backward(const SsdBackwardArgs& args, const ContextPart& part, const SsdCpCarry& carry, Communicator& comm,
                     Stream stream = nullptr);

}  // namespace ssmjit
