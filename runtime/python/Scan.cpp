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
  a.u = f.tensor("u");
  a.delta = f.tensor("delta");
  a.A = f.tensor("A");
  a.B = f.tensor("B");
  a.C = f.tensor("C");
  a.D = f.tensor("D");
  a.z = f.tensor("z");
  a.delta_bias = f.tensor("delta_bias");
  a.delta_softplus = f.flag("delta_softplus");
  a.max_seqlen = f.integer("max_seqlen");
  readSequenceStates(f, a);
  return a;
}

SelectiveScanArgs forwardArgs(Fields& f) {
  SelectiveScanArgs a = inputs(f);
  a.out = f.tensor("out");
  a.final_states = f.tensor("final_states");
  a.serial_seqlen = f.integer("serial_seqlen");
  a.workspace = f.tensor("workspace");
  f.finish();
  return a;
}

SelectiveScanBackwardArgs backwardArgs(Fields& f) {
  SelectiveScanBackwardArgs a;
  a.forward = inputs(f);
  readScanGradients(f, a);
  a.du = f.tensor("du");
  a.ddelta = f.tensor("ddelta");
  a.ddelta_bias = f.tensor("ddelta_bias");
  f.finish();
  return a;
}

}  // namespace

void bindScan(nanobind::module_& m) {
  bindOp(m, "selective_scan", forwardArgs, selective_scan, selective_scan_workspace_size);
  bindOp(m, "selective_scan_backward", backwardArgs, selective_scan_backward, selective_scan_backward_workspace_size);
}

}  // namespace ssmjit::python
