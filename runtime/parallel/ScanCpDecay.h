// The Mamba-1 scan's decay over a context-parallel part, on the device (kernels_dsl/parallel/
// ScanCpDecay.h). Internal to the runtime.
#pragma once
#include <string>

#include "compiler/Specialization.h"
#include "ssmjit/ops.h"

namespace ssmjit::detail {

// out (D, N) fp32, contiguous = exp(A sum_t dt') over the tokens of args' row 0 (one sequence):
// what the part multiplies the state it is handed by. args as checked by selective_scan.
void scanCpDecay(const SelectiveScanArgs& args, const TensorView& out, Stream stream);
// The kernel such a call runs on `arch` (no GPU needed).
Specialization scanCpDecaySpecialization(const SelectiveScanArgs& args, const TensorView& out, const std::string& arch);

}  // namespace ssmjit::detail
