// The argument check of selective_scan, shared by the GPU op and the float64 CPU reference so
// that both accept exactly the same calls. Internal to the runtime.
#pragma once
#include <cstdint>
#include <string>

#include "ssmjit/ops.h"

namespace ssmjit::detail {

// The sizes of one selective_scan call, as the check derived them.
struct ScanDims {
  int64_t batch = 0;  // u's batch (1 when packed)
  int64_t D = 0, L = 0, N = 0;
  int64_t G = 1;           // groups of the time-varying B/C (1 when both are constant)
  bool bVarying = false;   // B is (Bt, G, N, L)
  bool cVarying = false;   // C is (Bt, G, N, L)
  int64_t nseq = 0;        // sequences: batch, or cu_seqlens.size(0) - 1
  bool packed = false;     // cu_seqlens given
  int64_t maxLen = 0;      // the longest a sequence can be: max_seqlen (at most L) when given, else L
  int64_t initSlots = 0;   // initial_states.size(0) (0 without)
  int64_t finalSlots = 0;  // final_states.size(0) (0 without)
};

// Checks every argument of selective_scan except `workspace` (ranks, shapes across tensors,
// dtypes, devices, strides >= 0, unit token stride on u/delta/z/out and time-varying B/C, no
// broadcast axis on out and the states, alignment to the element size, out distinct from u,
// delta and z, the packing and state options and their consistency, max_seqlen >= 0) and
// returns the sizes. `op` leads every message; every tensor must be on `device`. Throws
// ssmjit::Error(InvalidArgument) naming the argument, the expected and the actual value. Reads
// no tensor data (cu_seqlens' values are checked by the kernel, or by the reference).
// `names`: what the messages call out and the final states (the backward checks its dout and
// dfinal_states through this same check).
struct ScanCheckNames {
  const char* out = "out";
  const char* final = "final_states";
  const char* finalIdx = "final_state_indices";
};
ScanDims checkSelectiveScanArgs(const SelectiveScanArgs& args, DeviceKind device, const char* op,
                                const ScanCheckNames& names = {});

// selective_scan_backward's check (ssmjit/ops.h): the forward's (dout as out, dfinal_states as
// the final states), then every gradient's shape, dtype, device, strides and presence (exactly
// those of the inputs given), and no output sharing memory with an input or another output.
ScanDims checkSelectiveScanBackwardArgs(const SelectiveScanBackwardArgs& args, DeviceKind device, const char* op);

}  // namespace ssmjit::detail
