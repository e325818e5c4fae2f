// The Mamba-2 SSD chunked scan forward and backward. The backward's fields are the forward's
// inputs and kept y plus the gradients and its workspace.
#include <nanobind/nanobind.h>

#include "runtime/python/OpBinding.h"
#include "runtime/python/SharedFields.h"
#include "ssmjit/ops.h"

namespace ssmjit::python {
namespace {

SsdArgs inputs(Fields& f) {
  SsdArgs a;
  readSsmInputs(f, a);
  SSMJIT_READ_FIELDS(f, a.chunk_size);
  readSequenceStates(f, a);
  return a;
}

SsdArgs forwardArgs(Fields& f) {
  SsdArgs a = inputs(f);
  SSMJIT_READ_FIELDS(f, a.out, a.y, a.final_states, a.workspace);
  f.finish();
  return a;
}

SsdBackwardArgs backwardArgs(Fields& f) {
  SsdBackwardArgs a;
  a.forward = inputs(f);
  SSMJIT_READ_FIELDS(f, a.forward.y);
  readScanGradients(f, a);
  SSMJIT_READ_FIELDS(f, a.dx, a.ddt, a.ddt_bias);
  f.finish();
  return a;
}

}  // namespace

void bindSsd(nanobind::module_& m) {
  bindOp(m, "ssd", forwardArgs, ssd, ssd_workspace_size);
  bindOp(m, "ssd_backward", backwardArgs, ssd_backward, ssd_backward_workspace_size);
}

}  // namespace ssmjit::python
