// causal_conv1d forward, backward and the decode update. x and out always come as (B, D, L) in
// the ChannelFirst axis order with their real strides, so a channel-last tensor (the memory order
// causal-conv1d's seq_idx and states need) passes as it is.
#include <nanobind/nanobind.h>

#include "runtime/python/Fields.h"
#include "ssmjit/ops.h"

namespace nb = nanobind;

namespace ssmjit::python {
namespace {

CausalConv1dArgs forwardArgs(Fields& f) {
  CausalConv1dArgs a;
  a.x = f.tensor("x");
  a.weight = f.tensor("weight");
  a.bias = f.tensor("bias");
  a.out = f.tensor("out");
  a.silu = f.flag("silu");
  a.cu_seqlens = f.tensor("cu_seqlens");
  a.seq_pos = f.tensor("seq_pos");
  a.initial_states = f.tensor("initial_states");
  a.initial_state_indices = f.tensor("initial_state_indices");
  a.final_states = f.tensor("final_states");
  a.final_state_indices = f.tensor("final_state_indices");
  f.finish();
  return a;
}

CausalConv1dBackwardArgs backwardArgs(Fields& f) {
  CausalConv1dBackwardArgs a;
  a.x = f.tensor("x");
  a.weight = f.tensor("weight");
  a.bias = f.tensor("bias");
  a.dout = f.tensor("dout");
  a.silu = f.flag("silu");
  a.cu_seqlens = f.tensor("cu_seqlens");
  a.seq_pos = f.tensor("seq_pos");
  a.initial_states = f.tensor("initial_states");
  a.initial_state_indices = f.tensor("initial_state_indices");
  a.dfinal_states = f.tensor("dfinal_states");
  a.final_state_indices = f.tensor("final_state_indices");
  a.dx = f.tensor("dx");
  a.dweight = f.tensor("dweight");
  a.dbias = f.tensor("dbias");
  a.dinitial_states = f.tensor("dinitial_states");
  a.workspace = f.tensor("workspace");
  f.finish();
  return a;
}

CausalConv1dUpdateArgs updateArgs(Fields& f) {
  CausalConv1dUpdateArgs a;
  a.conv_state = f.tensor("conv_state");
  a.x = f.tensor("x");
  a.weight = f.tensor("weight");
  a.bias = f.tensor("bias");
  a.state_indices = f.tensor("state_indices");
  a.out = f.tensor("out");
  a.silu = f.flag("silu");
  a.commit = f.flag("commit", true);
  f.finish();
  return a;
}

}  // namespace

void bindConv(nb::module_& m) {
  m.def("causal_conv1d", [](nb::dict d, uintptr_t stream) {
    Fields f(d, "causal_conv1d");
    causal_conv1d(forwardArgs(f), streamOf(stream));
  });
  m.def("causal_conv1d_backward_workspace_size", [](nb::dict d) {
    Fields f(d, "causal_conv1d_backward");
    return causal_conv1d_backward_workspace_size(backwardArgs(f));
  });
  m.def("causal_conv1d_backward", [](nb::dict d, uintptr_t stream) {
    Fields f(d, "causal_conv1d_backward");
    causal_conv1d_backward(backwardArgs(f), streamOf(stream));
  });
  m.def("causal_conv1d_update", [](nb::dict d, uintptr_t stream) {
    Fields f(d, "causal_conv1d_update");
    causal_conv1d_update(updateArgs(f), streamOf(stream));
  });
}

}  // namespace ssmjit::python
