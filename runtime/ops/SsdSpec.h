// The specialisations ssd compiles for a call (its kernels in launch order), for drivers that
// name the kernels without launching them (compile checks, `ssmjit inspect`). They run the op's
// own checking and binding steps. Internal to the runtime; libssmjit.so exports it for the tool
// and the tests.
#pragma once
#include <string>
#include <vector>

#include "compiler/Specialization.h"
#include "ssmjit/ops.h"

namespace ssmjit::detail {

// The launches of one ssd call: whole; split in two for context parallelism
// (Mamba2ContextParallel.cpp), where a part's final states and decays are needed from a zero start
// before its incoming state is known, and the chunks' states need not be computed twice:
//   Summary (args without out): chunk_cumsum, chunk_state, then state_passing writing only the
//     final states, block states and decays, the chunks' states from zero left in the workspace;
//   Resume (after a Summary with the same x, dt, B, C, dt options, cu_seqlens and workspace; other
//     initial states and outputs): bmm, state_passing from the initial states, chunk_scan.
// Summary then Resume equals one whole call with Resume's arguments, bitwise.
// or, for the backward's recomputation where the forward kept y, States: every launch but
// chunk_scan, leaving the workspace as a whole call does (C.B, the entering states), out unwritten.
enum class SsdPhase { Whole, Summary, Resume, States };
void ssdPhase(const SsdArgs& args, SsdPhase phase, Stream stream);

// Checked as the op checks (every tensor on x's device; the workspace is not needed). Completed.
std::vector<Specialization> ssdSpecializations(const SsdArgs& args, const std::string& arch,
                                               SsdPhase phase = SsdPhase::Whole);

}  // namespace ssmjit::detail
