// Time-varying B and C rows of the selective-scan kernels are the same for every channel of a
// block whose channels share one group: staged through shared memory once per time tile (one load
// and conversion per element for the program, read back as f32 broadcasts) instead of each thread
// fetching and converting its own. Used by the forward and the backward; builds DSL code.
#pragma once
#include <cstdint>

#include "kernels_dsl/Dsl.h"

namespace ssmjit::kernels {

class StagedBC {
 public:
  // Whether `sets` row sets (B, C or both) of N rows fit one shared buffer at BT tokens a tile.
  static bool fits(int64_t N, int64_t BT, int64_t sets);
  // The buffer for B's N rows (stageB) and then C's (stageC); g0: the block's group.
  StagedBC(dsl::KernelBuilder& k, int64_t N, int64_t BD, int64_t BT, bool stageB, bool stageC, dsl::Value g0);
  bool any() const { return stageB_ || stageC_; }
  // [RS, 1]: the offsets of the group's rows of a (row, group, n, token) tensor at token 0.
  dsl::Value base(dsl::Value row, dsl::Value sB, dsl::Value sG, dsl::Value sN) const;
  // [RS, BT] mask of the rows that exist (RS > N), or none.
  dsl::Value rowMask() const { return rowMask_; }
  // Stores the tile's rows v [RS, BT] of B or C.
  void store(dsl::Value v, bool c);
  // Loads the tile's rows of p from base + tOff ([1, BT]; runs need not be aligned), masked by
  // tokMask ([1, BT] or none), and stores them.
  void stage(dsl::Value p, dsl::Value base, bool c, dsl::Value tokMask, dsl::Value tOff);
  // State n's staged row of B or C as a [BD, BT] tile.
  dsl::Value row(int64_t n, bool c) const;

 private:
  dsl::KernelBuilder& k_;
  int64_t N_, BD_, BT_, RS_, rowStride_, rowC_;
  bool stageB_, stageC_;
  dsl::Value smem_, padT_, rS_, rowMask_, g0_;
};

}  // namespace ssmjit::kernels
