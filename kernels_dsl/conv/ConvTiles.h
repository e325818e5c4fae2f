// The tiles of the causal-conv1d forward and backward kernels: their shapes, where their tokens
// sit in their sequences (dense rows, one packed row with cu_seqlens, or per-token positions), and
// the per-sequence checks of cu_seqlens and state slots. Builds DSL code; no state of its own.
#pragma once
#include <functional>
#include <initializer_list>
#include <vector>

#include "kernels_dsl/Dsl.h"
#include "kernels_dsl/Registry.h"

namespace ssmjit::kernels {

// BLOCK_D, BLOCK_T, num_warps (and shift_lanes) of a [channels x time] streaming tile, unless set;
// elemBytes: the smallest element of the streamed tensors (smallestElement). Channel-first:
// cfTimeLanes lanes (a power of two <= 32) span a time tile of as many 16-byte vectors, the other
// lanes and the warps go along channels. Channel-last: a time tile of the next power of two >=
// max(4, W) tokens (longer than any shift), clVecBytes of channels a thread; with timeInThread each
// thread holds the whole time tile (shift_lanes 1: the taps are register moves) and the warps'
// lanes all go along channels, else one token a thread.
void chooseConvTiles(Specialization& s, int64_t elemBytes, int64_t cfTimeLanes, int64_t clVecBytes, bool timeInThread);

// Whether cu_seqlens entries i and i + 1 (a, b) break 0 = cu[0] < cu[1] < ... < cu[nseq] = L as
// far as sequence i can tell (also 0 <= a, b <= L: a bad sequence never reaches outside the row,
// so the kernels that skip it read and write nothing out of bounds). The conv and scan kernels' rule.
dsl::Value badCuSeqlensEntry(dsl::Value i, dsl::Value a, dsl::Value b, dsl::Value nseq, dsl::Value L);
// The per-sequence kernels (final states, the backward's state gradients): 1-D channel tiles.
void choosePerSequenceTiles(Specialization& s);
int64_t smallestElement(const Specialization& s, std::initializer_list<const char*> tensors);
// meta:shift_lanes, when set: the lanes along time (dsl::KernelBuilder::setShiftLanes).
void applyConvTileLayout(dsl::KernelBuilder& k, const Specialization& s);

// A streaming program of the forward or the backward: grid axis 0 a block of BD channels, axis 1
// a chunk of time, axis 2 the row. Its channel offsets and mask (1-D, and as 2-D tiles in the
// kernel's orientation), the time range, 0.0 and 0, and its channels' W weight taps and bias (0
// without one) as 2-D tiles.
struct ConvProgram {
  dsl::Value pidD, pidC, row;
  dsl::Value offsD, maskD, dOffs, mD, rT;
  dsl::Value zero, zeroI;
  std::vector<dsl::Value> wk;
  dsl::Value biasT;
};
ConvProgram convProgram(dsl::KernelBuilder& k, int64_t BD, int64_t BT, int64_t W, bool channelLast, dsl::Value D,
                        dsl::Value w, dsl::Value sWd, dsl::Value sWk, dsl::Value bias, dsl::Value sBias,
                        dsl::Value hasBias);

struct ConvPacking {
  dsl::Value cu, pos, sCu, sPos;  // cu_seqlens and positions with their strides
  dsl::Value hasCu, hasPos;       // flags
  dsl::Value nseq, L, row;        // sequences, row length, this program's row
  dsl::Value err, reports;        // the status record; whether this program reports (one per tile)
  int64_t BT, W;                  // time tile, conv width
};

// The sequence holding token t: the largest i with cu[i] <= t (a binary search of `steps`
// halvings over cu, steps >= log2(nseq) + 1), or the row when not packed.
dsl::Value sequenceOf(dsl::KernelBuilder& k, const ConvPacking& p, dsl::Value t, dsl::Value steps);

// The first token of sequence s and of the next one. A dense row is one sequence from 0 whose
// "next start" lies beyond any tile of the row (so that no window test fails at its end).
std::vector<dsl::Value> sequenceBounds(dsl::KernelBuilder& k, const ConvPacking& p, dsl::Value s);

// A tile near a boundary sees one to three sequence starts. The next kNearStarts are loaded
// together, so such a tile pays one load latency instead of one per start (that latency made a
// packed row's boundary tiles cost 2.7x a dense row's).
constexpr int kNearStarts = 4;
// cu[q0 + j], j < kNearStarts (cu[nseq] = T past the last).
std::vector<dsl::Value> nearStarts(dsl::KernelBuilder& k, const ConvPacking& p, dsl::Value q0);
// Folds fn(q, b, carried) over the sequences q in [q0, q1] of a packed row (b = cu[q]), in
// order: the first kNearStarts unrolled from nearStarts(q0) (`near` if at hand), more in a loop.
std::vector<dsl::Value> foldStarts(
    dsl::KernelBuilder& k, const ConvPacking& p, dsl::Value q0, dsl::Value q1, const std::vector<dsl::Value>& inits,
    const std::function<std::vector<dsl::Value>(dsl::Value q, dsl::Value b, const std::vector<dsl::Value>&)>& fn,
    const std::vector<dsl::Value>* near = nullptr);

// Per token of the tile [tt, tt + BT) (tv = tt + range(BT)) whose first token is in sequence
// `seq` = [start, next): its position in its sequence (lp) and its sequence (seqE, 1-D tiles),
// then the sequence of the tile's last token with its bounds (the running state for the next
// tile). With positions, lp is loaded (and checked: 0 at token 0, then 0 or one more than the
// token before; a violation is reported, and the tile computes on regardless) and seqE is 0.
struct TileTokens {
  dsl::Value lp, seqE, seq, start, next;
};
TileTokens tileTokens(dsl::KernelBuilder& k, const ConvPacking& p, dsl::Value tt, dsl::Value tv, dsl::Value seq,
                      dsl::Value start, dsl::Value next);

// The initial conv states a tile reads before its sequences' starts.
struct ConvInitialStates {
  dsl::Value init, idx;            // init[slot, d, k], idx[i]
  dsl::Value sSlot, sD, sK, sIdx;  // strides
  dsl::Value has, hasIdx, nslots;  // flags; slots in init
};

// The taps x[t - s], s = 0..W-1, of a [channels x time] tile `cur` (time along `timeAxis`, its
// channel offsets dOffs / mask mD as 2-D tiles): shifts of cur with the previous tile `prev`.
// With tk (a tile near a sequence start), each place before its token's sequence start reads the
// sequence's initial state (or 0).
std::vector<dsl::Value> convTaps(dsl::KernelBuilder& k, dsl::Value cur, dsl::Value prev, int timeAxis, int64_t W,
                                 const TileTokens* tk, const ConvInitialStates& st, dsl::Value dOffs, dsl::Value mD);

// Per-sequence programs (grid axis 1 = sequence i): sequence i's [start, end) and row, with
// cu_seqlens' entries checked (0 first, increasing, T last; a violation is reported once, by the
// first channel block, and the program returns).
struct SequenceSpan {
  dsl::Value start, end, row;
};
SequenceSpan checkedSequence(dsl::KernelBuilder& k, const ConvPacking& p, dsl::Value i, dsl::Value pidD,
                             dsl::Value err);

// Sequence i's slot in a states tensor: idx[i * stride] (when hasIdx) or i; -1 when the slot is
// outside [0, n) (reported as errCode by the first channel block) or -1.
dsl::Value checkedSlot(dsl::KernelBuilder& k, dsl::Value hasIdx, dsl::Value idx, dsl::Value stride, dsl::Value n,
                       dsl::Value i, dsl::Value pidD, dsl::Value err, long long errCode);

}  // namespace ssmjit::kernels
