// Groups of fields that several ops' argument structs share under the same names, read alike.
#pragma once
#include "runtime/python/Fields.h"

namespace ssmjit::python {

// The packed sequences and their state slots: causal_conv1d, the selective scan, SSD.
template <class Args>
void readSequenceStates(Fields& f, Args& a) {
  SSMJIT_READ_FIELDS(f, a.cu_seqlens, a.initial_states, a.initial_state_indices, a.final_state_indices);
}

// The SSM inputs named alike by the state update and SSD: dt with its bias, softplus and clamp.
template <class Args>
void readSsmInputs(Fields& f, Args& a) {
  SSMJIT_READ_FIELDS(f, a.x, a.dt, a.A, a.B, a.C, a.D, a.z, a.dt_bias, a.dt_softplus, a.dt_min, a.dt_max);
}

// The gradients the selective scan's and SSD's backwards share, and their workspace.
template <class Args>
void readScanGradients(Fields& f, Args& a) {
  SSMJIT_READ_FIELDS(f, a.dout, a.dfinal_states, a.dA, a.dB, a.dC, a.dD, a.dz, a.dinitial_states, a.workspace);
}

}  // namespace ssmjit::python
