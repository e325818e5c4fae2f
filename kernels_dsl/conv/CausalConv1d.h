// The causal-conv1d kernels' contract with their ops: argument names and meaning. Three kernels:
//   causal_conv1d_fwd          out = act(bias + conv(x)) over dense rows or one packed row.
//                              Grid (cdiv(D, BLOCK_D), cdiv(L, BLOCK_T * meta:tiles), rows).
//   causal_conv1d_final_state  per sequence: check its cu_seqlens entries, write its final conv
//                              state. Grid (cdiv(D, BLOCK_D), nseq). Launched after the forward
//                              (its writes may overwrite the slots the forward reads).
//   causal_conv1d_update       decode: L tokens per sequence against its conv state.
//                              Grid (cdiv(D, BLOCK_D), batch).
// Strides are in elements; kernels index x[b, t, d] by (s_x_b, s_x_t, s_x_d) whatever the
// memory order; meta:channel_last picks the tile orientation (time or channels fastest).
#pragma once
#include <cstdint>

#include "kernels_dsl/Signature.h"

namespace ssmjit::kernels {

namespace conv {
using namespace dsl::decl;
// The tensors the kernels share. x and its companions are indexed [b, t, d] whatever the memory
// order (meta:channel_last picks the tile orientation: time or channels fastest).
inline constexpr TensorArg x{"x", F, {"b", "t", "d"}}, weight{"weight", F, {"d", "k"}, "w"}, bias{"bias", F, {"d"}},
    out{"out", F, {"b", "t", "d"}}, dout{"dout", F, {"b", "t", "d"}, "dy"}, dx{"dx", F, {"b", "t", "d"}},
    init{"init", F, {"slot", "d", "k"}}, final{"final", F, {"slot", "d", "k"}}, ws{"ws", F, {}},
    cu{"cu", I, {""}, nullptr, M}, pos{"pos", I, {"t"}, nullptr, M}, initIdx{"init_idx", I, {""}, nullptr, M},
    finalIdx{"final_idx", I, {""}, nullptr, M}, err{"err", I, {}, nullptr, M};

// causal_conv1d_fwd. The width W is meta:width (it shapes the code). nslots: init's slots;
// search_steps >= log2(nseq) + 1 (the binary search over cu).
inline constexpr TensorArg kFwdTensors[] = {x, weight, bias, out, init, cu, pos, initIdx, err};
inline constexpr SizeArg kFwdSizes[] = {
    {"D", Bound}, {"L", Div}, {"nseq", Count}, {"nslots", Count}, {"search_steps", Count}};
inline constexpr const char* kFwdFlags[] = {"has_bias", "silu", "has_cu", "has_pos", "has_init", "has_init_idx"};

// causal_conv1d_final_state. Without has_final the kernel only checks cu and the initial slots.
inline constexpr TensorArg kFinalTensors[] = {x, init, final, cu, initIdx, finalIdx, err};
inline constexpr SizeArg kFinalSizes[] = {
    {"D", Bound}, {"L", Div}, {"nseq", Count}, {"nslots_init", Count}, {"nslots_final", Count}};
inline constexpr const char* kFinalFlags[] = {"has_cu", "has_init", "has_init_idx", "has_final", "has_final_idx"};

// causal_conv1d_update: state[slot, d, k], state_idx[b].
inline constexpr TensorArg kUpdateTensors[] = {{"state", F, {"slot", "d", "k"}},  x,  weight, bias, out,
                                               {"state_idx", I, {"b"}, "idx", M}, err};
inline constexpr SizeArg kUpdateSizes[] = {{"D", Bound}, {"L", Bound}, {"batch", Count}, {"nslots", Count}};
inline constexpr const char* kUpdateFlags[] = {"has_bias", "silu", "has_state_idx", "commit"};

// causal_conv1d_bwd: `tiles` time tiles a program, nchunks programs a row.
inline constexpr TensorArg kBwdTensors[] = {x, weight, bias, dout, dx, init, ws, cu, pos, initIdx, err};
inline constexpr SizeArg kBwdSizes[] = {
    {"D", Bound},   {"L", Div},      {"nseq", Count}, {"nslots", Count}, {"search_steps", Count},
    {"tiles", Div}, {"nchunks", Div}};

// causal_conv1d_bwd_reduce. partials = rows * nchunks.
inline constexpr TensorArg kReduceTensors[] = {ws, {"dweight", F, {"d", "k"}, "dw"}, {"dbias", F, {"d"}, "db"}};
inline constexpr SizeArg kReduceSizes[] = {{"D", Bound}, {"partials", Div}};
inline constexpr const char* kReduceFlags[] = {"has_dbias"};

// causal_conv1d_bwd_states. dinit[slot] is written for each sequence with an initial slot (when
// has_dinit); dfinal[slot] (final_idx, or i) is added to dx / dinit (when has_dfinal).
inline constexpr TensorArg kStatesTensors[] = {
    x,  weight,  bias,     dout, dx, init, {"dinit", F, {"slot", "d", "k"}}, {"dfinal", F, {"slot", "d", "k"}},
    cu, initIdx, finalIdx, err};
inline constexpr const char* kStatesFlags[] = {"has_bias",     "silu",      "has_cu",     "has_init",
                                               "has_init_idx", "has_dinit", "has_dfinal", "has_final_idx"};
}  // namespace conv

inline constexpr dsl::Signature kConvFwd{"causal_conv1d_fwd", conv::kFwdTensors, conv::kFwdSizes, {}, conv::kFwdFlags};
inline constexpr dsl::Signature kConvFinalState{
    "causal_conv1d_final_state", conv::kFinalTensors, conv::kFinalSizes, {}, conv::kFinalFlags};
inline constexpr dsl::Signature kConvUpdate{
    "causal_conv1d_update", conv::kUpdateTensors, conv::kUpdateSizes, {}, conv::kUpdateFlags};
// Backward (three launches, in this order):
//   causal_conv1d_bwd          dx over dense rows or one packed row, and each program's partial
//                              dweight / dbias sums into ws. Grid (cdiv(D, BLOCK_D), nchunks, rows);
//                              a program covers `tiles` (a runtime size) tiles of BLOCK_T tokens.
//   causal_conv1d_bwd_states   per sequence: check cu / slots; dinit; dx += dfinal. Grid
//                              (cdiv(D, BLOCK_D), nseq). After the dx kernel (it adds to dx).
//   causal_conv1d_bwd_reduce   dweight, dbias = the partials summed in a fixed order.
//                              Grid (cdiv(D, BLOCK_D), W + has_dbias): column j of dweight, j = W
//                              dbias.
// ws[p, j, d] (float32, p = row * nchunks + chunk, j < W: dweight column j, j = W: dbias) holds
// the partial sums: (rows * nchunks) * (W + 1) * D floats.
// The dx kernel's chunks: `tiles` time tiles of bt (BLOCK_T) tokens a program, nchunks a row of L
// tokens, for `rows` rows of D channels in blocks of bd (BLOCK_D). Chunks aim for enough programs
// to fill the GPU a few times over; fewer (longer chunks) keep the workspace and the reduction
// small. Channel-first wants more (a packed row is faster at ~9 waves than at ~2.5); channel-last
// rows get slower with more. Constants, so the workspace size and the sums' order depend on the
// shapes only, not on the device.
struct ConvBwdChunks {
  int64_t tiles = 0, nchunks = 0;
};
ConvBwdChunks convBackwardChunks(int64_t L, int64_t D, int64_t rows, bool channelLast, int64_t bd, int64_t bt);
inline constexpr dsl::Signature kConvBwd{"causal_conv1d_bwd", conv::kBwdTensors, conv::kBwdSizes, {}, conv::kFwdFlags};
inline constexpr dsl::Signature kConvBwdReduce{
    "causal_conv1d_bwd_reduce", conv::kReduceTensors, conv::kReduceSizes, {}, conv::kReduceFlags};
inline constexpr dsl::Signature kConvBwdStates{
    "causal_conv1d_bwd_states", conv::kStatesTensors, conv::kFinalSizes, {}, conv::kStatesFlags};

// Device status codes (err[0]; err[1..3] as listed).
inline constexpr long long kErrConvUpdateSlot = 10;  // row b, state_indices[b], slots
inline constexpr long long kErrConvCuSeqlens = 11;   // sequence i, cu[i], cu[i + 1]
inline constexpr long long kErrConvInitSlot = 12;    // sequence i, initial_state_indices[i], slots
inline constexpr long long kErrConvFinalSlot = 13;   // sequence i, final_state_indices[i], slots
inline constexpr long long kErrConvSeqPos = 14;      // token t, seq_pos[t], seq_pos[t - 1] (-1 at t = 0)

}  // namespace ssmjit::kernels
