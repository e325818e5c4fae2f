#include "runtime/parallel/IncomingShareArgs.h"

#include "runtime/parallel/ScanCpDtSums.h"

namespace ssmjit::detail {

void bindDtWalk(KernelCall& c, const dsl::Signature& S, const SelectiveScanArgs& a, const TensorView& sums) {
  const int64_t L = a.delta.shape[2];
  c.tensor(S.tensor("delta"), a.delta, Axes{1, 2});
  c.tensor(S.tensor("dbias"), a.delta_bias);
  c.tensor(S.tensor("cu"), a.cu_seqlens);
  c.tensor(S.tensor("sums"), sums);
  c.size(S.size("D"), a.A.shape[0]);
  c.size(S.size("L"), L);
  c.size(S.size("chunk"), scanCpChunk(L));
  c.flag(S.flag("has_dbias"), a.delta_bias.defined());
  c.flag(S.flag("softplus"), a.delta_softplus);
  c.flag(S.flag("has_cu"), a.cu_seqlens.defined());
}

void bindIncomingShare(KernelCall& c, const dsl::Signature& S, const SelectiveScanArgs& a, const TensorView& sums) {
  bindDtWalk(c, S, a, sums);
  const int64_t D = a.A.shape[0];
  // C as (g, n, t, d): time-varying (Bt, G, N, L) or constant (D, N).
  const bool varying = a.C.ndim == 4;
  c.tensor(S.tensor("A"), a.A);
  c.tensor(S.tensor("C"), a.C, varying ? Axes{1, 2, 3, kNoAxis} : Axes{kNoAxis, 1, kNoAxis, 0});
  c.tensor(S.tensor("z"), a.z, Axes{1, 2});
  c.size(S.size("N"), a.A.shape[1]);
  c.size(S.size("group"), varying ? D / a.C.shape[1] : D);
  c.flag(S.flag("has_z"), a.z.defined());
}

}  // namespace ssmjit::detail
