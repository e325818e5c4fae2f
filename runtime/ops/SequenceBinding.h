// The rows, packed sequences and state slots that the conv and scan kernels declare under the same
// names: D channels and L tokens a row, nseq sequences (packed into one row through cu_seqlens when
// `packed`), the slot indices of their initial and final states, and the device status record the
// kernels report bad cu_seqlens or slots to. Internal to the runtime.
#pragma once
#include <cstdint>

#include "kernels_dsl/Signature.h"
#include "runtime/ops/KernelCall.h"
#include "ssmjit/tensor.h"

namespace ssmjit::detail {

struct Sequences {
  int64_t D, L, nseq;
  bool packed;
  const TensorView& cu;
  const TensorView& initIdx;
  int64_t initSlots;
  const TensorView& finalIdx;
  int64_t finalSlots;
};

template <const dsl::Signature& S>
void bindSequences(KernelCall& c, const Sequences& q, void* err) {
  c.tensor(S.tensor("cu"), q.cu);
  c.tensor(S.tensor("init_idx"), q.initIdx);
  c.tensor(S.tensor("final_idx"), q.finalIdx);
  c.pointer(S.tensor("err"), err, DType::I64);
  c.size(S.size("D"), q.D);
  c.size(S.size("L"), q.L);
  c.size(S.size("nseq"), q.nseq);
  c.size(S.size("nslots_init"), q.initSlots);
  c.size(S.size("nslots_final"), q.finalSlots);
  c.flag(S.flag("has_cu"), q.packed);
  c.flag(S.flag("has_init_idx"), q.initIdx.defined());
  c.flag(S.flag("has_final_idx"), q.finalIdx.defined());
}

}  // namespace ssmjit::detail
