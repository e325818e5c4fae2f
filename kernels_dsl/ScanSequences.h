// Where a sequence of the selective-scan kernels lies (dense rows, or one packed row with
// cu_seqlens), and its keys in the workspace regions kept per sequence (checkpoints, spans).
// Builds DSL code; no state of its own.
#pragma once
#include <cstdint>

#include "kernels_dsl/Dsl.h"

namespace ssmjit::kernels {

// Sequence i: tokens [start, end) of row `row`. Dense: row i, all of [0, L). Packed: row 0,
// [cu[i], cu[i + 1]) (not checked here).
struct ScanSequence {
  dsl::Value start, end, row;
};
ScanSequence scanSequence(dsl::KernelBuilder& k, dsl::Value hasCu, dsl::Value cu, dsl::Value sCu, dsl::Value L,
                          dsl::Value i);

// The first key of sequence i in a region of `perRow` keys a row, one key for every `unit` tokens
// from the sequence's start: row * perRow + start / unit (+ i when packed: a packed row's
// sequences take up to one key more each than its tokens / unit).
dsl::Value firstScanKey(dsl::KernelBuilder& k, const ScanSequence& s, dsl::Value perRow, int64_t unit,
                        dsl::Value hasCu, dsl::Value i);

}  // namespace ssmjit::kernels
