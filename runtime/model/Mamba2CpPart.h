// Context parallelism's view of one rank's part of the packed row (mamba2_parallel.h): its
// pieces of the sequences ("segments"), how they continue across its edges, and the index arrays
// the layer's calls take. Host-side only; internal to the runtime.
#pragma once
#include <cstdint>
#include <vector>

#include "ssmjit/mamba2_parallel.h"

namespace ssmjit::detail {

struct CpPart {
  int64_t Tr = 0, p0 = 0;  // the part: tokens [p0, p0 + Tr) of the row
  int64_t nloc = 0;        // segments
  // int32, in this order: local cu_seqlens (nloc + 1); each segment's final slot (the sequence's
  // slot where it ends in this part, else -1); the first segment's incoming-state slot (0 when
  // it continues from the previous rank, else -1; -1 for the others: the conv's halo).
  std::vector<int32_t> ints;
  bool firstContinues = false, lastContinues = false;
};

// Rank `rank` of `ranks`' part; throws ssmjit::Error(InvalidArgument) naming hidden, cu_seqlens or
// slots when they do not describe a row of T = ranks x hidden's rows tokens, or a part holds fewer
// than conv width - 1 tokens.
CpPart cpPartOf(const Mamba2Dims& d, const Mamba2CpPrefillArgs& a, int rank, int ranks);

}  // namespace ssmjit::detail
