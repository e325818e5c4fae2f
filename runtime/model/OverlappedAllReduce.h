// The tensor-parallel layer prefill (mamba2_parallel.h) with its all-reduce overlapped with
// out_proj: the GEMM runs in row pieces on the caller's stream, and each piece's rows are summed
// over the ranks on a side stream while the next piece's GEMM runs. Internal to the runtime.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ssmjit/mamba2_parallel.h"

namespace ssmjit::detail {

// From this many rows on, out_proj goes in kAutoOverlapPieces pieces unless the knob says
// otherwise; below, one all-reduce after the whole GEMM (a piece's all-reduce would be too short
// to hide much, and each costs a launch).
constexpr int64_t kAutoOverlapMinRows = 4096;
constexpr int kAutoOverlapPieces = 4;

struct RowRange {
  int64_t begin = 0, end = 0;
};

// `rows` split into min(pieces, rows) contiguous ranges whose sizes differ by at most one (the
// larger first); none when rows is 0. pieces >= 1.
std::vector<RowRange> rowPieces(int64_t rows, int pieces);

// SSMJIT_TP_OVERLAP_PIECES's value: nullopt when empty (automatic), else the positive integer;
// throws ssmjit::Error(InvalidArgument) naming the variable and what came otherwise.
std::optional<int> parseOverlapPieces(const std::string& value);

// The pieces for `rows` rows: the knob's, else kAutoOverlapPieces from kAutoOverlapMinRows rows
// on and 1 below.
int overlapPieces(std::optional<int> knob, int64_t rows);
// overlapPieces of SSMJIT_TP_OVERLAP_PIECES's value.
int tpOverlapPieces(int64_t rows);

// y = linear(x) summed over the ranks: with pieces > 1 the GEMM in row pieces on `stream`, each
// piece's all-reduce on a side stream that waits for that piece alone; `stream` waits for the
// last before it goes on. With 1 piece: the GEMM, then one all-reduce on `stream`. Capturable in a
// CUDA graph (an event fork and join) once the side stream exists, i.e. after a first eager call.
void linearAllReduced(const LinearArgs& l, Communicator& comm, int pieces, Stream stream);

// mamba2_layer_prefill of one rank's shard (`local` dims) whose out (T, hidden) is summed over the
// ranks: out_proj through linearAllReduced, in the pieces SSMJIT_TP_OVERLAP_PIECES sets.
void mamba2TpLayerPrefill(const Mamba2Dims& local, const Mamba2LayerWeights& w, const Mamba2LayerState& s,
                          const Mamba2LayerArgs& a, Communicator& comm, Stream stream);

}  // namespace ssmjit::detail
