// The Mamba-1 selective scan forward and backward. The backward's fields are the forward's
// (without out, final_states, workspace, serial_seqlen) plus the gradients and its workspace.
#include <nanobind/nanobind.h>

#include "runtime/python/Fields.h"
#include "ssmjit/ops.h"

namespace nb = nanobind;

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
  a.cu_seqlens = f.tensor("cu_seqlens");
  a.max_seqlen = f.integer("max_seqlen");
  a.initial_states = f.tensor("initial_states");
  a.initial_state_indices = f.tensor("initial_state_indices");
  a.final_state_indices = f.tensor("final_state_indices");
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
  a.dout = f.tensor("dout");
  a.dfinal_states = f.tensor("dfinal_states");
  a.du = f.tensor("du");
  a.ddelta = f.tensor("ddelta");
  a.dA = f.tensor("dA");
  a.dB = f.tensor("dB");
  a.dC = f.tensor("dC");
  a.dD = f.tensor("dD");
  a.dz = f.tensor("dz");
  a.ddelta_bias = f.tensor("ddelta_bias");
  a.dinitial_states = f.tensor("dinitial_states");
  a.workspace = f.tensor("workspace");
  f.finish();
  return a;
}

}  // namespace

void bindScan(nb::module_& m) {
  m.def("selective_scan_workspace_size", [](nb::dict d) {
    Fields f(d, "selective_scan");
    return selective_scan_workspace_size(forwardArgs(f));
  });
  m.def("selective_scan", [](nb::dict d, uintptr_t stream) {
    Fields f(d, "selective_scan");
    selective_scan(forwardArgs(f), streamOf(stream));
  });
  m.def("selective_scan_backward_workspace_size", [](nb::dict d) {
    Fields f(d, "selective_scan_backward");
    return selective_scan_backward_workspace_size(backwardArgs(f));
  });
  m.def("selective_scan_backward", [](nb::dict d, uintptr_t stream) {
    Fields f(d, "selective_scan_backward");
    selective_scan_backward(backwardArgs(f), streamOf(stream));
  });
}

}  // namespace ssmjit::python
