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
  a.state = f.tensor("state");
  readSsmInputs(f, a);
  a.state_batch_indices = f.tensor("state_batch_indices");
  a.dst_state_indices = f.tensor("dst_state_indices");
  a.out = f.tensor("out");
  a.state_write = static_cast<StateWrite>(f.integer("state_write", 0));
  f.finish();
  return a;
}

void decodeStep(nb::dict d, uintptr_t stream) {
  Fields f(d, "mamba2_decode_step");
  Mamba2DecodeState s;
  s.conv_state = f.tensor("conv_state");
  s.ssm_state = f.tensor("ssm_state");
  s.xbc_cache = f.tensor("xbc_cache");
  s.dt_cache = f.tensor("dt_cache");
  s.cached_tokens = f.tensor("cached_tokens");
  s.arrivals = f.tensor("arrivals");
  Mamba2MixerWeights w;
  w.conv_weight = f.tensor("conv_weight");
  w.conv_bias = f.tensor("conv_bias");
  w.A = f.tensor("A");
  w.D = f.tensor("D");
  w.dt_bias = f.tensor("dt_bias");
  w.dt_softplus = f.flag("dt_softplus", true);
  w.dt_min = f.real("dt_min");
  w.dt_max = f.real("dt_max");
  Mamba2DecodeStepArgs a;
  a.state_indices = f.tensor("state_indices");
  a.num_accepted = f.tensor("num_accepted");
  a.xBC = f.tensor("xBC");
  a.dt = f.tensor("dt");
  a.z = f.tensor("z");
  a.y = f.tensor("y");
  a.parts = static_cast<DecodeStepParts>(f.integer("parts", 0));
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
