// The sequences and state slots of a scan call (selective_scan, ssd), read and checked on the host
// for the float64 references of the scans and of their backwards. Errors are InvalidArgument,
// prefixed `op`.
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

// The same for any scan: nseq dense rows of L tokens, or with `cu` (defined: one packed row of L
// tokens) its nseq + 1 entries; sequences longer than maxSeqlen (when > 0) are refused. `lengthOf`
// names L in messages ("u's seqlen").
ScanSequences readSequences(const char* op, const TensorView& cu, int64_t nseq, int64_t L, int64_t maxSeqlen,
                            const char* lengthOf);

// Each of n sequences' slot: idx[i] (in [0, S) or -1), or i without idx.
std::vector<int64_t> scanSlots(const char* op, const char* name, const TensorView& idx, int64_t n, int64_t S);

}  // namespace ssmjit::reference
