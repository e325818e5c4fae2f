// The state entering a rank under context parallelism, on the device (kernels_dsl/parallel/
// CpStateScan.h): from the ranks' (decay, end state) summaries, in fp32 and rank order. Internal
// to the runtime.
#pragma once
#include <cstdint>
#include <string>

#include "compiler/Specialization.h"

#include "ssmjit/ops.h"

namespace ssmjit::detail {

// summaries: (ranks_total, H + H * PN) fp32 rows [a | b]; out (H * PN) fp32 = the state after the
// first `ranks` rows: s = a_q s + b_q from s = 0 (zeros for ranks == 0).
void cpStateScan(const TensorView& summaries, int64_t ranks, int64_t H, int64_t PN, const TensorView& out,
                 Stream stream);
// The kernel such a call runs on `arch` (no GPU needed).
Specialization cpStateScanSpecialization(const TensorView& summaries, int64_t ranks, int64_t H, int64_t PN,
                                         const TensorView& out, const std::string& arch);

}  // namespace ssmjit::detail
