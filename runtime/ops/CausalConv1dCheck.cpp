// The argument checks of causal_conv1d and causal_conv1d_update (see CausalConv1dCheck.h and the
// contract in ssmjit/ops.h). Shapes, dtypes, devices, strides and alignment only: no tensor data
// is read, so a check runs before anything touches the GPU.
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

// Weights and bias: float32 or x's dtype.
unsigned paramTypes(DType x) { return kF32Only | dtypeBit(x); }

// Conv states (slots, dim, width - 1): any number of slots >= 1.
int64_t checkStates(const Checker& c, const char* name, const TensorView& t, int64_t D,
                    int64_t W) {
  Dim e[3] = {{-1, "slots"}, {D, "dim"}, {W - 1, "width - 1"}};
  c.rank(name, t, e, 3);
  const int64_t S = t.shape[0];
  if (S < 1)
    c.fail(std::string(name) + " has " + str(S) + " slots (dim 0 of shape " + t.shapeString() +
           "), expected at least 1");
  e[0].size = S;
  c.tensor(name, t, e, 3, kFloat16Or32, false);
  return S;
}

// The slot indices of one states tensor: (nseq,) when given (only with the states), else the
// states need a slot per sequence.
void checkSlots(const Checker& c, const char* statesName, const TensorView& states,
                const char* idxName, const TensorView& idx, int64_t nseq, int64_t S) {
  if (!states.defined()) {
    if (idx.defined())
      c.fail(std::string(idxName) + " is given (shape " + idx.shapeString() +
             "), expected none: " + statesName + " is not given (indices select its slots)");
    return;
  }
  const Dim e[1] = {{nseq, "nseq"}};
  if (idx.defined()) {
    c.tensor(idxName, idx, e, 1, kIndexTypes, false);
  } else if (S < nseq) {
    c.fail(std::string(statesName) + " has " + str(S) + " slots (dim 0 of shape " +
           states.shapeString() + "), expected at least nseq = " + str(nseq) + " when " +
           idxName + " is not given (sequence i uses slot i)");
  }
}

}  // namespace

ConvDims checkConv1dArgs(const CausalConv1dArgs& a, DeviceKind device, const char* op) {
  Checker c(op, device);
  ConvDims d;

  const int lay = static_cast<int>(a.layout);
  if (lay != static_cast<int>(ConvLayout::ChannelFirst) &&
      lay != static_cast<int>(ConvLayout::ChannelLast))
    c.fail("layout is " + str(lay) + ", expected ChannelFirst (0) or ChannelLast (1)");
  d.channelLast = a.layout == ConvLayout::ChannelLast;
  const char* form = d.channelLast ? " (layout ChannelLast)" : " (layout ChannelFirst)";
  c.setForm(form);

  // x fixes batch, dim, seqlen and the device; every other tensor is checked against them.
  c.required("x", a.x);
  const int tAx = d.channelLast ? 1 : 2, dAx = d.channelLast ? 2 : 1;
  Dim eX[3];
  eX[0] = {-1, "batch"};
  eX[tAx] = {-1, "seqlen"};
  eX[dAx] = {-1, "dim"};
  c.rank("x", a.x, eX, 3);
  c.setDeviceId(a.x.deviceId, "x");
  d.batch = a.x.shape[0];
  d.L = a.x.shape[tAx];
  d.D = a.x.shape[dAx];
  eX[0].size = d.batch;
  eX[tAx].size = d.L;
  eX[dAx].size = d.D;
  c.tensor("x", a.x, eX, 3, kFloat16Or32, false);

  d.W = checkWidth(c, a.weight);
  c.setForm("");
  const Dim eW[2] = {{d.D, "dim"}, {d.W, "width"}};
  c.tensor("weight", a.weight, eW, 2, paramTypes(a.x.dtype), true);
  const Dim eBias[1] = {{d.D, "dim"}};
  c.optional("bias", a.bias, eBias, 1, paramTypes(a.x.dtype), true);
  c.required("out", a.out);
  c.setForm(form);
  c.tensor("out", a.out, eX, 3, kFloat16Or32, false);
  c.setForm("");

  // Packing: at most one of cu_seqlens and seq_pos, and then one row.
  d.packedCu = a.cu_seqlens.defined();
  d.packedPos = a.seq_pos.defined();
  if (d.packedCu && d.packedPos)
    c.fail("cu_seqlens (shape " + a.cu_seqlens.shapeString() + ") and seq_pos (shape " +
           a.seq_pos.shapeString() +
           ") are both given, expected at most one of them (they are two ways of packing)");
  if ((d.packedCu || d.packedPos) && d.batch != 1)
    c.fail("x has batch " + str(d.batch) + " (dim 0 of shape " + a.x.shapeString() +
           "), expected 1 with " + (d.packedCu ? "cu_seqlens" : "seq_pos") +
           ": packed input is one row of sequences");
  d.nseq = d.batch;
  if (d.packedCu) {
    Dim e[1] = {{-1, "nseq + 1"}};
    c.rank("cu_seqlens", a.cu_seqlens, e, 1);
    const int64_t n = a.cu_seqlens.shape[0];
    if (n < 2)
      c.fail("cu_seqlens has shape " + a.cu_seqlens.shapeString() +
             ", expected at least 2 entries (nseq + 1 with nseq >= 1: 0 = cu[0] < ... < cu[nseq] "
             "= T)");
    e[0].size = n;
    c.tensor("cu_seqlens", a.cu_seqlens, e, 1, kIndexTypes, false);
    d.nseq = n - 1;
  }
  if (d.packedPos) {
    const Dim e[2] = {{1, "batch"}, {d.L, "seqlen"}};
    c.tensor("seq_pos", a.seq_pos, e, 2, kIndexTypes, false);
  }

  // Conv states: with cu_seqlens or dense rows, never with positions.
  if (d.packedPos) {
    auto noStates = [&](const char* name, const TensorView& t) {
      if (t.defined())
        c.fail(std::string(name) + " is given (shape " + t.shapeString() +
               ") with seq_pos, expected none: conv states need cu_seqlens (positions do not "
               "say which sequence a token belongs to)");
    };
    noStates("initial_states", a.initial_states);
    noStates("final_states", a.final_states);
  }
  if (a.initial_states.defined())
    d.initSlots = checkStates(c, "initial_states", a.initial_states, d.D, d.W);
  checkSlots(c, "initial_states", a.initial_states, "initial_state_indices",
             a.initial_state_indices, d.nseq, d.initSlots);
  if (a.final_states.defined())
    d.finalSlots = checkStates(c, "final_states", a.final_states, d.D, d.W);
  checkSlots(c, "final_states", a.final_states, "final_state_indices", a.final_state_indices,
             d.nseq, d.finalSlots);
  // One grid row per row of x (forward) and per sequence (final states).
  if (d.batch > kMaxGridRows)
    c.fail("x has batch = " + str(d.batch) + " (dim 0), expected at most " + str(kMaxGridRows));
  if (d.nseq > kMaxGridRows)
    c.fail("cu_seqlens holds " + str(d.nseq) + " sequences, expected at most " + str(kMaxGridRows));
  return d;
}

ConvUpdateDims checkConv1dUpdateArgs(const CausalConv1dUpdateArgs& a, DeviceKind device,
                                     const char* op) {
  Checker c(op, device);
  ConvUpdateDims d;

  // The state's width - 1 comes from the weight, so the weight's width is checked first.
  c.required("conv_state", a.conv_state);
  Dim eState[3] = {{-1, "slots"}, {-1, "dim"}, {-1, "width - 1"}};
  c.rank("conv_state", a.conv_state, eState, 3);
  c.setDeviceId(a.conv_state.deviceId, "conv_state");
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
  const Dim eW[2] = {{d.D, "dim"}, {d.W, "width"}};
  c.tensor("weight", a.weight, eW, 2, paramTypes(a.x.dtype), true);
  const Dim eBias[1] = {{d.D, "dim"}};
  c.optional("bias", a.bias, eBias, 1, paramTypes(a.x.dtype), true);
  c.required("out", a.out);
  c.tensor("out", a.out, eX, 3, kFloat16Or32, false);
  const Dim eIdx[1] = {{d.batch, "batch"}};
  c.optional("state_indices", a.state_indices, eIdx, 1, kIndexTypes, false);
  if (!a.state_indices.defined() && d.S != d.batch)
    c.fail("conv_state has " + str(d.S) + " slots (dim 0 of shape " +
           a.conv_state.shapeString() + "), expected batch = " + str(d.batch) +
           " when state_indices is not given (sequence b uses slot b)");
  if (d.batch > kMaxGridRows)  // one grid row per sequence
    c.fail("x has batch = " + str(d.batch) + " (dim 0), expected at most " + str(kMaxGridRows));
  return d;
}

}  // namespace ssmjit::detail
