// The context-parallel state scan (CpStateScan.h): bound to its kernel and launched.
#include "runtime/parallel/CpStateScan.h"

#include <cuda.h>

#include "kernels_dsl/parallel/CpStateScan.h"
#include "runtime/ops/KernelCall.h"
#include "ssmjit/error.h"

namespace ssmjit::detail {

namespace {

void bind(KernelCall& c, const TensorView& summaries, int64_t ranks, int64_t H, int64_t PN, CpDecay decay,
          const TensorView& out) {
  if (summaries.ndim != 2 || summaries.shape[1] != cpRowFloats(H, PN, decay) || summaries.dtype != DType::F32 ||
      ranks > summaries.shape[0] || out.numel() != H * PN || out.dtype != DType::F32)
    throw Error(Error::Kind::Internal, "cpStateScan: summaries " + summaries.shapeString() + ", out " +
                                           out.shapeString() + " do not fit H " + std::to_string(H) + ", PN " +
                                           std::to_string(PN) + ", ranks " + std::to_string(ranks));
  constexpr const dsl::Signature& S = kernels::kCpStateScan;
  c.tensor(S.tensor("summaries"), summaries);
  TensorView flat = out;  // contiguous: one axis
  flat.ndim = 1;
  flat.shape[0] = H * PN;
  flat.strides[0] = 1;
  c.tensor(S.tensor("out"), flat);
  c.size(S.size("H"), H);
  c.size(S.size("PN"), PN);
  c.size(S.size("ranks"), ranks);
  c.meta("meta:decay_per_element", decay == CpDecay::PerState ? 1 : 0);
}

}  // namespace

int64_t cpDecayFloats(int64_t H, int64_t PN, CpDecay decay) { return decay == CpDecay::PerState ? H * PN : H; }
int64_t cpRowFloats(int64_t H, int64_t PN, CpDecay decay) { return cpDecayFloats(H, PN, decay) + H * PN; }

void cpStateScan(const TensorView& summaries, int64_t ranks, int64_t H, int64_t PN, CpDecay decay,
                 const TensorView& out, Stream stream) {
  KernelCall c(kernels::kCpStateScan);
  bind(c, summaries, ranks, H, PN, decay, out);
  const int64_t block = c.metaValue("meta:BLOCK");
  const unsigned grid[3] = {static_cast<unsigned>((PN + block - 1) / block), static_cast<unsigned>(H), 1};
  c.launch(grid, static_cast<CUstream>(stream));
}

Specialization cpStateScanSpecialization(const TensorView& summaries, int64_t ranks, int64_t H, int64_t PN,
                                         CpDecay decay, const TensorView& out, const std::string& arch) {
  KernelCall c(kernels::kCpStateScan);
  bind(c, summaries, ranks, H, PN, decay, out);
  return c.specialization(arch);
}

}  // namespace ssmjit::detail
