// embedding: the arguments are checked once, here at the edge (EmbeddingCheck), then bound to the
// kernel (kernels_dsl/embed/Embedding.h) and launched on the caller's stream. A bad id is found
// by the kernel and reported through the device status record.
#include <cuda.h>

#include "kernels_dsl/embed/Embedding.h"
#include "runtime/DeviceStatus.h"
#include "runtime/ops/EmbeddingSpec.h"
#include "runtime/ops/KernelCall.h"
#include "runtime/ops/EmbeddingCheck.h"
#include "ssmjit/ops.h"

namespace ssmjit {
namespace {

using detail::KernelCall;
using kernels::kEmbedding;

void bindEmbedding(KernelCall& c, const EmbeddingArgs& a, const detail::EmbeddingDims& d, void* err) {
  constexpr const dsl::Signature& S = kEmbedding;
  c.tensor(S.tensor("ids"), a.ids);
  c.tensor(S.tensor("table"), a.table);
  c.tensor(S.tensor("out"), a.out);
  c.pointer(S.tensor("err"), err, DType::I64);
  c.size(S.size("D"), d.D);
  c.size(S.size("V"), d.V);
  // int64 ids are compared with V in 64 bits: in 32, an id past 2^31 would wrap into the table.
  const bool wide = a.ids.dtype == DType::I64 || !detail::fits32({&a.table, &a.out, &a.ids});
  c.meta("meta:index_bits", wide ? 64 : 32);
}

}  // namespace

void embedding(const EmbeddingArgs& a, Stream stream) {
  const detail::EmbeddingDims d = detail::checkEmbeddingArgs(a, DeviceKind::CUDA, "embedding");
  if (d.T == 0 || d.D == 0) return;
  KernelCall c(kEmbedding);
  bindEmbedding(c, a, d, deviceStatusRecord());
  const int64_t bd = c.metaValue("meta:BLOCK_D");
  const unsigned grid[3] = {static_cast<unsigned>(d.T), static_cast<unsigned>((d.D + bd - 1) / bd), 1};
  c.launch(grid, static_cast<CUstream>(stream));
}

Specialization detail::embeddingSpecialization(const EmbeddingArgs& a, const std::string& arch) {
  const EmbeddingDims d = checkEmbeddingArgs(a, a.ids.device, "embedding");
  KernelCall c(kEmbedding);
  bindEmbedding(c, a, d, nullptr);
  return c.specialization(arch);
}

}  // namespace ssmjit
