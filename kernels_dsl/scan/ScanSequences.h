// Where a sequence of the selective-scan kernels lies (dense rows, or one packed row with
// cu_seqlens), its keys in the workspace regions kept per sequence (checkpoints, spans), and how
// long the spans it is cut into are.
// Builds DSL code; no state of its own.
#pragma once
#include <cstdint>

#include "compiler/Specialization.h"
#include "kernels_dsl/Dsl.h"

namespace ssmjit::kernels {

// Sequence i: tokens [start, end) of row `row`. Dense: row i, all of [0, L). Packed: row 0,
// [cu[i], cu[i + 1]); `bad` when that is not a valid piece of cu_seqlens (badCuSeqlensEntry).
struct ScanSequence {
  dsl::Value start, end, row, bad;
};
ScanSequence scanSequence(dsl::KernelBuilder& k, dsl::Value hasCu, dsl::Value cu, dsl::Value sCu, dsl::Value L,
                          dsl::Value nseq, dsl::Value i);

// The sequence program z of a scan kernel's launch scans (z: its grid axis over sequences). With
// meta:longest_first on a packed row (has_cu), the rank-z sequence by length, longest first, ties
// by index, so that the last programs to start are short ones; rows of more than max(64,
// meta:BLOCK_D) sequences keep their order, and so do dense rows: z itself. Ranking costs each
// program a pass over the row's lengths (the ranked sequences spread over the kernel's channel
// and time-lane axes, meta:BLOCK_D x meta:time_lanes).
dsl::Value programSequence(dsl::KernelBuilder& k, const Specialization& spec, dsl::Value cu, dsl::Value sCu,
                           dsl::Value nseq, dsl::Value z);

// The first key of sequence i in a region of `perRow` keys a row, one key for every `unit` tokens
// from the sequence's start: row * perRow + start / unit (+ i when packed: a packed row's
// sequences take up to one key more each than its tokens / unit).
dsl::Value firstScanKey(dsl::KernelBuilder& k, const ScanSequence& s, dsl::Value perRow, int64_t unit, dsl::Value hasCu,
                        dsl::Value i);

// Whether every tile of BT tokens that a program of the scan kernels walks is whole: a dense call
// (no cu_seqlens) whose row length the bindings prove a multiple of BT (L is bound by its class
// up to 64, SizeUse::TileDiv), cut into spans of a multiple of BT. Such a kernel writes its tile
// body once, without the partial tile's masks: half the code for NVVM to optimise, and fewer
// registers live.
bool scanTilesWhole(const Specialization& spec, int64_t BT);

// The tokens a program of the scan kernels walks serially at D channels (their default
// meta:span): about D / 2.5, a power of two in 256..2048, so that one long sequence's programs
// still fill the GPU a few times over.
int64_t scanSpanForWidth(int64_t D);

// A span no sequence reaches (meta:span): each program walks its sequence whole.
inline constexpr int64_t kScanWholeSequences = int64_t{1} << 24;

}  // namespace ssmjit::kernels
