// The gradient of a context-parallel scan part's incoming state (ScanCpStateGrad.h): the chunks'
// sums of dt' (ScanCpDtSums.h), the chunks' partial gradients and their sum, bound and launched.
#include "runtime/parallel/ScanCpStateGrad.h"

#include <cuda.h>

#include <algorithm>

#include "kernels_dsl/parallel/ScanCpStateGrad.h"
#include "runtime/ops/KernelCall.h"
#include "runtime/parallel/IncomingShareArgs.h"
#include "runtime/parallel/ScanCpDtSums.h"
#include "ssmjit/error.h"

namespace ssmjit::detail {

namespace {

// The workspace's (chunks, D) sums of dt', then the (chunks, D, N) partial gradients.
struct Places {
  TensorView sums, part;
};
Places placesOf(const SelectiveScanBackwardArgs& b, const TensorView& ws) {
  const int64_t K = scanCpChunks(b.forward.delta.shape[2]), D = b.forward.A.shape[0], N = b.forward.A.shape[1];
  char* base = static_cast<char*>(ws.data);
  return {TensorView::contiguous(base, DType::F32, {K, D}, DeviceKind::CUDA, ws.deviceId),
          TensorView::contiguous(base + K * D * 4, DType::F32, {K, D, N}, DeviceKind::CUDA, ws.deviceId)};
}

void bindParts(KernelCall& c, const SelectiveScanBackwardArgs& b, const Places& at) {
  constexpr const dsl::Signature& S = kernels::kScanCpStateGrad;
  const SelectiveScanArgs& a = b.forward;
  const int64_t N = a.A.shape[1];
  bindIncomingShare(c, S, a, at.sums);
  c.tensor(S.tensor("dout"), b.dout, Axes{1, 2});
  c.tensor(S.tensor("part"), at.part);
  // Up to 16 states a program, as many as N needs.
  int64_t bn = 1;
  while (bn < std::min<int64_t>(N, 16)) bn *= 2;
  c.meta("meta:BLOCK_N", bn);
  c.meta("meta:index_bits", fits32({&a.delta, &a.C, &a.z, &b.dout, &at.part, &a.A}) ? 32 : 64);
}

void bindSum(KernelCall& c, const SelectiveScanBackwardArgs& b, const Places& at, const TensorView& out) {
  constexpr const dsl::Signature& S = kernels::kScanCpStateGradSum;
  c.tensor(S.tensor("A"), b.forward.A);
  c.tensor(S.tensor("sums"), at.sums);
  c.tensor(S.tensor("part"), at.part);
  c.tensor(S.tensor("dfinal"), b.dfinal_states);
  c.tensor(S.tensor("fidx"), b.forward.final_state_indices);
  c.tensor(S.tensor("out"), out);
  c.size(S.size("D"), b.forward.A.shape[0]);
  c.size(S.size("N"), b.forward.A.shape[1]);
  c.size(S.size("K"), at.sums.shape[0]);
  c.size(S.size("S"), b.dfinal_states.defined() ? b.dfinal_states.shape[0] : 0);
  c.flag(S.flag("has_dfinal"), b.dfinal_states.defined());
  c.flag(S.flag("has_fidx"), b.forward.final_state_indices.defined());
  c.meta("meta:index_bits", fits32({&at.part, &b.dfinal_states}) ? 32 : 64);
}

unsigned blocks(int64_t n, int64_t block) { return static_cast<unsigned>((n + block - 1) / block); }

}  // namespace

int64_t scanCpStateGradWorkspaceFloats(const SelectiveScanBackwardArgs& b) {
  const int64_t K = scanCpChunks(b.forward.delta.shape[2]), D = b.forward.A.shape[0], N = b.forward.A.shape[1];
  return K * D * (1 + N);
}

void scanCpStateGrad(const SelectiveScanBackwardArgs& b, const TensorView& out, const TensorView& ws, Stream stream) {
  if (!ws.defined() || ws.numel() < scanCpStateGradWorkspaceFloats(b))
    throw Error(Error::Kind::Internal, "scanCpStateGrad: the workspace holds less than the chunks' sums and parts");
  const Places at = placesOf(b, ws);
  const int64_t D = b.forward.A.shape[0], N = b.forward.A.shape[1];
  scanCpDtSums(b.forward, at.sums, stream);
  KernelCall parts(kernels::kScanCpStateGrad);
  bindParts(parts, b, at);
  const unsigned partsGrid[3] = {blocks(D, parts.metaValue("meta:BLOCK_D")), blocks(N, parts.metaValue("meta:BLOCK_N")),
                                 static_cast<unsigned>(at.sums.shape[0])};
  parts.launch(partsGrid, static_cast<CUstream>(stream));
  KernelCall sum(kernels::kScanCpStateGradSum);
  bindSum(sum, b, at, out);
  const unsigned sumGrid[3] = {blocks(D, sum.metaValue("meta:BLOCK_D")), blocks(N, sum.metaValue("meta:BLOCK_N")), 1};
  sum.launch(sumGrid, static_cast<CUstream>(stream));
}

Specialization scanCpStateGradSpecialization(const SelectiveScanBackwardArgs& b, const TensorView& ws,
                                             const std::string& arch) {
  KernelCall c(kernels::kScanCpStateGrad);
  bindParts(c, b, placesOf(b, ws));
  return c.specialization(arch);
}

Specialization scanCpStateGradSumSpecialization(const SelectiveScanBackwardArgs& b, const TensorView& out,
                                                const TensorView& ws, const std::string& arch) {
  KernelCall c(kernels::kScanCpStateGradSum);
  bindSum(c, b, placesOf(b, ws), out);
  return c.specialization(arch);
}

}  // namespace ssmjit::detail
