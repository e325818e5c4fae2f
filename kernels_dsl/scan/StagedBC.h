// Time-varying B and C rows of the selective-scan kernels are the same for every channel of a
// block whose channels share one group: staged through shared memory once per time tile (one load
// and conversion per element for the program, read back as f32 broadcasts) instead of each thread
// fetching and converting its own. Used by the forward and the backward; builds DSL code.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels_dsl/Dsl.h"
#include "kernels_dsl/scan/PackedRuns.h"

namespace ssmjit::kernels {

class StagedBC {
 public:
  // A (row, group, n, token) tensor of B or C: its pointer and strides (the token's is 1).
  struct Source {
    dsl::Value ptr, sRow, sGroup, sN;
  };
  // Whether `sets` row sets (B, C or both) of N rows fit one shared buffer at BT tokens a tile.
  static bool fits(int64_t N, int64_t BT, int64_t sets);
  // The buffer for B's N rows (stageB) and then C's (stageC) of row `row`; g0: the block's group.
  StagedBC(dsl::KernelBuilder& k, int64_t N, int64_t BD, int64_t BT, bool stageB, bool stageC, dsl::Value g0,
           dsl::Value row, Source b, Source c);
  bool any() const { return stageB_ || stageC_; }
  // Queues the tile's staged rows on `runs` (B's, then C's), for a packed row's tile.
  void queue(PackedRuns& runs) const;
  // The tile's staged rows (B's, then C's) loaded from the token offsets tOff ([1, BT]; runs need
  // not be aligned), masked by tokMask ([1, BT] or none): what fill() stores.
  std::vector<dsl::Value> load(dsl::Value tokMask, dsl::Value tOff) const;
  // Fills the buffer with the tile's rows between two barriers (the previous tile's reads are done
  // before it, the rows visible after): `queued`, what queue() or load() loaded (realigned); or,
  // when empty, loaded here (load()).
  void fill(const std::vector<dsl::Value>& queued, dsl::Value tokMask, dsl::Value tOff);
  // State n's staged row of B or C as a [BD, BT] tile; n a constant, or a [BD, 1] tile (each thread
  // its own state's row).
  dsl::Value row(int64_t n, bool c) const;
  dsl::Value row(dsl::Value n, bool c) const;

 private:
  // [RS, 1]: the offsets of the group's rows of `s` at token 0.
  dsl::Value base(const Source& s) const;
  void store(dsl::Value v, bool c);

  dsl::KernelBuilder& k_;
  int64_t N_, BD_, BT_, RS_, rowStride_, rowC_;
  bool stageB_, stageC_;
  dsl::Value smem_, padT_, rS_, rowMask_, g0_, row_;
  Source b_, c_;
};

}  // namespace ssmjit::kernels
