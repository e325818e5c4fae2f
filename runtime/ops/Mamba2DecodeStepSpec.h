// The specialisation mamba2_decode_step compiles for a call, for drivers that name the kernel
// without launching it (compile checks, `ssmjit inspect`, prewarm). It runs the op's own binding
// step. Internal to the runtime; libssmjit.so exports it for the tool and the tests.
#pragma once
#include <string>

#include "compiler/Specialization.h"
#include "ssmjit/ops.h"

namespace ssmjit::detail {

// Checked as the op checks (every tensor on ssm_state's device). Completed (meta values chosen).
Specialization decodeStepSpecialization(const Mamba2DecodeState& state, const Mamba2MixerWeights& weights,
                                        const Mamba2DecodeStepArgs& args, const std::string& arch);

}  // namespace ssmjit::detail
