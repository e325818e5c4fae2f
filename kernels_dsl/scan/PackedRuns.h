// Loads of a whole time tile of a packed row, whose first token may lie anywhere. A thread holds
// a run of `run` consecutive tokens; unaligned, each run would load element by element. Instead
// each thread loads the aligned run from a0 + its place (a0 = ts - ts % run) and the run after
// it, as vectors, and takes its tokens from the two by register moves (a shift of period `run`
// by sh = ts % run places). sh is the program's, so the move is one uniform branch of `run`;
// the run after is the next lane's (an L1 hit), which costs less than shuffling it over.
// Rows whose strides keep no common alignment (an odd row length: channel d's row starts at d L)
// take `perRow` runs: each row aligned on its own address, and its tokens moved by its own sh in
// log2(run) selects of a barrel shifter, which cost less than loading element by element.
// Used by the selective-scan forward and backward; builds DSL code, no state of its own beyond
// the queued loads.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels_dsl/Dsl.h"

namespace ssmjit::kernels {

class PackedRuns {
 public:
  // A tile of BT tokens from token ts of the row (ts >= 0; the loads reach token a0 + BT + run - 1).
  // With rowEnd (the row's length), tokens at or past it read as 0, as those of masked loads do.
  // perRow: the runs aligned on each row's address, ts - run + 1 .. ts + BT + run - 1 in the
  // row (ts >= run - 1; no rowEnd).
  PackedRuns(dsl::KernelBuilder& k, dsl::Value ts, int64_t BT, int64_t run, dsl::Value rowEnd = {},
             bool perRow = false);
  // Queues p[base + a0 + t] for the tile's t in [0, BT + run): base [R, 1]; mask [R, BT] or none.
  void load(dsl::Value p, dsl::Value base, dsl::Value mask = {});
  // The queued tiles as p[base + ts + t], t in [0, BT), in the order they were queued.
  std::vector<dsl::Value> realign() const;

 private:
  dsl::KernelBuilder& k_;
  int64_t BT_, run_;
  bool perRow_;
  dsl::Value ts_, a0_, sh_, rowEnd_;
  std::vector<dsl::Value> cur_, next_, rowSh_;
};

}  // namespace ssmjit::kernels
