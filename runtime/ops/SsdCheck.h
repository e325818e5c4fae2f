// The argument checks of ssd and ssd_backward (ssmjit/ops.h), shared by the GPU ops and the
// float64 CPU reference so that both accept exactly the same calls. Internal to the runtime.
#pragma once
#include <cstdint>

#include "ssmjit/ops.h"

namespace ssmjit::detail {

// The sizes of one ssd call, as the check derived them.
struct SsdDims {
  int64_t batch = 0;  // Bt: x's batch (1 when packed)
  int64_t L = 0;      // tokens per row (T when packed)
  int64_t H = 0, P = 0, G = 0, N = 0;
  int64_t headsPerGroup = 0;  // H / G: head h reads group h / headsPerGroup
  int64_t chunk = 0;          // chunk_size
  int64_t nseq = 0;           // sequences: batch, or cu_seqlens.size(0) - 1
  bool packed = false;        // cu_seqlens given
  bool dPerChannel = false;   // D is (H, P)
  bool clamp = false;         // dt_max > dt_min
  int64_t initSlots = 0;      // initial_states.size(0) (0 without)
  int64_t finalSlots = 0;     // final_states.size(0) (0 without)
  int64_t blockTokens = 0;    // block_state_tokens K (0: no block states)
  int64_t blockSlots = 0;     // block_states.size(0) (0 without)
  int64_t blocksPerSeq = 0;   // kmax: block_state_indices.size(1) (0 without)
};

// Checks every argument of ssd except `workspace` (ranks, shapes across tensors, H % G, the P
// and N bounds, dtypes, devices, strides >= 0 with unit stride along the last axis of x, z, out,
// B and C, no broadcast axis on per-token tensors and outputs, alignment to the element size,
// chunk_size, packing, the state, block-state and decay options and their consistency, out not
// x or z, y (fp32, only with out, aliasing no input or out), and at least one output unless
// `needOutputs` is false) and returns the sizes. `op` leads every message; every
// tensor must be on `device`. Throws ssmjit::Error(InvalidArgument) naming the argument, the
// expected and the actual value. Reads no tensor data (cu_seqlens' and the slot indices'
// values are checked by the kernel, or by the reference on the CPU).
SsdDims checkSsdArgs(const SsdArgs& args, DeviceKind device, const char* op, bool needOutputs = true);

// ssd_backward's check but for `workspace`: the forward's inputs by the same rules (dout in
// out's place, dfinal_states with forward.final_state_indices in the final states', forward.y,
// which is read where given, as y; the forward's other outputs and block-state options are not
// read, so not checked), then every gradient:
// dx, ddt, dA, dB, dC required; dD, dz, ddt_bias exactly when forward.D, z, dt_bias are given
// (their shapes); dinitial_states only with forward.initial_states (its shape); dtypes as
// ops.h says; unit last-axis stride on dout, dx, dz, dB, dC; no output sharing memory with an
// input (forward.y included) or another output.
SsdDims checkSsdBackwardArgs(const SsdBackwardArgs& args, DeviceKind device, const char* op);

}  // namespace ssmjit::detail
