// The specialisations selective_scan compiles for a call (the states pass, when the call needs
// it, then the main pass), for drivers that name the kernels without launching them (compile
// checks, `ssmjit inspect`, prewarm). They run the op's own binding step. Internal to the
// runtime; libssmjit.so exports it for the tool and the tests.
#pragma once
#include <string>
#include <vector>

#include <cuda.h>

#include "compiler/Specialization.h"
#include "kernels_dsl/Signature.h"
#include "kernels_dsl/scan/ScanSequences.h"
#include "runtime/ops/KernelCall.h"
#include "runtime/ops/SelectiveScanCheck.h"
#include "ssmjit/ops.h"

namespace ssmjit::detail {

// Checked as the op checks (every tensor on u's device; the workspace is not needed). Completed.
std::vector<Specialization> scanSpecializations(const SelectiveScanArgs& args, const std::string& arch);

// Where the backward's checkpoint pass writes in its workspace (SelectiveScan.h, checkpoints): each
// sequence's state every `blockT` tokens, `perRow` keys a row; cut into spans of `span` tokens
// (whole sequences: kernels::kScanWholeSequences), with `spanKeysPerRow` keys a row and its
// fold's region at `auxBase` (CheckpointSpans.h).
struct ScanCheckpointLayout {
  int64_t blockT = 0, perRow = 0, span = kernels::kScanWholeSequences, spanKeysPerRow = 0, auxBase = 0;
};

// The backward's first launch: the forward scan of `args` (checked) writing its checkpoints to
// args.workspace as `l` lays them out, bound in `c`, a call of the forward's kernel
// (kernels::kScan). Its grid: (cdiv(D, meta:BLOCK_D), cdiv(longest, l.span), nseq).
void bindScanCheckpoints(KernelCall& c, const SelectiveScanArgs& args, const ScanDims& d, const ScanCheckpointLayout& l,
                         void* err);

// The axes of B or C (or their gradients) for a scan kernel's [b, g, n, d] strides: time-varying
// (Bt, G, N, L) or constant (D, N).
Axes scanBCAxes(bool varying, bool batched);
// The axes of a tensor shaped like u for a scan kernel's [b, d] strides (time contiguous).
inline Axes scanRows(const ScanDims& d) { return {d.batch > 1 ? 0 : kNoAxis, 1}; }

// The forward's inputs, which the forward and backward kernels declare alike (S: kScan or
// kScanBwd): u, delta, A, B, C, D, z and delta_bias, B/C's group size and the flags they imply.
template <const dsl::Signature& S>
void bindScanInputs(KernelCall& c, const SelectiveScanArgs& f, const ScanDims& d) {
  c.tensor(S.tensor("u"), f.u, scanRows(d));
  c.tensor(S.tensor("delta"), f.delta, scanRows(d));
  c.tensor(S.tensor("A"), f.A);
  c.tensor(S.tensor("B"), f.B, scanBCAxes(d.bVarying, d.batch > 1));
  c.tensor(S.tensor("C"), f.C, scanBCAxes(d.cVarying, d.batch > 1));
  c.tensor(S.tensor("Dv"), f.D);
  c.tensor(S.tensor("z"), f.z, scanRows(d));
  c.tensor(S.tensor("dbias"), f.delta_bias);
  c.size(S.size("group"), d.D / d.G);
  c.flag(S.flag("b_varying"), d.bVarying);
  c.flag(S.flag("c_varying"), d.cVarying);
  c.flag(S.flag("has_D"), f.D.defined());
  c.flag(S.flag("has_z"), f.z.defined());
  c.flag(S.flag("has_dbias"), f.delta_bias.defined());
  c.flag(S.flag("softplus"), f.delta_softplus);
}

// selective_scan_backward's specialisations (the checkpoint pass, the backward, its sums).
std::vector<Specialization> scanBackwardSpecializations(const SelectiveScanBackwardArgs& args, const std::string& arch);

}  // namespace ssmjit::detail
