// The gradient of the state entering a context-parallel part of the Mamba-1 scan, on the device
// (kernels_dsl/parallel/ScanCpStateGrad.h). Internal to the runtime.
#pragma once
#include <cstdint>
#include <string>

#include "compiler/Specialization.h"
#include "ssmjit/ops.h"

namespace ssmjit::detail {

// out ((D, N) fp32, contiguous) = the gradient of the state entering the first sequence of row 0
// of args.forward's call, for args.dout and (where given, at that sequence's final-state slot)
// args.dfinal_states: what selective_scan_backward writes as that sequence's dinitial_states,
// without the rest of the backward. args as checked by selective_scan_backward; `workspace`
// (fp32, contiguous, on the device) holds at least scanCpStateGradWorkspaceFloats(args) floats:
// the chunks' sums of dt' and their partial gradients (contents on entry do not matter).
int64_t scanCpStateGradWorkspaceFloats(const SelectiveScanBackwardArgs& args);
void scanCpStateGrad(const SelectiveScanBackwardArgs& args, const TensorView& out, const TensorView& workspace,
                     Stream stream);
// The kernels such a call runs on `arch` after the chunks' sums (ScanCpDtSums.h), no GPU needed:
// the chunks' partial gradients, then their sum.
Specialization scanCpStateGradSpecialization(const SelectiveScanBackwardArgs& args, const TensorView& workspace,
                                             const std::string& arch);
Specialization scanCpStateGradSumSpecialization(const SelectiveScanBackwardArgs& args, const TensorView& out,
                                                const TensorView& workspace, const std::string& arch);

}  // namespace ssmjit::detail
