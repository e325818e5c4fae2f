// The decode ops: the selective state update (one token and L tokens), the fused speculative
// decode step of a Mamba-2 layer, and the device-side index check.
#include <nanobind/nanobind.h>

#include "runtime/python/OpBinding.h"
#include "runtime/python/SharedFields.h"
#include "ssmjit/ops.h"

namespace nb = nanobind;

namespace ssmjit::python {
namespace {

SelectiveStateUpdateArgs stateUpdateArgs(Fields& f) {
  SelectiveStateUpdateArgs a;
  SSMJIT_READ_FIELDS(f, a.state);
  readSsmInputs(f, a);
  SSMJIT_READ_FIELDS(f, a.state_batch_indices, a.dst_state_indices, a.out, a.state_write);
  f.finish();
  return a;
}

void decodeStep(nb::dict d, uintptr_t stream) {
  Fields f(d, "mamba2_decode_step");
  Mamba2DecodeState s;
  SSMJIT_READ_FIELDS(f, s.conv_state, s.ssm_state, s.xbc_cache, s.dt_cache, s.cached_tokens, s.arrivals);
  Mamba2MixerWeights w;
  SSMJIT_READ_FIELDS(f, w.conv_weight, w.conv_bias, w.A, w.D, w.dt_bias, w.dt_softplus, w.dt_min, w.dt_max);
  Mamba2DecodeStepArgs a;
  SSMJIT_READ_FIELDS(f, a.state_indices, a.num_accepted, a.xBC, a.dt, a.z, a.y, a.parts);
  f.finish();
  mamba2_decode_step(s, w, a, streamOf(stream));
}

}  // namespace

void bindDecode(nb::module_& m) {
  bindOp(m, "selective_state_update", stateUpdateArgs, selective_state_update);
  bindOp(m, "selective_state_update_tokens", stateUpdateArgs, selective_state_update_tokens);
  m.def("mamba2_decode_step", &decodeStep);
  m.def("check_device_errors", [](uintptr_t stream) { checkDeviceErrors(streamOf(stream)); });
}

}  // namespace ssmjit::python
