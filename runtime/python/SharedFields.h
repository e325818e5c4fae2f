// Groups of fields that several ops' argument structs share under the same names, read alike.
#pragma once
#include "runtime/python/Fields.h"

namespace ssmjit::python {

// The packed sequences and their state slots: causal_conv1d, the selective scan, SSD.
template <class Args>
void readSequenceStates(Fields& f, Args& a) {
  a.cu_seqlens = f.tensor("cu_seqlens");
  a.initial_states = f.tensor("initial_states");
  a.initial_state_indices = f.tensor("initial_state_indices");
  a.final_state_indices = f.tensor("final_state_indices");
}

// The SSM inputs named alike by the state update and SSD: dt with its bias, softplus and clamp.
template <class Args>
void readSsmInputs(Fields& f, Args& a) {
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
}

// The gradients the selective scan's and SSD's backwards share, and their workspace.
template <class Args>
void readScanGradients(Fields& f, Args& a) {
  a.dout = f.tensor("dout");
  a.dfinal_states = f.tensor("dfinal_states");
  a.dA = f.tensor("dA");
  a.dB = f.tensor("dB");
  a.dC = f.tensor("dC");
  a.dD = f.tensor("dD");
  a.dz = f.tensor("dz");
  a.dinitial_states = f.tensor("dinitial_states");
  a.workspace = f.tensor("workspace");
}

}  // namespace ssmjit::python
