// The Mamba-1 scan's context parallelism (ssmjit/scan_parallel.h): its checks and sizes on rank
// `rank` of `ranks`, without a device or a communicator. Internal to the runtime; libssmjit.so
// exports it for the tests.
#pragma once
#include <cstdint>

#include "ssmjit/scan_parallel.h"

namespace ssmjit::detail {

// The extras' size in bytes (a multiple of 256) for a part of `nseq` sequences of D x N states.
int64_t scanCpExtrasBytes(int64_t nseq, int64_t DN, int ranks, bool backward);

// The workspace in float32 elements, extras included (every argument checked but the carry and
// the workspace), and the whole check of a call.
int64_t scanCpWorkspaceFloats(const SelectiveScanArgs& args, const ContextPart& part, int rank, int ranks);
int64_t scanCpBackwardWorkspaceFloats(const SelectiveScanBackwardArgs& args, const ContextPart& part, int rank,
                                      int ranks);
void checkScanCp(const SelectiveScanArgs& args, const ContextPart& part, const ScanCpCarry& carry, int rank, int ranks);
void checkScanCpBackward(const SelectiveScanBackwardArgs& args, const ContextPart& part, const ScanCpCarry& carry,
                         int rank, int ranks);

}  // namespace ssmjit::detail
