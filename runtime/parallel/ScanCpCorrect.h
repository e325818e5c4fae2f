// The Mamba-1 scan's correction of a context-parallel part, on the device (kernels_dsl/parallel/
// ScanCpCorrect.h). Internal to the runtime.
#pragma once
#include <string>

#include "compiler/Specialization.h"
#include "ssmjit/ops.h"

namespace ssmjit::detail {

// args.out += the share of `incoming` ((D, N) fp32, contiguous: the state entering the first
// sequence of row 0) in that sequence's outputs, which args' call computed from a zero state; so
// does that sequence's final state where args writes one. args as checked by selective_scan; its
// workspace holds at least scanCpCorrectWorkspaceFloats(args) floats (the sums of dt' over the
// sequence's chunks; contents on entry do not matter).
int64_t scanCpCorrectWorkspaceFloats(const SelectiveScanArgs& args);
void scanCpCorrect(const SelectiveScanArgs& args, const TensorView& incoming, Stream stream);
// The correction's kernel on `arch` (no GPU needed; the chunks' sums before it: ScanCpDtSums.h).
Specialization scanCpCorrectSpecialization(const SelectiveScanArgs& args, const TensorView& incoming,
                                           const std::string& arch);

}  // namespace ssmjit::detail
