// Where the backward's checkpoint pass, cut into spans, leaves what the fold of its spans reads
// (SelectiveScanBackward.h, launches 1 and 2): from the workspace element aux_base, each span's
// end state and summed dt [span key, N + 1, D] (r = n, then N), then each tile's summed dt since
// its span's start [checkpoint key, D]. Builds DSL offsets; no state of its own.
#pragma once
#include <cstdint>

#include "kernels_dsl/Dsl.h"

namespace ssmjit::kernels {

struct CheckpointSpans {
  dsl::Value base, spanKeys, D;  // spanKeys: every row's span keys (rows x span_keys_per_row)
  int64_t N;
  // Row r (a state, or N: the summed dt) of span key `key`'s end, for channels offsD.
  dsl::Value endAt(dsl::Value key, int64_t r, dsl::Value offsD) const { return base + (key * (N + 1) + r) * D + offsD; }
  // The summed dt from its span's start to the first token of checkpoint key `key`'s tile.
  dsl::Value tileDtAt(dsl::Value key, dsl::Value offsD) const {
    return base + spanKeys * (N + 1) * D + key * D + offsD;
  }
};

}  // namespace ssmjit::kernels
