// The Mamba-1 selective scan (ops.h: selective_scan, selective_scan_backward) split over the
// ranks of a Communicator (parallel.h) by context parallelism, forward and backward, at op level:
// a training framework calls these beside its autograd, each rank holding its part's tensors.
//
// One packed row (batch 1) is cut into c = comm.size() contiguous parts, rank r holding the r-th
// (ContextPart, parallel.h); `args` are that part's: its tokens and its own cu_seqlens (its
// pieces of the row's sequences, each from the part's start). Every rank calls each function
// (they are collectives), in the same order, with the same D and N. c == 1 is allowed and equals
// the plain op.
//
// Forward (selective_scan_cp): every part scans itself from a zero start for its first sequence
// when that continues from the previous rank (the caller's initial states otherwise), all at
// once; a part whose last sequence continues into the next rank keeps that sequence's end state
// b, and, when the part is one sequence continuing both ways, the part's decay a[d, n] =
// exp(A[d, n] sum of dt'[d]) (else a = 0). The ranks all-gather (a, b) and each computes its
// incoming state S_in(r) = a(r-1) S_in(r-1) + b(r-1) in fp32 on the device. The scan is linear in
// its state, so a part continuing from the previous rank then adds S_in's share to its first
// sequence's outputs, sum_n C exp(A cumsum dt') S_in (times silu(z)), in one pass that reads
// delta, C, z and out (out is rounded to its dtype twice, as is that final state), up to where
// that share has decayed to 0 in fp32 (with softplus and every A <= 0), and exp(A sum dt') S_in
// to that sequence's final state where the caller asks for it. A part continuing both ways whose caller asks for final
// states scans again from S_in instead. The state entering the part and a go to `carry` for the
// backward.
//
// Backward (selective_scan_cp_backward): state adjoints pass the other way. G(r) = dL/d(end state
// of rank r's last sequence) = a(r+1) G(r+1) + dS_in_local(r+1), with dS_in_local the gradient of
// rank r+1's incoming state when its own crossing-out sequence gets no final-state gradient. The
// state reaches the first sequence's outputs and end state through exp(A cumsum dt') alone, so a
// part continuing from the previous rank computes dS_in_local in one pass of its own, the
// transpose of the forward's correction: sum over the first sequence's tokens of
// silu(z) dout C exp(A cumsum dt'), plus that sequence's final-state gradient times its decay
// (stopping, as the correction does, where those weights have decayed to 0). The ranks
// all-gather (a, dS_in_local) and scan them in reverse rank order for G(r); then every part runs
// selective_scan_backward at once, from its incoming state, with G(r) as the crossing-out
// sequence's final-state gradient.
//
// Gradients: du, ddelta, time-varying dB and dC, dz and dinitial_states are this part's, exactly.
// dA, dD, ddelta_bias and constant dB/dC are sums over tokens: each rank gets its part's sum, and
// the caller sums them over the ranks (an all-reduce, as for every weight replicated over the
// context-parallel ranks).
//
// What the parts' args may hold: batch 1. With from_previous, no initial_states (the first
// sequence starts from the incoming state, the others from zero; no dinitial_states either);
// without it, initial_states and dinitial_states are the caller's, as in selective_scan. Final
// states are the caller's (with to_next, the last sequence's slot, normally -1, gets its state at
// the part's end; a part with to_next and final states scans once more to write them); with
// to_next the backward takes no dfinal_states (the crossing-out sequence's gradient is G(r), the
// others' zero). fp32 results equal one GPU's up to rounding: a part's state is combined across
// ranks (its decay as exp(A sum dt') rather than a product over tokens) rather than scanned on.
//
// Workspace: float32 in args.workspace, at least selective_scan_cp_workspace_size /
// selective_scan_cp_backward_workspace_size elements. The collectives go on `stream`; wait with
// comm.synchronize() for a bounded wait.
#pragma once
#include <cstdint>

#include "ssmjit/ops.h"
#include "ssmjit/parallel.h"

namespace ssmjit {

// What the forward keeps for the backward, fp32, contiguous, on u's device.
struct ScanCpCarry {
  TensorView incoming;  // (D, N): the state entering the part's first sequence (0 without from_previous)
  TensorView decay;     // (D, N): a, the part's decay passed on (0 unless one sequence continuing both ways)
};

int64_t selective_scan_cp_workspace_size(const SelectiveScanArgs& args, const ContextPart& part,
                                         const Communicator& comm);
// Writes out, the caller's final states and `carry`.
void selective_scan_cp(const SelectiveScanArgs& args, const ContextPart& part, const ScanCpCarry& carry,
                       Communicator& comm, Stream stream = nullptr);

int64_t selective_scan_cp_backward_workspace_size(const SelectiveScanBackwardArgs& args, const ContextPart& part,
                                                  const Communicator& comm);
// args.forward as given to selective_scan_cp; carry as selective_scan_cp wrote it.
void selective_scan_cp_backward(const SelectiveScanBackwardArgs& args, const ContextPart& part,
                                const ScanCpCarry& carry, Communicator& comm, Stream stream = nullptr);

}  // namespace ssmjit
