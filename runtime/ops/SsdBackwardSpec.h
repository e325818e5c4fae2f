// The specialisations ssd_backward compiles for a call (the forward's recomputation, then its
// backward kernels, in launch order), for drivers that name the kernels without launching them
// (compile checks, `ssmjit inspect`). They run the op's own checking and binding steps. Internal
// to the runtime; libssmjit.so exports it for the tool and the tests.
#pragma once
#include <string>
#include <vector>

#include "compiler/Specialization.h"
#include "ssmjit/ops.h"

namespace ssmjit::detail {

// Checked as the op checks (every tensor on x's device; the workspace is not needed). Completed.
std::vector<Specialization> ssdBackwardSpecializations(const SsdBackwardArgs& args, const std::string& arch);

}  // namespace ssmjit::detail
