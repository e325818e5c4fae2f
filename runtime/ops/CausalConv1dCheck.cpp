// The argument checks of causal_conv1d, causal_conv1d_backward and causal_conv1d_update (see
// CausalConv1dCheck.h and the contract in ssmjit/ops.h). Shapes, dtypes, devices, strides and
// alignment only: no tensor data is read, so a check runs before anything touches the GPU. The
// forward and the backward take the same inputs: one helper per group of arguments serves both.
#include "runtime/ops/CausalConv1dCheck.h"

#include <string>

#include "runtime/ops/ArgCheck.h"
#include "ssmjit/error.h"
#include "ssmjit/ops.h"

namespace ssmjit::detail {

constexpr int64_t kMaxGridRows = 65535;  // gridDim.y / gridDim.z
namespace {

std::string str(int64_t v) { return std::to_string(v); }

// weight (dim, width): rank, then the width against [2, kMaxConvWidth]; returns W. The rest of
// the weight (dim, dtype, strides) is checked once D and x's dtype are known.
int64_t checkWidth(const Checker& c, const TensorView& weight) {
  c.required("weight", weight);
  const Dim e[2] = {{-1, "dim"}, {-1, "width"}};
  c.rank("weight", weight, e, 2);
  const int64_t W = weight.shape[1];
  if (W < 2 || W > kMaxConvWidth)
    c.fail("weight has width " + str(W) + " (dim 1 of shape " + weight.shapeString() +
           "), expected a width W with 2 <= W <= " + str(kMaxConvWidth) + " (kMaxConvWidth)");
  return W;
}

// A weight (D, W) and an optional bias (D,), or their gradients: float32 or x's dtype. Inputs may
// broadcast (`zeroStrideOk`); gradients are written, so they may not.
void checkParams(const Checker& c, int64_t D, int64_t W, DType x, const char* wName, const TensorView& w,
                 const char* bName, const TensorView& b, bool zeroStrideOk) {
  const unsigned types = kF32Only | dtypeBit(x);
  c.required(wName, w);
  const Dim eW[2] = {{D, "dim"}, {W, "width"}};
  c.tensor(wName, w, eW, 2, types, zeroStrideOk);
  const Dim eBias[1] = {{D, "dim"}};
  c.optional(bName, b, eBias, 1, types, zeroStrideOk);
}

const char* layoutForm(const ConvDims& d) { return d.channelLast ? " (layout ChannelLast)" : " (layout ChannelFirst)"; }

// A tensor of x's shape in its layout (x, out, dout, dx): fp32/bf16/fp16, no broadcast axis.
void checkLikeX(Checker& c, const ConvDims& d, const char* name, const TensorView& t) {
  const int tAx = d.channelLast ? 1 : 2, dAx = d.channelLast ? 2 : 1;
  Dim e[3];
  e[0] = {d.batch, "batch"};
  e[tAx] = {d.L, "seqlen"};
  e[dAx] = {d.D, "dim"};
  c.required(name, t);
  c.setForm(layoutForm(d));
  c.tensor(name, t, e, 3, kFloat16Or32, false);
  c.setForm("");
}

// The layout, x (it fixes batch, dim, seqlen and the device: every other tensor is checked
// against them), the weight and the bias.
void checkInputs(Checker& c, ConvDims& d, ConvLayout layout, const TensorView& x, const TensorView& weight,
                 const TensorView& bias) {
  const int lay = static_cast<int>(layout);
  if (lay != static_cast<int>(ConvLayout::ChannelFirst) && lay != static_cast<int>(ConvLayout::ChannelLast))
    c.fail("layout is " + str(lay) + ", expected ChannelFirst (0) or ChannelLast (1)");
  d.channelLast = layout == ConvLayout::ChannelLast;
  c.required("x", x);
  const int tAx = d.channelLast ? 1 : 2, dAx = d.channelLast ? 2 : 1;
  Dim eX[3];
  eX[0] = {-1, "batch"};
  eX[tAx] = {-1, "seqlen"};
  eX[dAx] = {-1, "dim"};
  c.setForm(layoutForm(d));
  c.rank("x", x, eX, 3);
  c.setForm("");
  c.setDeviceId(x.deviceId, "x");
  d.batch = x.shape[0];
  d.L = x.shape[tAx];
  d.D = x.shape[dAx];
  checkLikeX(c, d, "x", x);
  d.W = checkWidth(c, weight);
  checkParams(c, d.D, d.W, x.dtype, "weight", weight, "bias", bias, true);
}

// Packing: at most one of cu_seqlens and seq_pos, and then one row. Sets nseq.
void checkPacking(const Checker& c, ConvDims& d, const TensorView& x, const TensorView& cu, const TensorView& pos) {
  d.packedCu = cu.defined();
  d.packedPos = pos.defined();
  if (d.packedCu && d.packedPos)
    c.fail("cu_seqlens (shape " + cu.shapeString() + ") and seq_pos (shape " + pos.shapeString() +
           ") are both given, expected at most one of them (they are two ways of packing)");
  if ((d.packedCu || d.packedPos) && d.batch != 1)
    c.fail("x has batch " + str(d.batch) + " (dim 0 of shape " + x.shapeString() + "), expected 1 with " +
           (d.packedCu ? "cu_seqlens" : "seq_pos") + ": packed input is one row of sequences");
  d.nseq = d.batch;
  if (d.packedCu) {
    Dim e[1] = {{-1, "nseq + 1"}};
    c.rank("cu_seqlens", cu, e, 1);
    const int64_t n = cu.shape[0];
    if (n < 2)
      c.fail("cu_seqlens has shape " + cu.shapeString() +
             ", expected at least 2 entries (nseq + 1 with nseq >= 1: 0 = cu[0] < ... < cu[nseq] "
             "= T)");
    e[0].size = n;
    c.tensor("cu_seqlens", cu, e, 1, kIndexTypes, false);
    d.nseq = n - 1;
  }
  if (d.packedPos) {
    const Dim e[2] = {{1, "batch"}, {d.L, "seqlen"}};
    c.tensor("seq_pos", pos, e, 2, kIndexTypes, false);
  }
}

// Conv states (slots, dim, width - 1) with any number of slots >= 1, and their slot indices:
// (nseq,) when given (only with the states), else the states need a slot per sequence. Only with
// cu_seqlens or dense rows. Returns the slots (0 without states).
int64_t checkStates(const Checker& c, const ConvDims& d, const char* name, const TensorView& t, const char* idxName,
                    const TensorView& idx) {
  if (d.packedPos && t.defined())
    c.fail(std::string(name) + " is given (shape " + t.shapeString() +
           ") with seq_pos, expected none: conv states need cu_seqlens (positions do not "
           "say which sequence a token belongs to)");
  onlyWith(c, idxName, idx, name, t, "indices select its slots");
  if (!t.defined()) return 0;
  Dim e[3] = {{-1, "slots"}, {d.D, "dim"}, {d.W - 1, "width - 1"}};
  c.rank(name, t, e, 3);
  const int64_t S = t.shape[0];
  if (S < 1)
    c.fail(std::string(name) + " has " + str(S) + " slots (dim 0 of shape " + t.shapeString() +
           "), expected at least 1");
  e[0].size = S;
  c.tensor(name, t, e, 3, kFloat16Or32, false);
  const Dim eIdx[1] = {{d.nseq, "nseq"}};
  if (idx.defined())
    c.tensor(idxName, idx, eIdx, 1, kIndexTypes, false);
  else if (S < d.nseq)
    c.fail(std::string(name) + " has " + str(S) + " slots (dim 0 of shape " + t.shapeString() +
           "), expected at least nseq = " + str(d.nseq) + " when " + idxName +
           " is not given (sequence i uses slot i)");
  return S;
}

// One grid row per row of x and per sequence.
void checkGrid(const Checker& c, const ConvDims& d) {
  if (d.batch > kMaxGridRows)
    c.fail("x has batch = " + str(d.batch) + " (dim 0), expected at most " + str(kMaxGridRows));
  if (d.nseq > kMaxGridRows)
    c.fail("cu_seqlens holds " + str(d.nseq) + " sequences, expected at most " + str(kMaxGridRows));
}

// An output written while `in` is still read may not be the same tensor.
void noAlias(const Checker& c, const char* name, const TensorView& out, const char* inName, const TensorView& in) {
  if (out.data == in.data)
    c.fail(std::string(name) + " has data pointer " + hexPtr(out.data) + ", the same as " + inName +
           "'s, expected a separate tensor: " + name + " may not alias " + inName + " (" + inName + " is read while " +
           name + " is written)");
}

// What the forward and the backward check first: x, weight and bias, `like` (out or dout) shaped
// as x, the packing and the initial states.
template <class Args>
void checkSequenceInputs(Checker& c, ConvDims& d, const Args& a, const char* likeName, const TensorView& like) {
  checkInputs(c, d, a.layout, a.x, a.weight, a.bias);
  checkLikeX(c, d, likeName, like);
  checkPacking(c, d, a.x, a.cu_seqlens, a.seq_pos);
  d.initSlots = checkStates(c, d, "initial_states", a.initial_states, "initial_state_indices", a.initial_state_indices);
}

}  // namespace

ConvDims checkConv1dArgs(const CausalConv1dArgs& a, DeviceKind device, const char* op) {
  Checker c(op, device);
  ConvDims d;
  checkSequenceInputs(c, d, a, "out", a.out);
  d.finalSlots = checkStates(c, d, "final_states", a.final_states, "final_state_indices", a.final_state_indices);
  checkGrid(c, d);
  return d;
}

ConvBackwardDims checkConv1dBackwardArgs(const CausalConv1dBackwardArgs& a, DeviceKind device, const char* op) {
  Checker c(op, device);
  ConvBackwardDims d;
  checkSequenceInputs(c, d, a, "dout", a.dout);
  d.dfinalSlots = checkStates(c, d, "dfinal_states", a.dfinal_states, "final_state_indices", a.final_state_indices);

  // The gradients. dx is written while x and dout are read (by other programs).
  checkLikeX(c, d, "dx", a.dx);
  noAlias(c, "dx", a.dx, "dout", a.dout);
  noAlias(c, "dx", a.dx, "x", a.x);
  onlyWith(c, "dbias", a.dbias, "bias", a.bias, "no bias, no gradient");
  checkParams(c, d.D, d.W, a.x.dtype, "dweight", a.dweight, "dbias", a.dbias, false);
  onlyWith(c, "dinitial_states", a.dinitial_states, "initial_states", a.initial_states,
           "no initial states, no gradient");
  if (a.dinitial_states.defined()) {
    const Dim e[3] = {{d.initSlots, "slots"}, {d.D, "dim"}, {d.W - 1, "width - 1"}};
    c.setForm(" (initial_states' shape)");
    c.tensor("dinitial_states", a.dinitial_states, e, 3, kFloat16Or32, false);
    c.setForm("");
  }
  checkGrid(c, d);
  return d;
}

ConvUpdateDims checkConv1dUpdateArgs(const CausalConv1dUpdateArgs& a, DeviceKind device, const char* op) {
  Checker c(op, device);
  ConvUpdateDims d;

  // The state's width - 1 comes from the weight, so the weight's width is checked first.
  Dim eState[3] = {{-1, "slots"}, {-1, "dim"}, {-1, "width - 1"}};
  c.lead("conv_state", a.conv_state, eState, 3);
  d.W = checkWidth(c, a.weight);

  // x fixes batch, tokens and dim.
  c.required("x", a.x);
  Dim eX[3] = {{-1, "batch"}, {-1, "tokens"}, {-1, "dim"}};
  c.rank("x", a.x, eX, 3);
  d.batch = a.x.shape[0];
  d.L = a.x.shape[1];
  d.D = a.x.shape[2];
  if (d.L < 1 || d.L > kMaxTokens)
    c.fail("x has " + str(d.L) + " tokens (dim 1 of shape " + a.x.shapeString() +
           "), expected 1 <= L <= " + str(kMaxTokens) + " (kMaxTokens)");
  eX[0].size = d.batch;
  eX[1].size = d.L;
  eX[2].size = d.D;

  d.S = a.conv_state.shape[0];
  eState[0].size = d.S;
  eState[1].size = d.D;
  eState[2].size = d.W - 1;
  c.tensor("conv_state", a.conv_state, eState, 3, kFloat16Or32, false);
  c.tensor("x", a.x, eX, 3, kFloat16Or32, false);
  checkParams(c, d.D, d.W, a.x.dtype, "weight", a.weight, "bias", a.bias, true);
  c.required("out", a.out);
  c.tensor("out", a.out, eX, 3, kFloat16Or32, false);
  const Dim eIdx[1] = {{d.batch, "batch"}};
  c.optional("state_indices", a.state_indices, eIdx, 1, kIndexTypes, false);
  if (!a.state_indices.defined() && d.S != d.batch)
    c.fail("conv_state has " + str(d.S) + " slots (dim 0 of shape " + a.conv_state.shapeString() +
           "), expected batch = " + str(d.batch) + " when state_indices is not given (sequence b uses slot b)");
  if (d.batch > kMaxGridRows)  // one grid row per sequence
    c.fail("x has batch = " + str(d.batch) + " (dim 0), expected at most " + str(kMaxGridRows));
  return d;
}

}  // namespace ssmjit::detail
