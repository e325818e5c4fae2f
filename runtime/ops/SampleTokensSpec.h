// The specialisations sample_tokens compiles for a call, for drivers that name its kernels without
// launching them (compile checks). They run the op's own binding step. Internal to the runtime;
// libssmjit.so exports them for the tests.
#pragma once
#include <string>
#include <vector>

#include "compiler/Specialization.h"
#include "ssmjit/ops.h"

namespace ssmjit::detail {

// Checked as the op checks (every tensor on logits' device). The launches in order: the arg max
// or the draw, then the shared step's advance when the call launches it. Completed.
std::vector<Specialization> sampleSpecializations(const SampleArgs& args, const std::string& arch);

}  // namespace ssmjit::detail
