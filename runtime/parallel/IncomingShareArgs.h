// The scan arguments that the context-parallel scan's incoming-share kernels take, bound once:
// the walk over the first sequence's dt' that all three share (kernels_dsl/parallel/
// IncomingShare.h: delta and its bias, cu_seqlens, the chunks' sums of dt' and the sizes and flags
// of that walk), and on top of it what the correction and the incoming state's gradient both read
// (A, C, z). Internal to the runtime.
#pragma once
#include "kernels_dsl/Signature.h"
#include "runtime/ops/KernelCall.h"
#include "ssmjit/ops.h"

namespace ssmjit::detail {

// Binds the dt' walk's arguments to `c`, a call of kernel `S`; `sums` is the (chunks, D) sums of
// dt' (ScanCpDtSums.h).
void bindDtWalk(KernelCall& c, const dsl::Signature& S, const SelectiveScanArgs& a, const TensorView& sums);
// bindDtWalk, then A, C (with its group) and z.
void bindIncomingShare(KernelCall& c, const dsl::Signature& S, const SelectiveScanArgs& a, const TensorView& sums);

}  // namespace ssmjit::detail
