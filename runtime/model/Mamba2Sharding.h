// Tensor parallelism for a Mamba-2 layer: which rows and columns of each checkpoint tensor rank r
// of t holds. Heads and groups are split together, so that no B/C group and no gated-norm group
// crosses ranks (G % t == 0 and H % t == 0; H % G == 0 then keeps each head with its group):
//   in_proj rows [z | x | B | C | dt]: rank r's heads' z and x rows, its groups' B and C rows,
//     its heads' dt row; the local in_proj is those five pieces in that order, which is the
//     in_proj of a layer of H/t heads and G/t groups.
//   conv1d weight and bias: the x, B, C channels the same way (three pieces).
//   dt_bias, A_log, D (H): rank r's heads; D (H*P) and the gated norm's weight: its channels.
//   out_proj: its d_inner columns; out_proj's bias on rank 0 only (the all-reduce sums the ranks).
// Internal to the runtime (the model loads its shard with it; the tests shard their layers).
#pragma once
#include <cstdint>
#include <vector>

#include "ssmjit/mamba2.h"

namespace ssmjit::model {

struct RowRange {
  int64_t start = 0, count = 0;
};
// Pieces of a tensor along `axis`, concatenated in order.
struct TensorSlice {
  int axis = 0;
  std::vector<RowRange> ranges;
  int64_t size() const;
};

struct Mamba2LayerShard {
  int rank = 0, ranks = 1;
  Mamba2Dims local;       // H/t heads, G/t groups, the rest as the full layer
  TensorSlice inProj;     // in_proj weight and bias, axis 0
  TensorSlice conv;       // conv1d weight and bias, axis 0
  TensorSlice heads;      // dt_bias, A_log, D of (H,)
  TensorSlice channels;   // D of (H*P,), the gated norm's weight: axis 0
  TensorSlice outProj;    // out_proj weight, axis 1
  bool outProjBias = true;  // whether this rank adds out_proj's bias
};

// Rank `rank` of `ranks`' shard of a layer of `full` dims. Throws ssmjit::Error(InvalidArgument)
// naming G, H and t when the groups or heads do not split evenly.
Mamba2LayerShard planMamba2Shard(const Mamba2Dims& full, int rank, int ranks);

// The elements of `src` (a CPU view, any float dtype and strides) that `slice` selects, as a
// contiguous array of `dtype` in `out` (bytes); each value through `map` when given (A = -exp(A_log)).
// Returns the slice's shape.
std::vector<int64_t> sliceTensor(const TensorView& src, const TensorSlice& slice, DType dtype, std::vector<char>& out,
                                 double (*map)(double) = nullptr);

}  // namespace ssmjit::model
