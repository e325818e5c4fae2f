// The specialisations the causal-conv1d ops compile for a call, for drivers that name the ops'
// kernels without launching them (compile checks, `ssmjit inspect`, prewarm). They run the ops'
// own binding step, so what a driver shows is what the op runs. Internal to the runtime;
// libssmjit.so exports them for the tool and the tests.
#pragma once
#include <string>
#include <vector>

#include "compiler/Specialization.h"
#include "ssmjit/ops.h"

namespace ssmjit::detail {

// Checked as the op checks (every tensor on args.x's device, so fake or host addresses can stand
// in: only their alignment classes bind). The forward, then the per-sequence kernel when the call
// launches it. Completed (meta values chosen).
std::vector<Specialization> convSpecializations(const CausalConv1dArgs& args, const std::string& arch);
// The backward's launches in order: dx, the per-sequence kernel when launched, the reduction.
std::vector<Specialization> convBackwardSpecializations(const CausalConv1dBackwardArgs& args, const std::string& arch);
Specialization convUpdateSpecialization(const CausalConv1dUpdateArgs& args, const std::string& arch);

}  // namespace ssmjit::detail
