// The Mamba-1 scan's decay over a part (ScanCpDecay.h): bound to its kernel and launched.
#include "runtime/parallel/ScanCpDecay.h"

#include <cuda.h>

#include "kernels_dsl/parallel/ScanCpDecay.h"
#include "runtime/ops/KernelCall.h"

namespace ssmjit::detail {

namespace {

void bind(KernelCall& c, const SelectiveScanArgs& a, const TensorView& out) {
  constexpr const dsl::Signature& S = kernels::kScanCpDecay;
  c.tensor(S.tensor("delta"), a.delta, Axes{1, 2});
  c.tensor(S.tensor("dbias"), a.delta_bias);
  c.tensor(S.tensor("A"), a.A);
  c.tensor(S.tensor("out"), out);
  c.size(S.size("L"), a.delta.shape[2]);
  c.size(S.size("N"), a.A.shape[1]);
  c.flag(S.flag("has_dbias"), a.delta_bias.defined());
  c.flag(S.flag("softplus"), a.delta_softplus);
  c.meta("meta:index_bits", fits32({&a.delta, &a.A, &out}) ? 32 : 64);
}

}  // namespace

void scanCpDecay(const SelectiveScanArgs& a, const TensorView& out, Stream stream) {
  KernelCall c(kernels::kScanCpDecay);
  bind(c, a, out);
  const unsigned grid[3] = {static_cast<unsigned>(a.delta.shape[1]), 1, 1};
  c.launch(grid, static_cast<CUstream>(stream));
}

Specialization scanCpDecaySpecialization(const SelectiveScanArgs& a, const TensorView& out, const std::string& arch) {
  KernelCall c(kernels::kScanCpDecay);
  bind(c, a, out);
  return c.specialization(arch);
}

}  // namespace ssmjit::detail
