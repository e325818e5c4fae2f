// What the runtime uses of ssd_backward beyond the op: the specialisations it compiles for a call
// (the forward's recomputation, then its backward kernels, in launch order), for drivers that
// name the kernels without launching them (compile checks, `ssmjit inspect`), and the gradient of
// the initial states alone (context parallelism's summary of a part's backward). Both run the
// op's own checking and binding steps. Internal to the runtime; libssmjit.so exports it for the
// tool and the tests.
#pragma once
#include <string>
#include <vector>

#include "compiler/Specialization.h"
#include "ssmjit/ops.h"

namespace ssmjit::detail {

// Checked as the op checks (every tensor on x's device; the workspace is not needed). Completed.
std::vector<Specialization> ssdBackwardSpecializations(const SsdBackwardArgs& args, const std::string& arch);

// args.dinitial_states (required) as ssd_backward writes it, and nothing else: the forward's chunk
// states recomputed (not y) and the states' gradients passed back along the chunks, without the
// token kernels. args.workspace as ssd_backward's (ssd_backward_workspace_size).
void ssdBackwardInitialStateGradient(const SsdBackwardArgs& args, Stream stream);

}  // namespace ssmjit::detail
