// The Mamba-1 scan's correction of a context-parallel part (ScanCpCorrect.h): the chunks' sums of
// dt' (ScanCpDtSums.h), then the correction's kernel, bound and launched.
#include "runtime/parallel/ScanCpCorrect.h"

#include "kernels_dsl/parallel/ScanCpCorrect.h"
#include "runtime/ops/KernelCall.h"
#include "runtime/parallel/IncomingShareArgs.h"
#include "runtime/parallel/ScanCpDtSums.h"
#include "ssmjit/error.h"

namespace ssmjit::detail {

namespace {

// The chunks' sums of dt' at the workspace's start, (chunks, D).
TensorView sumsOf(const SelectiveScanArgs& a) {
  return TensorView::contiguous(a.workspace.data, DType::F32, {scanCpChunks(a.delta.shape[2]), a.A.shape[0]},
                                DeviceKind::CUDA, a.workspace.deviceId);
}

void bind(KernelCall& c, const SelectiveScanArgs& a, const TensorView& incoming) {
  constexpr const dsl::Signature& S = kernels::kScanCpCorrect;
  bindIncomingShare(c, S, a, sumsOf(a));
  c.tensor(S.tensor("out"), a.out, Axes{1, 2});
  c.tensor(S.tensor("incoming"), incoming);
  c.tensor(S.tensor("final"), a.final_states);
  c.tensor(S.tensor("fidx"), a.final_state_indices);
  c.size(S.size("S"), a.final_states.defined() ? a.final_states.shape[0] : 0);
  c.flag(S.flag("has_final"), a.final_states.defined());
  c.flag(S.flag("has_fidx"), a.final_state_indices.defined());
  c.meta("meta:index_bits", fits32({&a.delta, &a.C, &a.z, &a.out, &a.A, &a.final_states}) ? 32 : 64);
}

}  // namespace

int64_t scanCpCorrectWorkspaceFloats(const SelectiveScanArgs& a) { return sumsOf(a).numel(); }

void scanCpCorrect(const SelectiveScanArgs& a, const TensorView& incoming, Stream stream) {
  if (!a.workspace.defined() || a.workspace.numel() < scanCpCorrectWorkspaceFloats(a))
    throw Error(Error::Kind::Internal, "scanCpCorrect: the workspace holds less than the chunks' sums");
  scanCpDtSums(a, sumsOf(a), stream);
  KernelCall c(kernels::kScanCpCorrect);
  bind(c, a, incoming);
  launchOverChunks(c, a, stream);
}

Specialization scanCpCorrectSpecialization(const SelectiveScanArgs& a, const TensorView& incoming,
                                           const std::string& arch) {
  KernelCall c(kernels::kScanCpCorrect);
  bind(c, a, incoming);
  return c.specialization(arch);
}

}  // namespace ssmjit::detail
