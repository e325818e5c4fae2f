// Loads of a whole time tile of a packed row, whose first token may lie anywhere. A thread holds
// a run of `run` consecutive tokens; unaligned, each run would load element by element. Instead
// the tile's aligned runs from a0 = ts - ts % run are loaded as vectors, with the first run after
// them (by the tile's first-run lanes only), and moved along time by sh = ts % run places
// (shuffles between the lanes). sh is the program's, so the move is one uniform branch of `run`.
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
  PackedRuns(dsl::KernelBuilder& k, dsl::Value ts, int64_t BT, int64_t run);
  // Queues p[base + a0 + t] for the tile's t in [0, BT + run): base [R, 1]; mask [R, BT] or none.
  void load(dsl::Value p, dsl::Value base, dsl::Value mask = {});
  // The queued tiles as p[base + ts + t], t in [0, BT), in the order they were queued.
  std::vector<dsl::Value> realign() const;

 private:
  dsl::KernelBuilder& k_;
  int64_t BT_, run_;
  dsl::Value a0_, sh_;
  std::vector<dsl::Value> cur_, fill_;
};

}  // namespace ssmjit::kernels
