// The state entering a rank under context parallelism, on the device (kernels_dsl/parallel/
// CpStateScan.h): from the ranks' (decay, end state) summaries, in fp32 and rank order. Internal
// to the runtime.
#pragma once
#include <cstdint>
#include <string>

#include "compiler/Specialization.h"

#include "ssmjit/ops.h"

namespace ssmjit::detail {

// How a summary row holds its decay: one a head, [a (H) | b (H, PN)] (the SSD's), or one a state,
// [a (H, PN) | b (H, PN)] (the Mamba-1 scan's).
enum class CpDecay { PerHead, PerState };
// The floats of a summary row's decay, and of the whole row.
int64_t cpDecayFloats(int64_t H, int64_t PN, CpDecay decay);
int64_t cpRowFloats(int64_t H, int64_t PN, CpDecay decay);

// summaries: (ranks_total, cpRowFloats) fp32 rows [a | b]; out (H * PN) fp32 = the state after
// the first `ranks` rows: s = a_q s + b_q from s = 0 (zeros for ranks == 0).
void cpStateScan(const TensorView& summaries, int64_t ranks, int64_t H, int64_t PN, CpDecay decay,
                 const TensorView& out, Stream stream);
// The kernel such a call runs on `arch` (no GPU needed).
Specialization cpStateScanSpecialization(const TensorView& summaries, int64_t ranks, int64_t H, int64_t PN,
                                         CpDecay decay, const TensorView& out, const std::string& arch);

}  // namespace ssmjit::detail
