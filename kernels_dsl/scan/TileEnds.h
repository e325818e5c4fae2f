// The carry a time tile of the selective scan's recurrences leaves, without the per-token values:
// what the states pass, the checkpoint pass and the backward's adjoint pass keep of a tile. With
// a_t = exp2(dt_t A2) and the tile's tokens t along axis 1 of [channels, BT] tiles:
//   forward  h_t = a_t h_{t-1} + b_t:          h_end   = exp2(A2 sum dt) h_in + sum_t b_t exp2(A2 sum_{s>t} dt_s)
//   reverse  s_t = a_t (c_t + s_{t+1}):        s_first = exp2(A2 sum dt) s_in + sum_t c_t exp2(A2 sum_{s<=t} dt_s)
// One scan of dt is shared by every state, then one exp2 a token and state and a sum along time:
// about half the instructions of scanning (a, b) pairs per state, which only the passes that need
// every token's value pay. Builds DSL code; used by the forward and the backward.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "kernels_dsl/Dsl.h"

namespace ssmjit::kernels {

struct TileEnds {
  std::vector<dsl::Value> carries;  // per state, [channels]
  dsl::Value dtSum;                 // the tile's sum of dt, [channels]
};

// dt: [channels, BT], zero past the sequence (a = 1, no term). A2[n] and carries[n]: [channels].
// term(n): b (forward) or c (reverse) of state n, [channels, BT].
TileEnds scanTileEnds(dsl::KernelBuilder& k, dsl::Value dt, const std::vector<dsl::Value>& A2,
                      const std::vector<dsl::Value>& carries, const std::function<dsl::Value(int64_t)>& term,
                      bool reverse);

}  // namespace ssmjit::kernels
