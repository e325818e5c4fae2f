// How the RMSNorm kernels (forward and backward) tile a group of channels: one row a program for
// long rows, several rows a program for short ones, the channels in `chunks` power-of-two tiles
// held in registers. Shared so that both passes agree on the layout of a row.
#pragma once
#include <cstdint>
#include <initializer_list>

#include "compiler/Specialization.h"

namespace ssmjit::kernels {

// Sets meta:BLOCK_G, chunks, inner_lanes, num_warps, BLOCK_T and index_bits (each unless bound),
// for rows of group_size channels whose narrowest row tensor is among `rowTensors` (flags
// "has_<name>" gate the optional ones), holding at most maxPerThread row elements a thread in
// fp32 registers. `op` names the kernel in errors about bound meta values.
void chooseNormTiles(Specialization& s, std::initializer_list<const char*> rowTensors, int64_t maxPerThread,
                     const char* op);

}  // namespace ssmjit::kernels
