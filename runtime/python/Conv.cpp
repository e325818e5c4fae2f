// causal_conv1d forward, backward and the decode update. x and out always come as (B, D, L) in
// the ChannelFirst axis order with their real strides, so a channel-last tensor (the memory order
// causal-conv1d's seq_idx and states need) passes as it is.
#include <nanobind/nanobind.h>

#include "runtime/python/OpBinding.h"
#include "runtime/python/SharedFields.h"
#include "ssmjit/ops.h"

namespace ssmjit::python {
namespace {

// The fields the forward and the backward share.
template <class Args>
void readInputs(Fields& f, Args& a) {
  SSMJIT_READ_FIELDS(f, a.x, a.weight, a.bias, a.silu, a.seq_pos);
  readSequenceStates(f, a);
}

CausalConv1dArgs forwardArgs(Fields& f) {
  CausalConv1dArgs a;
  readInputs(f, a);
  SSMJIT_READ_FIELDS(f, a.out, a.final_states);
  f.finish();
  return a;
}

CausalConv1dBackwardArgs backwardArgs(Fields& f) {
  CausalConv1dBackwardArgs a;
  readInputs(f, a);
  SSMJIT_READ_FIELDS(f, a.dout, a.dfinal_states, a.dx, a.dweight, a.dbias, a.dinitial_states, a.workspace);
  f.finish();
  return a;
}

CausalConv1dUpdateArgs updateArgs(Fields& f) {
  CausalConv1dUpdateArgs a;
  SSMJIT_READ_FIELDS(f, a.conv_state, a.x, a.weight, a.bias, a.state_indices, a.out, a.silu, a.commit);
  f.finish();
  return a;
}

}  // namespace

void bindConv(nanobind::module_& m) {
  bindOp(m, "causal_conv1d", forwardArgs, causal_conv1d);
  bindOp(m, "causal_conv1d_backward", backwardArgs, causal_conv1d_backward, causal_conv1d_backward_workspace_size);
  bindOp(m, "causal_conv1d_update", updateArgs, causal_conv1d_update);
}

}  // namespace ssmjit::python
