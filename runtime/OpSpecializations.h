// The kernels an op call compiles, named without launching it: what the `ssmjit` tool needs to
// show, compile or pre-compile an op's kernels with no GPU (inspect, prewarm, demo, bench), and
// nothing else. Each function checks the call as the op checks it, with every tensor on the
// device of the call's first tensor, so fake or host addresses can stand in for device buffers
// (only their alignment classes bind), and runs the op's own binding step, so a driver shows the
// kernels the op runs. Specialisations come completed (meta values chosen), in launch order. A
// call the op rejects throws ssmjit::Error(InvalidArgument) with the op's message.
//
// Internal to ssmjit: not installed with the public headers; libssmjit.so exports it for the tool.
// A thin layer over the ops' detail:: functions, so that their bodies can change under it.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "compiler/Specialization.h"
#include "ssmjit/ops.h"

namespace ssmjit::opspec {

// selective_state_update (tokens false) or selective_state_update_tokens: the sizes its argument
// check derives (Mamba-1 is H = G = 1, P = its channel count), and the launch grid of its kernel.
struct SsuSizes {
  bool mamba2 = false;
  int64_t batch = 0, L = 1, slots = 0, H = 1, P = 0, N = 0, G = 1;
};
SsuSizes checkSsu(const SelectiveStateUpdateArgs& args, bool tokens);
Specialization ssu(const SelectiveStateUpdateArgs& args, bool tokens, const std::string& arch);
struct Grid {
  int64_t x = 1, y = 1, z = 1;
};
Grid ssuGrid(const SsuSizes& sizes, int64_t blockP);  // (cdiv(P, BLOCK_P), H, batch)
// The tensors of a selective_state_update call (`Args` const or not), in its kernel's argument
// order: the op binds them in this order.
template <class Args>
auto ssuViews(Args& a) {
  return std::array{&a.state,
                    &a.x,
                    &a.dt,
                    &a.A,
                    &a.B,
                    &a.C,
                    &a.D,
                    &a.z,
                    &a.dt_bias,
                    &a.out,
                    &a.state_batch_indices,
                    &a.dst_state_indices};
}

// With compile_backward, the forward ops' lists go on with the backward's kernels that the first
// call compiles alongside (runtime/ops/BackwardStandIn.h), those already listed left out.

// causal_conv1d: the forward, then the per-sequence kernel when the call launches it.
std::vector<Specialization> conv(const CausalConv1dArgs& args, const std::string& arch);
// causal_conv1d_backward: dx, the per-sequence kernel when launched, the reduction.
std::vector<Specialization> convBackward(const CausalConv1dBackwardArgs& args, const std::string& arch);
Specialization convUpdate(const CausalConv1dUpdateArgs& args, const std::string& arch);

// selective_scan: the states pass when a sequence spans several, then the main pass (the
// workspace is not needed).
std::vector<Specialization> scan(const SelectiveScanArgs& args, const std::string& arch);
// selective_scan_backward: the checkpoint pass, the backward, its sums.
std::vector<Specialization> scanBackward(const SelectiveScanBackwardArgs& args, const std::string& arch);

// ssd: chunk_cumsum, bmm, chunk_state, state_passing, chunk_scan (bmm and chunk_scan only with
// out; the workspace is not needed).
std::vector<Specialization> ssd(const SsdArgs& args, const std::string& arch);
// ssd_backward: the forward's recomputation (states only), then the gradient kernels.
std::vector<Specialization> ssdBackward(const SsdBackwardArgs& args, const std::string& arch);

// embedding: its one kernel.
Specialization embedding(const EmbeddingArgs& args, const std::string& arch);

Specialization decodeStep(const Mamba2DecodeState& state, const Mamba2MixerWeights& weights,
                          const Mamba2DecodeStepArgs& args, const std::string& arch);

}  // namespace ssmjit::opspec
