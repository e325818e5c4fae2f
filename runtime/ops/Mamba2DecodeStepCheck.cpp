// The argument check of mamba2_decode_step (see Mamba2DecodeStepCheck.h and the contract in
// ssmjit/ops.h). Shapes, dtypes, devices, strides and alignment only: no tensor data is read.
#include "runtime/ops/Mamba2DecodeStepCheck.h"

#include <cmath>
#include <string>

#include "runtime/ops/ArgCheck.h"
#include "ssmjit/error.h"
#include "ssmjit/ops.h"

namespace ssmjit::detail {
namespace {

constexpr int64_t kMaxGridRows = 65535;  // gridDim.y / gridDim.z
std::string str(int64_t v) { return std::to_string(v); }

// Per-slot token rows: pre-conv xBC (S, depth, Dc) and raw dt (S, depth, H), the cache's or the
// ring's (`what` names the depth); returns the depth xbc fixes.
int64_t checkTokenRows(Checker& c, const DecodeStepDims& d, const char* xName, const TensorView& x,
                       const char* dtName, const TensorView& dt, const char* what) {
  c.required(xName, x);
  Dim eX[3] = {{d.S, "slots"}, {-1, what}, {d.Dc, "conv channels"}};
  c.rank(xName, x, eX, 3);
  const int64_t depth = x.shape[1];
  eX[1].size = depth;
  if (depth < 1) c.fail(std::string(xName) + " has " + what + " " + str(depth) + " (dim 1), expected at least 1");
  c.tensor(xName, x, eX, 3, kFloat16Or32, false);
  c.required(dtName, dt);
  const Dim eDt[3] = {{d.S, "slots"}, {depth, what}, {d.H, "nheads"}};
  c.tensor(dtName, dt, eDt, 3, kFloat16Or32, false);
  return depth;
}

// Token rows kept so that a replay equals the verify hold their source's dtype exactly.
void checkKeptDtype(Checker& c, const char* name, const TensorView& t, const char* sourceName,
                    const TensorView& source, const char* why) {
  if (t.dtype != source.dtype)
    c.fail(std::string(name) + " has dtype " + dtypeName(t.dtype) + ", expected " + sourceName + "'s dtype " +
           dtypeName(source.dtype) + " (" + why + ")");
}

}  // namespace

DecodeStepDims checkDecodeStepArgs(const Mamba2DecodeState& s, const Mamba2MixerWeights& w,
                                   const Mamba2DecodeStepArgs& a, DeviceKind device, const char* op) {
  Checker c(op, device);
  DecodeStepDims d;
  const int parts = static_cast<int>(a.parts);
  if (parts < 0 || parts > 2)
    c.fail("parts is " + str(parts) + ", expected ReplayAndVerify (0), ReplayOnly (1) or VerifyOnly (2)");
  d.replay = a.parts != DecodeStepParts::VerifyOnly;
  d.verify = a.parts != DecodeStepParts::ReplayOnly;

  // ssm_state fixes slots, heads, head dim and state size, and the device.
  Dim eSsm[4] = {{-1, "slots"}, {-1, "nheads"}, {-1, "headdim"}, {-1, "dstate"}};
  c.lead("ssm_state", s.ssm_state, eSsm, 4);
  d.S = s.ssm_state.shape[0], d.H = s.ssm_state.shape[1], d.P = s.ssm_state.shape[2], d.N = s.ssm_state.shape[3];
  // Empty heads would give an empty grid (a launch error, not a clear message) and H / G = 0.
  if (d.H < 1 || d.P < 1 || d.N < 1)
    c.fail("ssm_state has shape " + s.ssm_state.shapeString() +
           ", expected nheads, headdim and dstate (dims 1..3) >= 1");
  for (int k = 0; k < 4; ++k) eSsm[k].size = s.ssm_state.shape[k];
  c.tensor("ssm_state", s.ssm_state, eSsm, 4, kFloat16Or32, false);

  // conv_state fixes the conv channels (hence the groups) and the width.
  c.required("conv_state", s.conv_state);
  Dim eConv[3] = {{d.S, "slots"}, {-1, "conv channels"}, {-1, "width - 1"}};
  c.rank("conv_state", s.conv_state, eConv, 3);
  d.Dc = s.conv_state.shape[1];
  d.W = s.conv_state.shape[2] + 1;
  const int64_t HP = d.H * d.P, rest = d.Dc - HP;
  if (d.N < 1 || rest <= 0 || rest % (2 * d.N) != 0)
    c.fail("conv_state has " + str(d.Dc) + " conv channels (dim 1 of shape " + s.conv_state.shapeString() +
           "), expected H*P + 2*G*N = " + str(HP) + " + " + str(2 * d.N) + "*G for some groups G >= 1 (H " + str(d.H) +
           ", P " + str(d.P) + ", N " + str(d.N) + " from ssm_state)");
  d.G = rest / (2 * d.N);
  if (d.H % d.G != 0)
    c.fail("conv_state has " + str(d.Dc) + " conv channels, which gives G = " + str(d.G) +
           " groups, expected G to divide H = " + str(d.H) + " (head h reads group h / (H / G))");
  if (d.W < 2 || d.W > kMaxConvWidth)
    c.fail("conv_state has width - 1 = " + str(d.W - 1) + " (dim 2 of shape " + s.conv_state.shapeString() +
           "), expected a conv width W with 2 <= W <= " + str(kMaxConvWidth));
  eConv[1].size = d.Dc;
  eConv[2].size = d.W - 1;
  c.tensor("conv_state", s.conv_state, eConv, 3, kFloat16Or32, false);

  // The caches fix their depth.
  d.Lc = checkTokenRows(c, d, "xbc_cache", s.xbc_cache, "dt_cache", s.dt_cache, "cache depth");
  c.required("cached_tokens", s.cached_tokens);
  const Dim eSlots[1] = {{d.S, "slots"}};
  c.tensor("cached_tokens", s.cached_tokens, eSlots, 1, dtypeBit(DType::I32), false);
  c.required("arrivals", s.arrivals);
  c.tensor("arrivals", s.arrivals, eSlots, 1, dtypeBit(DType::I32), false);
  if (d.S > 1 && s.arrivals.strides[0] != 1)
    c.fail("arrivals has stride " + str(s.arrivals.strides[0]) + ", expected 1 (contiguous int32)");

  // The ring (deferred commit): all three tensors or none; it fixes its depth.
  const bool anyRing = s.xbc_ring.defined() || s.dt_ring.defined() || s.ring_tokens.defined();
  if (anyRing) {
    for (auto [name, t] : {std::pair<const char*, const TensorView*>{"xbc_ring", &s.xbc_ring},
                           {"dt_ring", &s.dt_ring},
                           {"ring_tokens", &s.ring_tokens}})
      if (!t->defined())
        c.fail(std::string(name) + " is not given, expected it: xbc_ring, dt_ring and ring_tokens come together " +
               "(deferred commit) or not at all (commit every step)");
    d.R = checkTokenRows(c, d, "xbc_ring", s.xbc_ring, "dt_ring", s.dt_ring, "ring depth");
    c.tensor("ring_tokens", s.ring_tokens, eSlots, 1, dtypeBit(DType::I32), false);
    const char* why = "the ring holds the accepted drafts exactly";
    checkKeptDtype(c, "xbc_ring", s.xbc_ring, "xbc_cache", s.xbc_cache, why);
    checkKeptDtype(c, "dt_ring", s.dt_ring, "dt_cache", s.dt_cache, why);
  }

  // The drafts fix batch and L.
  if (d.verify) {
    c.required("xBC", a.xBC);
    Dim eX[3] = {{-1, "batch"}, {-1, "drafts"}, {d.Dc, "conv channels"}};
    c.rank("xBC", a.xBC, eX, 3);
    d.batch = a.xBC.shape[0];
    d.L = a.xBC.shape[1];
    const int64_t maxL = std::min<int64_t>(d.Lc, kMaxTokens);
    if (d.L < 1 || d.L > maxL)
      c.fail("xBC has " + str(d.L) + " drafts (dim 1 of shape " + a.xBC.shapeString() +
             "), expected 1 <= L <= " + str(maxL) + " (the cache depth " + str(d.Lc) +
             " of xbc_cache, at most kMaxTokens = " + str(kMaxTokens) + ": the cache must hold every draft)");
    eX[0].size = d.batch;
    eX[1].size = d.L;
    c.tensor("xBC", a.xBC, eX, 3, kFloat16Or32, false);
    c.required("dt", a.dt);
    const Dim eDt[3] = {{d.batch, "batch"}, {d.L, "drafts"}, {d.H, "nheads"}};
    c.tensor("dt", a.dt, eDt, 3, kFloat16Or32, false);
    const Dim eY[4] = {{d.batch, "batch"}, {d.L, "drafts"}, {d.H, "nheads"}, {d.P, "headdim"}};
    c.required("y", a.y);
    c.tensor("y", a.y, eY, 4, kFloat16Or32, false);
    c.optional("z", a.z, eY, 4, kFloat16Or32, false);
    const char* why = "the cache holds the drafts exactly, so that a replay equals the verify";
    checkKeptDtype(c, "xbc_cache", s.xbc_cache, "xBC", a.xBC, why);
    checkKeptDtype(c, "dt_cache", s.dt_cache, "dt", a.dt, why);
    for (const TensorView* in : {&a.xBC, &a.dt, &a.z})
      if (in->defined() && in->data == a.y.data)
        c.fail("y has data " + hexPtr(a.y.data) + ", the same as an input's (xBC, dt or z); expected its own memory");
  } else {
    for (auto [name, t] :
         {std::pair<const char*, const TensorView*>{"xBC", &a.xBC}, {"dt", &a.dt}, {"z", &a.z}, {"y", &a.y}})
      if (t->defined())
        c.fail(std::string(name) + " is given (shape " + t->shapeString() +
               "), expected none: parts is ReplayOnly (no drafts to verify)");
  }
  if (d.replay) {
    c.required("num_accepted", a.num_accepted);
    Dim eAcc[1] = {{d.verify ? d.batch : -1, "batch"}};
    c.rank("num_accepted", a.num_accepted, eAcc, 1);
    if (!d.verify) d.batch = a.num_accepted.shape[0];
    eAcc[0].size = d.batch;
    c.tensor("num_accepted", a.num_accepted, eAcc, 1, kIndexTypes, false);
  } else if (a.num_accepted.defined()) {
    c.fail("num_accepted is given (shape " + a.num_accepted.shapeString() +
           "), expected none: parts is VerifyOnly (nothing is replayed)");
  }
  const Dim eIdx[1] = {{d.batch, "batch"}};
  c.optional("state_indices", a.state_indices, eIdx, 1, kIndexTypes, false);
  if (!a.state_indices.defined() && d.S != d.batch)
    c.fail("ssm_state has " + str(d.S) + " slots (dim 0 of shape " + s.ssm_state.shapeString() +
           "), expected batch = " + str(d.batch) + " when state_indices is not given (sequence b uses slot b)");

  // The weights (may broadcast).
  const unsigned wTypes = kF32Only | (d.verify ? dtypeBit(a.xBC.dtype) : kFloat16Or32);
  c.required("conv_weight", w.conv_weight);
  const Dim eW[2] = {{d.Dc, "conv channels"}, {d.W, "width"}};
  c.tensor("conv_weight", w.conv_weight, eW, 2, wTypes, true);
  const Dim eB[1] = {{d.Dc, "conv channels"}};
  c.optional("conv_bias", w.conv_bias, eB, 1, wTypes, true);
  const Dim eH[1] = {{d.H, "nheads"}};
  c.required("A", w.A);
  c.tensor("A", w.A, eH, 1, kF32Only, true);
  c.optional("D", w.D, eH, 1, kF32Only, true);
  c.optional("dt_bias", w.dt_bias, eH, 1, kF32Only, true);
  if (std::isnan(w.dt_min) || std::isnan(w.dt_max))
    c.fail("dt_min = " + std::to_string(w.dt_min) + ", dt_max = " + std::to_string(w.dt_max) +
           ": expected numbers (dt_max <= dt_min disables the clamp)");
  if (d.batch > kMaxGridRows || d.H > kMaxGridRows)
    c.fail("batch = " + str(d.batch) + ", nheads = " + str(d.H) + ": expected each at most " + str(kMaxGridRows) +
           " (grid limits)");
  return d;
}

}  // namespace ssmjit::detail
