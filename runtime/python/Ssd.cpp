// The Mamba-2 SSD chunked scan forward and backward. The backward's fields are the forward's
// inputs plus the gradients and its workspace.
#include <nanobind/nanobind.h>

#include "runtime/python/Fields.h"
#include "ssmjit/ops.h"

namespace nb = nanobind;

namespace ssmjit::python {
namespace {

SsdArgs inputs(Fields& f) {
  SsdArgs a;
  a.x = f.tensor("x");
  a.dt = f.tensor("dt");
  a.A = f.tensor("A");
  a.B = f.tensor("B");
  a.C = f.tensor("C");
  a.D = f.tensor("D");
  a.z = f.tensor("z");
  a.dt_bias = f.tensor("dt_bias");
  a.dt_softplus = f.flag("dt_softplus");
  a.dt_min = f.real("dt_min");
  a.dt_max = f.real("dt_max");
  a.chunk_size = static_cast<int>(f.integer("chunk_size", 256));
  a.cu_seqlens = f.tensor("cu_seqlens");
  a.initial_states = f.tensor("initial_states");
  a.initial_state_indices = f.tensor("initial_state_indices");
  a.final_state_indices = f.tensor("final_state_indices");
  return a;
}

SsdArgs forwardArgs(Fields& f) {
  SsdArgs a = inputs(f);
  a.out = f.tensor("out");
  a.final_states = f.tensor("final_states");
  a.workspace = f.tensor("workspace");
  f.finish();
  return a;
}

SsdBackwardArgs backwardArgs(Fields& f) {
  SsdBackwardArgs a;
  a.forward = inputs(f);
  a.dout = f.tensor("dout");
  a.dfinal_states = f.tensor("dfinal_states");
  a.dx = f.tensor("dx");
  a.ddt = f.tensor("ddt");
  a.dA = f.tensor("dA");
  a.dB = f.tensor("dB");
  a.dC = f.tensor("dC");
  a.dD = f.tensor("dD");
  a.dz = f.tensor("dz");
  a.ddt_bias = f.tensor("ddt_bias");
  a.dinitial_states = f.tensor("dinitial_states");
  a.workspace = f.tensor("workspace");
  f.finish();
  return a;
}

}  // namespace

void bindSsd(nb::module_& m) {
  m.def("ssd_workspace_size", [](nb::dict d) {
    Fields f(d, "ssd");
    return ssd_workspace_size(forwardArgs(f));
  });
  m.def("ssd", [](nb::dict d, uintptr_t stream) {
    Fields f(d, "ssd");
    ssd(forwardArgs(f), streamOf(stream));
  });
  m.def("ssd_backward_workspace_size", [](nb::dict d) {
    Fields f(d, "ssd_backward");
    return ssd_backward_workspace_size(backwardArgs(f));
  });
  m.def("ssd_backward", [](nb::dict d, uintptr_t stream) {
    Fields f(d, "ssd_backward");
    ssd_backward(backwardArgs(f), streamOf(stream));
  });
}

}  // namespace ssmjit::python
