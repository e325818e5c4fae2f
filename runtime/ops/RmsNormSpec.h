// The specialisations rms_norm and gated_rms_norm compile for a call, for drivers that name the
// ops' kernel without launching it (compile checks). They run the ops' own binding step. Internal
// to the runtime; libssmjit.so exports them for the tests.
#pragma once
#include <string>
#include <vector>

#include "compiler/Specialization.h"
#include "ssmjit/ops.h"

namespace ssmjit::detail {

// Checked as the op checks (every tensor on args.x's device, so fake or host addresses can stand
// in: only their alignment classes bind). Completed (meta values chosen).
Specialization rmsNormSpecialization(const RmsNormArgs& args, const std::string& arch);
Specialization gatedRmsNormSpecialization(const GatedRmsNormArgs& args, const std::string& arch);
// gated_rms_norm_backward's two kernels (the workspace may be absent).
std::vector<Specialization> gatedRmsNormBackwardSpecializations(const GatedRmsNormBackwardArgs& args,
                                                                const std::string& arch);

}  // namespace ssmjit::detail
