// The Mamba-1 selective scan forward and backward. The backward's fields are the forward's
// (without out, final_states, workspace, serial_seqlen) plus the gradients and its workspace.
#include <nanobind/nanobind.h>

#include "runtime/python/OpBinding.h"
#include "runtime/python/SharedFields.h"
#include "ssmjit/ops.h"

namespace ssmjit::python {
namespace {

SelectiveScanArgs inputs(Fields& f) {
  SelectiveScanArgs a;
  SSMJIT_READ_FIELDS(f, a.u, a.delta, a.A, a.B, a.C, a.D, a.z, a.delta_bias, a.delta_softplus, a.max_seqlen);
  readSequenceStates(f, a);
  return a;
}

SelectiveScanArgs forwardArgs(Fields& f) {
  SelectiveScanArgs a = inputs(f);
  SSMJIT_READ_FIELDS(f, a.out, a.final_states, a.serial_seqlen, a.workspace);
  f.finish();
  return a;
}

SelectiveScanBackwardArgs backwardArgs(Fields& f) {
  SelectiveScanBackwardArgs a;
  a.forward = inputs(f);
  readScanGradients(f, a);
  SSMJIT_READ_FIELDS(f, a.du, a.ddelta, a.ddelta_bias);
  f.finish();
  return a;
}

}  // namespace

void bindScan(nanobind::module_& m) {
  bindOp(m, "selective_scan", forwardArgs, selective_scan, selective_scan_workspace_size);
  bindOp(m, "selective_scan_backward", backwardArgs, selective_scan_backward, selective_scan_backward_workspace_size);
}

}  // namespace ssmjit::python
