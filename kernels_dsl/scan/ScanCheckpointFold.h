// The fold of the backward's checkpoint pass in spans (SelectiveScanBackward.h, launch 2):
// grid (cdiv(D, meta:BLOCK_D), (spans - 1) * scanCkptFoldGroups(span, BLOCK_T), nseq). Program (d
// block, (j - 1) * groups + g, sequence i), for span j >= 1 of sequence i: the state entering the
// span, h = span 0's end state, then each later span before j folded in (h = exp(A sum_dt) h +
// its end), as the forward's main pass folds them; then each checkpoint of the span's tiles g
// kScanCkptFoldTiles .. gains exp(A sum_dt) h, sum_dt the tile's summed dt since the span's start
// (CheckpointSpans.h). meta: dstate, span, BLOCK_T (the checkpoints' tile).
#pragma once

#include "kernels_dsl/Signature.h"
#include "kernels_dsl/scan/SelectiveScan.h"

namespace ssmjit::kernels {

namespace scan {
inline constexpr TensorArg kFoldTensors[] = {A, ws, cu};
inline constexpr const char* kFoldStrideOrder[] = {"A", "cu"};
inline constexpr SizeArg kFoldSizes[] = {
    {"D", Bound}, {"L", Div}, {"nseq", Count}, {"ckpt_per_row", Div}, {"span_keys_per_row", Div}, {"aux_base", Div}};
inline constexpr const char* kFoldFlags[] = {"has_cu"};
}  // namespace scan

// Tiles a program of the fold adds to (their loads issued together), and its programs a span.
inline constexpr int64_t kScanCkptFoldTiles = 8;
inline int64_t scanCkptFoldGroups(int64_t span, int64_t blockT) {
  return (span / blockT + kScanCkptFoldTiles - 1) / kScanCkptFoldTiles;
}

inline constexpr dsl::Signature kScanCkptFold{"selective_scan_ckpt_fold", scan::kFoldTensors,    scan::kFoldSizes, {},
                                              scan::kFoldFlags,           scan::kFoldStrideOrder};

}  // namespace ssmjit::kernels
