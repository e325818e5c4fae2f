// Where an SSD sequence's states come from and go (Ssd.h): its initial state, its block
// (prefix-cache) states and its final state, with the device checks of their slot indices. One
// thread's elements (p, n) of one head h, under mask m; `reporter` is 0 in exactly one program of
// the sequence, which reports a bad entry. Shared by ssd_state_passing and the chunk_state that
// passes states itself (pass_states), so that both write the same values. Builds DSL code only.
#pragma once
#include <cstdint>

#include "kernels_dsl/Dsl.h"
#include "kernels_dsl/ssd/SsdChunks.h"

namespace ssmjit::kernels {

// Where a head's elements sit in the state tensors' slot `slot` (init, final, blk), and whose
// they are.
struct SsdStateElems {
  dsl::Value h, p, n, m;
};

// Sequence i's initial state (its slot by index, -1 or none: zeros). Reports a bad index.
dsl::Value ssdInitialState(dsl::KernelBuilder& k, const SsdValues& a, const SsdStateElems& e, dsl::Value i,
                           dsl::Value reporter);
// Reports sequence i (len tokens) completing more blocks of block_state_tokens than kmax.
void ssdCheckBlockCount(dsl::KernelBuilder& k, const SsdValues& a, dsl::Value i, dsl::Value len, dsl::Value reporter);
// The state after chunk c of sequence i (len tokens) to its block slot, where the chunk
// completes a block of block_state_tokens. Reports a bad slot index.
void ssdStoreBlockState(dsl::KernelBuilder& k, const SsdValues& a, const SsdStateElems& e, dsl::Value i, dsl::Value c,
                        dsl::Value len, int64_t Q, dsl::Value reporter, dsl::Value state);
// Sequence i's final state to its slot (where the call has final states). Reports a bad index.
void ssdStoreFinalState(dsl::KernelBuilder& k, const SsdValues& a, const SsdStateElems& e, dsl::Value i,
                        dsl::Value reporter, dsl::Value state);

}  // namespace ssmjit::kernels
