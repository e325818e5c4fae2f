// The scan arguments that the context-parallel scan's incoming-share kernels (the correction and
// the incoming state's gradient, kernels_dsl/parallel/IncomingShare.h) both take, bound once:
// delta and its bias, A, C, z, cu_seqlens, the chunks' sums of dt', the sizes and the flags.
// Internal to the runtime.
#pragma once
#include "kernels_dsl/Signature.h"
#include "runtime/ops/KernelCall.h"
#include "ssmjit/ops.h"

namespace ssmjit::detail {

// Binds them to `c`, a call of kernel `S`; `sums` is the (chunks, D) sums of dt' (ScanCpDtSums.h).
void bindIncomingShare(KernelCall& c, const dsl::Signature& S, const SelectiveScanArgs& a, const TensorView& sums);

}  // namespace ssmjit::detail
