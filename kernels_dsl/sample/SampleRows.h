// What the sampling kernels share about a row: its key (idx[b], or b; -1: a pad row).
#pragma once
#include "kernels_dsl/Dsl.h"

namespace ssmjit::kernels {

// The key of row b: idx[b] when has_idx, else b. Reads the kernel's has_idx, idx and s_idx_b.
dsl::Value sampleRowKey(dsl::KernelBuilder& k, dsl::Value b);

}  // namespace ssmjit::kernels
