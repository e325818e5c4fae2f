// The specialisations selective_scan compiles for a call (the states pass, when the call needs
// it, then the main pass), for drivers that name the kernels without launching them (compile
// checks, `ssmjit inspect`, prewarm). They run the op's own binding step. Internal to the
// runtime; libssmjit.so exports it for the tool and the tests.
#pragma once
#include <string>
#include <vector>

#include "compiler/Specialization.h"
#include "ssmjit/ops.h"

namespace ssmjit::detail {

// Checked as the op checks (every tensor on u's device; the workspace is not needed). Completed.
std::vector<Specialization> scanSpecializations(const SelectiveScanArgs& args, const std::string& arch);

}  // namespace ssmjit::detail
