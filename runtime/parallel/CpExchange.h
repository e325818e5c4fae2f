// What the context-parallel ops (SsdContextParallel.cpp, ScanContextParallel.cpp) share: the
// checks of a part, the extras' small buffers, and the exchange of the parts' summaries: forward,
// states passed on in rank order; backward, state adjoints passed back. Internal to the runtime.
#pragma once
#include <cstdint>

#include "runtime/ops/ArgCheck.h"
#include "runtime/parallel/CpStateScan.h"
#include "ssmjit/parallel.h"

namespace ssmjit::detail {

// The extras' buffers start at multiples of this many bytes.
constexpr int64_t kCpAlign = 256;
inline int64_t cpAlignUp(int64_t bytes) { return (bytes + kCpAlign - 1) / kCpAlign * kCpAlign; }

// What every context-parallel op asks of a part: a rank of `ranks`; batch 1 (`batch`, tensor
// `tensor`'s); from_previous not on rank 0, to_next not on the last rank; no initial states with
// from_previous (the first sequence starts from the incoming state, the others from zero).
void checkContextPart(const Checker& c, const char* tensor, int64_t batch, const ContextPart& p,
                      bool initialStatesGiven, int rank, int ranks);
// `t` is given, fp32, of shape `e` and contiguous.
void checkContiguousF32(const Checker& c, const char* name, const TensorView& t, const Dim* e, int n);

// The part's slot indices, int32 at `at` (on the device): [the sequences' initial slots (nseq) |
// their final slots (nseq)], all -1 but slot 0 for the first sequence when it continues from the
// previous rank and for the last when it continues into the next.
int64_t cpSlotBytes(int64_t nseq);
void uploadPartSlots(void* at, int64_t nseq, const ContextPart& p, Stream stream, const char* op);

// The op's own workspace: what follows the extras' `extrasBytes` in `workspace`.
TensorView afterExtras(const TensorView& workspace, int64_t extrasBytes);
void zeroFloats(void* at, int64_t n, Stream stream);
void copyFloats(void* dst, const void* src, int64_t n, Stream stream);

// Forward: every rank's summary `row` (cpRowFloats(H, PN, decay): its decay, then its end state)
// all-gathered into `gathered` (ranks rows), and `incoming` (H * PN) = the state after the rows of
// the ranks before this one.
void passStatesOn(Communicator& comm, const TensorView& row, void* gathered, int64_t H, int64_t PN, CpDecay decay,
                  const TensorView& incoming, Stream stream);
// Backward: every rank's `row` (its decay, then the gradient of its incoming state without one of
// its crossing-out sequence's end state) all-gathered into `gathered`; then, when `G` is given,
// G(r) = a(r+1) G(r+1) + dS_in(r+1) from G(c-1) = 0, the forward's scan over the rows in reverse
// rank order (copied to `reversed`, ranks rows).
void passAdjointsBack(Communicator& comm, const TensorView& row, void* gathered, void* reversed, int64_t H, int64_t PN,
                      CpDecay decay, const TensorView& G, Stream stream);

}  // namespace ssmjit::detail
