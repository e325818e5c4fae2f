// What the context-parallel ops (SsdContextParallel.cpp, ScanContextParallel.cpp) share: the
// checks of a part, the extras' small buffers, and the exchange of the parts' summaries: forward,
// states passed on in rank order; backward, state adjoints passed back. Internal to the runtime.
#pragma once
#include <cstdint>
#include <functional>
#include <initializer_list>

#include "runtime/ops/ArgCheck.h"
#include "runtime/parallel/CpStateScan.h"
#include "ssmjit/parallel.h"

namespace ssmjit::detail {

// The extras' buffers start at multiples of this many bytes.
constexpr int64_t kCpAlign = 256;
inline int64_t cpAlignUp(int64_t bytes) { return (bytes + kCpAlign - 1) / kCpAlign * kCpAlign; }
// The extras' base when a call is only sized: aligned as an allocation, never dereferenced.
// `which` tells apart the stand-ins of one call's several workspaces, so that they never overlap.
inline char* cpStandInBase(int which = 0) { return reinterpret_cast<char*>(uintptr_t(1 + 2 * which) << 45); }

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

// Views of the extras' bytes, on `device`.
struct CpBuffers {
  char* base;
  int device;
  TensorView at(int64_t byteOffset, DType t, std::initializer_list<int64_t> shape) const {
    return TensorView::contiguous(base + byteOffset, t, shape, DeviceKind::CUDA, device);
  }
};

// A part's summary rows in the extras (byte offsets): its own row (cpRowFloats: its decay, then
// its state), the ranks' rows gathered, and for the backward those rows in reverse rank order and
// G (H * PN).
struct CpRows {
  int64_t row = 0, gathered = 0, reversed = 0, g = 0;
  int64_t H = 0, PN = 0;
  CpDecay decay = CpDecay::PerHead;
  int64_t decayFloats() const { return cpDecayFloats(H, PN, decay); }
};

// Forward: the row's decay copied to `carryDecay` (decayFloats), every rank's row all-gathered,
// and `incoming` (H * PN) = the state after the rows of the ranks before this one.
void passStatesOn(Communicator& comm, const CpBuffers& b, const CpRows& r, void* carryDecay, const TensorView& incoming,
                  Stream stream);
// Backward: the row = [carryDecay | dS_in], dS_in (the gradient of the part's incoming state
// without one of its crossing-out sequence's end state) written by `summary` on a part
// continuing from the previous rank, else 0; every rank's row all-gathered; then, on a part
// continuing into the next, G(r) = a(r+1) G(r+1) + dS_in(r+1) from G(c-1) = 0 at r.g: the
// forward's scan over the rows in reverse rank order.
void passAdjointsBack(Communicator& comm, const ContextPart& p, const CpBuffers& b, const CpRows& r,
                      const void* carryDecay, const std::function<void()>& summary, Stream stream);

}  // namespace ssmjit::detail
