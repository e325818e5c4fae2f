// The backward call a training step makes after a forward call, for compiling the backward's
// kernels alongside the forward's (compile_backward in ssmjit/ops.h): the forward's inputs as
// they are, every gradient of an input the forward was given (with the input's shape, dtype,
// strides and alignment), dout like out, no gradient of the final or initial states, and a
// workspace of the size the backward asks. The gradients and the workspace get stand-in
// addresses (the kernels specialise on alignment classes only, and these calls are never
// launched). Internal to the runtime.
#pragma once
#include <string>
#include <vector>

#include "compiler/Specialization.h"
#include "ssmjit/ops.h"

namespace ssmjit::detail {

// The backward's kernels a forward call compiles alongside its own: with compile_backward, those
// of its stand-in backward call, else none. Each throws Error(InvalidArgument) as the backward's
// check does when the stand-in call is not one the backward takes (e.g. a forward without out).
std::vector<Specialization> backwardAlongside(const SelectiveScanArgs& forward, const std::string& arch);
std::vector<Specialization> backwardAlongside(const SsdArgs& forward, const std::string& arch);
std::vector<Specialization> backwardAlongside(const CausalConv1dArgs& forward, const std::string& arch);

}  // namespace ssmjit::detail
