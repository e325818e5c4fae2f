// Where a sequence of the selective-scan kernels lies (dense rows, or one packed row with
// cu_seqlens), its keys in the workspace regions kept per sequence (checkpoints, spans), and how
// long the spans it is cut into are.
// Builds DSL code; no state of its own.
#pragma once
#include <cstdint>

#include "kernels_dsl/Dsl.h"

namespace ssmjit::kernels {

// Sequence i: tokens [start, end) of row `row`. Dense: row i, all of [0, L). Packed: row 0,
// [cu[i], cu[i + 1]); `bad` when that is not a valid piece of cu_seqlens (badCuSeqlensEntry).
struct ScanSequence {
  dsl::Value start, end, row, bad;
};
ScanSequence scanSequence(dsl::KernelBuilder& k, dsl::Value hasCu, dsl::Value cu, dsl::Value sCu, dsl::Value L,
                          dsl::Value nseq, dsl::Value i);

// The sequence that program z of a packed row's launch scans when the longest go first (so that
// the last programs to start are short ones): the rank-z sequence by length, longest first, ties
// by index. Rows of more than `ranked` sequences (a power of two, at least the threads along the
// kernel's channel axis) keep their order (z itself): ranking costs each program a pass over the
// row's lengths. `lanes`: the threads along the kernel's time axis.
dsl::Value sequenceAtRank(dsl::KernelBuilder& k, dsl::Value cu, dsl::Value sCu, dsl::Value nseq, dsl::Value z,
                          int64_t ranked, int64_t lanes);

// The first key of sequence i in a region of `perRow` keys a row, one key for every `unit` tokens
// from the sequence's start: row * perRow + start / unit (+ i when packed: a packed row's
// sequences take up to one key more each than its tokens / unit).
dsl::Value firstScanKey(dsl::KernelBuilder& k, const ScanSequence& s, dsl::Value perRow, int64_t unit,
                        dsl::Value hasCu, dsl::Value i);

// The tokens a program of the scan kernels walks serially at D channels (their default
// meta:span): about D / 2.5, a power of two in 256..2048, so that one long sequence's programs
// still fill the GPU a few times over.
int64_t scanSpanForWidth(int64_t D);

}  // namespace ssmjit::kernels
