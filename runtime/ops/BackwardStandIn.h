// The backward call a training step makes after a forward call, for compiling the backward's
// kernels alongside the forward's (compile_backward in ssmjit/ops.h): the forward's inputs as
// they are, every gradient of an input the forward was given (with the input's shape, dtype,
// strides and alignment), dout like out, no gradient of the final or initial states, and a
// workspace of the size the backward asks. The gradients and the workspace get stand-in
// addresses (the kernels specialise on alignment classes only, and these calls are never
// launched). Internal to the runtime.
#pragma once
#include "ssmjit/ops.h"

namespace ssmjit::detail {

// Each throws Error(InvalidArgument) as the backward's check does when the stand-in call is not
// one the backward takes (e.g. a forward without out).
SelectiveScanBackwardArgs scanBackwardStandIn(const SelectiveScanArgs& forward);
SsdBackwardArgs ssdBackwardStandIn(const SsdArgs& forward);
CausalConv1dBackwardArgs convBackwardStandIn(const CausalConv1dArgs& forward);

}  // namespace ssmjit::detail
