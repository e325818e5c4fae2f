// The sums of dt' over chunks of a context-parallel scan part's first sequence (ScanCpDtSums.h):
// bound to its kernel and launched.
#include "runtime/parallel/ScanCpDtSums.h"

#include <cuda.h>

#include "kernels_dsl/parallel/ScanCpDtSums.h"
#include "runtime/ops/KernelCall.h"
#include "runtime/parallel/IncomingShareArgs.h"

namespace ssmjit::detail {

namespace {

void bind(KernelCall& c, const SelectiveScanArgs& a, const TensorView& sums) {
  bindDtWalk(c, kernels::kScanCpDtSums, a, sums);
  c.meta("meta:index_bits", fits32({&a.delta}) ? 32 : 64);
}

}  // namespace

int64_t scanCpChunk(int64_t L) {
  int64_t chunk = 1024;
  while (chunk * 64 < L) chunk *= 2;
  return chunk;
}

int64_t scanCpChunks(int64_t L) { return (L + scanCpChunk(L) - 1) / scanCpChunk(L); }

void launchOverChunks(KernelCall& c, const SelectiveScanArgs& a, Stream stream) {
  const int64_t block = c.metaValue("meta:BLOCK_D");
  const unsigned grid[3] = {static_cast<unsigned>((a.A.shape[0] + block - 1) / block),
                            static_cast<unsigned>(scanCpChunks(a.delta.shape[2])), 1};
  c.launch(grid, static_cast<CUstream>(stream));
}

void scanCpDtSums(const SelectiveScanArgs& a, const TensorView& sums, Stream stream) {
  KernelCall c(kernels::kScanCpDtSums);
  bind(c, a, sums);
  launchOverChunks(c, a, stream);
}

Specialization scanCpDtSumsSpecialization(const SelectiveScanArgs& a, const TensorView& sums, const std::string& arch) {
  KernelCall c(kernels::kScanCpDtSums);
  bind(c, a, sums);
  return c.specialization(arch);
}

}  // namespace ssmjit::detail
