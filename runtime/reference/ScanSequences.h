// The sequences and state slots of a selective_scan call, read and checked on the host for the
// float64 references of the scan and of its backward. Errors are InvalidArgument, prefixed `op`.
#pragma once
#include <cstdint>
#include <vector>

#include "runtime/ops/SelectiveScanCheck.h"
#include "ssmjit/ops.h"

namespace ssmjit::reference {

// Sequence i: tokens [start[i], start[i] + len[i]) of row row[i]. Dense rows are sequences;
// a packed row's cu_seqlens are checked (0 first, strictly increasing, T last, max_seqlen).
struct ScanSequences {
  std::vector<int64_t> row, start, len;
};
ScanSequences scanSequences(const char* op, const SelectiveScanArgs& a, const detail::ScanDims& d);

// Each of n sequences' slot: idx[i] (in [0, S) or -1), or i without idx.
std::vector<int64_t> scanSlots(const char* op, const char* name, const TensorView& idx, int64_t n, int64_t S);

}  // namespace ssmjit::reference
