// Mamba-2 decode step with activation replay (Algorithm 2 of the speculative-decoding design), in
// one launch: replay the c accepted drafts of the last verify from the pre-conv cache through the
// conv window and the SSM state, commit both, then run the L new drafts from the corrected state
// (conv, SSM, y per draft) without committing, and cache them for the next replay. The SSM state
// tile and the conv windows stay in registers throughout: the state is read once and written
// once. See Mamba2DecodeStep.h for the argument contract.
//
// The per-token math is written exactly as the one-token kernels write it (CausalConv1dUpdate,
// SelectiveStateUpdate), so replaying a token gives the same fp32 results as decoding it alone.
#include "kernels_dsl/Mamba2DecodeStep.h"

#include <algorithm>

#include "kernels_dsl/Dsl.h"
#include "kernels_dsl/Registry.h"

namespace ssmjit::kernels {
using namespace dsl;

namespace {

void build(KernelBuilder& k, const Specialization& spec) {
  const int64_t BP = spec.get("meta:BLOCK_P"), BN = spec.get("meta:BLOCK_N"), BH = spec.get("meta:BLOCK_H"),
                BBC = spec.get("meta:BLOCK_BC"), W = spec.get("meta:width");
  k.setInnerLanes(static_cast<int>(spec.get("meta:inner_lanes")));
  auto F = PtrClass::Float;
  auto M = [&](const char* n) { return k.ptrArg(n, PtrClass::Int, PtrRole::Metadata); };
  Value convState = k.ptrArg("conv_state", F), ssmState = k.ptrArg("ssm_state", F),
        xbcCache = k.ptrArg("xbc_cache", F), dtCache = k.ptrArg("dt_cache", F), convW = k.ptrArg("conv_w", F),
        convB = k.ptrArg("conv_b", F), A = k.ptrArg("A", F), Dp = k.ptrArg("D", F), dtBias = k.ptrArg("dt_bias", F),
        xbc = k.ptrArg("xbc", F), dt = k.ptrArg("dt", F), z = k.ptrArg("z", F), y = k.ptrArg("y", F);
  Value stateIdx = M("state_idx"), accepted = M("accepted"), cached = M("cached"), arrivals = M("arrivals"),
        err = M("err");
  auto I = [&](const char* n) { return k.intArg(n); };
  I("batch");
  Value nslots = I("nslots"), H = I("H"), P = I("P"), N = I("N"), G = I("G"), L = I("L");
  I("Lc");
  Value dtMin = k.floatArg("dt_min"), dtMax = k.floatArg("dt_max");
  Value sCsSlot = I("s_cs_slot"), sCsC = I("s_cs_c"), sCsK = I("s_cs_k");
  Value sSsSlot = I("s_ss_slot"), sSsH = I("s_ss_h"), sSsP = I("s_ss_p"), sSsN = I("s_ss_n");
  Value sXcSlot = I("s_xc_slot"), sXcT = I("s_xc_t"), sXcC = I("s_xc_c");
  Value sDcSlot = I("s_dc_slot"), sDcT = I("s_dc_t"), sDcH = I("s_dc_h");
  Value sWc = I("s_w_c"), sWk = I("s_w_k"), sCb = I("s_cb_c"), sAh = I("s_A_h"), sDh = I("s_D_h"),
        sDtbH = I("s_dtb_h");
  Value sXb = I("s_xbc_b"), sXt = I("s_xbc_t"), sXc = I("s_xbc_c");
  Value sDtB = I("s_dt_b"), sDtT = I("s_dt_t"), sDtH = I("s_dt_h");
  Value sZb = I("s_z_b"), sZt = I("s_z_t"), sZh = I("s_z_h"), sZp = I("s_z_p");
  Value sYb = I("s_y_b"), sYt = I("s_y_t"), sYh = I("s_y_h"), sYp = I("s_y_p");
  Value sIdx = I("s_idx_b"), sAcc = I("s_acc_b"), sCached = I("s_cached");
  Value hasConvBias = k.flagArg("has_conv_bias"), hasD = k.flagArg("has_D"), hasZ = k.flagArg("has_z"),
        hasDtBias = k.flagArg("has_dt_bias"), softplusOn = k.flagArg("dt_softplus"),
        hasClamp = k.flagArg("has_clamp"), hasIdx = k.flagArg("has_state_idx"), replay = k.flagArg("replay"),
        verify = k.flagArg("verify");

  Value pidP = k.programId(0), h = k.programId(1), b = k.programId(2);
  Value first = (pidP == 0) && (h == 0);  // reports errors for the row

  // The row's slot (-1: pad, skipped) and replay count; every program of the row reads the same
  // values, so a bad row is skipped by all of them (and none arrives at the counter).
  Value slot = k.ifElse(hasIdx, [&] { return std::vector<Value>{k.load(stateIdx, b * sIdx)}; },
                        [&] { return std::vector<Value>{b}; })[0];
  k.returnIf(slot == -1);
  Value badSlot = (slot < 0) || (slot >= nslots);
  k.ifThen(badSlot && first, [&] { k.reportError(err, k.constInt(kErrDecodeSlot), b, slot, nslots); });
  k.returnIf(badSlot);
  Value nCached = k.load(cached, slot * sCached);
  Value c = k.ifElse(replay, [&] { return std::vector<Value>{k.load(accepted, b * sAcc)}; },
                     [&] { return std::vector<Value>{k.constInt(0)}; })[0];
  Value badC = (c < 0) || (c > nCached);
  k.ifThen(badC && first, [&] { k.reportError(err, k.constInt(kErrDecodeAccepted), b, c, nCached); });
  k.returnIf(badC);

  Value zero = k.constFloat(0);
  Value offsP = pidP * BP + k.range(BP), offsN = k.range(BN);
  Value maskP = offsP < P, maskN = offsN < N;
  Value mask2 = k.expandDims(maskP, 1) && k.expandDims(maskN, 0);
  Value g = h / (H / G);
  Value HP = H * P, GN = G * N;
  // Conv channels of this program: its x rows, its group's B and C.
  Value chX = h * P + offsP, chB = HP + g * N + offsN, chC = HP + GN + g * N + offsN;

  auto ssmOffsets = [&] {
    return slot * sSsSlot + h * sSsH + k.expandDims(offsP, 1) * sSsP + k.expandDims(offsN, 0) * sSsN;
  };
  Value st = k.load(ssmState, ssmOffsets(), mask2, zero);

  // Conv windows (W - 1 columns, oldest first) and weights of the three channel groups.
  struct Conv {
    Value ch, mask;
    std::vector<Value> win, w;
    Value bias;
  };
  auto loadConv = [&](Value ch, Value mask, int64_t n) {
    Conv cv{ch, mask, {}, {}, {}};
    for (int64_t j = 0; j + 1 < W; ++j) cv.win.push_back(k.load(convState, slot * sCsSlot + ch * sCsC + j * sCsK, mask, zero));
    // Loaded once and kept: the taps of consecutive channels are W floats apart, so reloading
    // them per token costs a cache line per lane (measured: the kernel became L1-bound).
    for (int64_t j = 0; j < W; ++j) cv.w.push_back(k.load(convW, ch * sWc + j * sWk, mask, zero));
    cv.bias = k.ifElse(hasConvBias, [&] { return std::vector<Value>{k.load(convB, ch * sCb, mask, zero)}; },
                       [&] { return std::vector<Value>{k.splat(zero, {n})}; })[0];
    return cv;
  };
  Conv cx = loadConv(chX, maskP, BP), cb = loadConv(chB, maskN, BN), cc = loadConv(chC, maskN, BN);
  // One conv step (as causal_conv1d_update computes it): the SiLU output for token v; the window
  // slides by one.
  auto convStep = [&](const Conv& cv, std::vector<Value>& win, Value v) {
    Value acc = cv.bias + cv.w[W - 1] * v;
    for (int64_t j = 0; j + 1 < W; ++j) acc = acc + cv.w[j] * win[j];
    win.erase(win.begin());
    win.push_back(v);
    return silu(acc);
  };

  Value Ahead = k.load(A, h * sAh);
  Value biasHead = k.ifElse(hasDtBias, [&] { return std::vector<Value>{k.load(dtBias, h * sDtbH)}; },
                            [&] { return std::vector<Value>{zero}; })[0];
  Value Dv = k.ifElse(hasD, [&] { return std::vector<Value>{k.load(Dp, h * sDh)}; },
                      [&] { return std::vector<Value>{zero}; })[0];
  // One SSM step (as selective_state_update computes it for Mamba-2): returns the new state.
  auto ssmStep = [&](Value s, Value xPost, Value bPost, Value dtRaw) {
    Value d = dtRaw + biasHead;
    d = k.ifElse(softplusOn, [&] { return std::vector<Value>{softplus(d)}; },
                 [&] { return std::vector<Value>{d}; })[0];
    d = k.ifElse(hasClamp, [&] { return std::vector<Value>{k.minimum(k.maximum(d, dtMin), dtMax)}; },
                 [&] { return std::vector<Value>{d}; })[0];
    Value decay = k.splat(k.exp(Ahead * d), {BP, BN});
    return s * decay + k.expandDims(bPost, 0) * k.expandDims(k.splat(d, {BP}) * xPost, 1);
  };

  // Loop state: the SSM tile, then the three windows.
  auto pack = [&](Value s, const std::vector<Value>& wx, const std::vector<Value>& wb, const std::vector<Value>& wc) {
    std::vector<Value> v{s};
    v.insert(v.end(), wx.begin(), wx.end());
    v.insert(v.end(), wb.begin(), wb.end());
    v.insert(v.end(), wc.begin(), wc.end());
    return v;
  };
  const size_t nw = static_cast<size_t>(W - 1);
  auto unpack = [&](const std::vector<Value>& v, size_t base, size_t part) {
    return std::vector<Value>(v.begin() + base + 1 + part * nw, v.begin() + base + 1 + (part + 1) * nw);
  };

  // ---- replay: cached drafts 0..c-1.
  auto loadCached = [&](Value t) {
    Value base = slot * sXcSlot + t * sXcT;
    return std::vector<Value>{k.load(xbcCache, base + chX * sXcC, maskP, zero),
                              k.load(xbcCache, base + chB * sXcC, maskN, zero),
                              k.load(xbcCache, base + chC * sXcC, maskN, zero),
                              k.load(dtCache, slot * sDcSlot + t * sDcT + h * sDcH)};
  };
  std::vector<Value> init = pack(st, cx.win, cb.win, cc.win);
  std::vector<Value> replayed = k.forLoop(k.constInt(0), c, k.constInt(1), init, [&](Value t, const std::vector<Value>& v) {
    std::vector<Value> in = loadCached(t);
    std::vector<Value> wx = unpack(v, 0, 0), wb = unpack(v, 0, 1), wc = unpack(v, 0, 2);
    Value xPost = convStep(cx, wx, in[0]), bPost = convStep(cb, wb, in[1]);
    wc.erase(wc.begin());  // C's window only slides: the replay needs no output
    wc.push_back(in[2]);
    return pack(ssmStep(v[0], xPost, bPost, in[3]), wx, wb, wc);
  });
  Value stC = replayed[0];
  std::vector<Value> wxC = unpack(replayed, 0, 0), wbC = unpack(replayed, 0, 1), wcC = unpack(replayed, 0, 2);
  // Commit what this program owns: its state rows and x conv channels (the B/C channels are
  // shared: the row's last program commits them below).
  k.ifThen(c > 0, [&] {
    k.store(ssmState, ssmOffsets(), stC, mask2);
    for (int64_t j = 0; j + 1 < W; ++j) k.store(convState, slot * sCsSlot + chX * sCsC + j * sCsK, wxC[j], maskP);
  });

  // ---- verify: the L drafts from the corrected state; y per draft; the x drafts into the cache.
  k.ifThen(verify, [&] {
    auto loadDraft = [&](Value t) {
      Value base = b * sXb + t * sXt;
      Value zv = k.ifElse(hasZ, [&] { return std::vector<Value>{k.load(z, b * sZb + t * sZt + h * sZh + offsP * sZp, maskP, zero)}; },
                          [&] { return std::vector<Value>{k.splat(zero, {BP})}; })[0];
      return std::vector<Value>{k.load(xbc, base + chX * sXc, maskP, zero),
                                k.load(xbc, base + chB * sXc, maskN, zero),
                                k.load(xbc, base + chC * sXc, maskN, zero),
                                k.load(dt, b * sDtB + t * sDtT + h * sDtH), zv};
    };
    k.forLoop(k.constInt(0), L, k.constInt(1), pack(stC, wxC, wbC, wcC), [&](Value t, const std::vector<Value>& v) {
      std::vector<Value> in = loadDraft(t);
      std::vector<Value> wx = unpack(v, 0, 0), wb = unpack(v, 0, 1), wc = unpack(v, 0, 2);
      Value xIn = in[0], zv = in[4];
      Value xPost = convStep(cx, wx, xIn), bPost = convStep(cb, wb, in[1]), cPost = convStep(cc, wc, in[2]);
      Value s = ssmStep(v[0], xPost, bPost, in[3]);
      Value yv = k.reduce(s * k.expandDims(cPost, 0), 1, "sum");
      yv = yv + xPost * Dv;
      yv = k.ifElse(hasZ, [&] { return std::vector<Value>{yv * silu(zv)}; }, [&] { return std::vector<Value>{yv}; })[0];
      k.store(y, b * sYb + t * sYt + h * sYh + offsP * sYp, yv, maskP);
      k.store(xbcCache, slot * sXcSlot + t * sXcT + chX * sXcC, xIn, maskP);
      return pack(s, wx, wb, wc);
    });
  });

  // ---- the row's last program: what every program of the row read, written now that all are
  // done reading it.
  Value nPrograms = H * cdiv(P, k.constInt(BP));
  Value last = k.arriveLast(arrivals, slot, nPrograms);
  k.ifThen(last, [&] {
    Value offsBC = k.range(BBC), maskBC = offsBC < 2 * GN, chBC = HP + offsBC;
    // B/C conv state after the replay: the last W-1 of [state columns, cached drafts 0..c-1]
    // (a copy: every value is an input or a cached draft). Loaded whole before any store.
    k.ifThen(c > 0, [&] {
      std::vector<Value> cols;
      for (int64_t j = 0; j + 1 < W; ++j) {
        Value pos = c + j;  // in [state columns (W-1), drafts]
        Value fromState = pos < W - 1;
        Value sCol = k.minimum(pos, k.constInt(W - 2));
        Value tCached = k.maximum(pos - (W - 1), k.constInt(0));
        Value a = k.load(convState, slot * sCsSlot + chBC * sCsC + sCol * sCsK, maskBC && fromState, zero);
        Value bb = k.load(xbcCache, slot * sXcSlot + tCached * sXcT + chBC * sXcC, maskBC && !fromState, zero);
        cols.push_back(a + bb);  // one of the two is 0 (masked)
      }
      for (int64_t j = 0; j + 1 < W; ++j) k.store(convState, slot * sCsSlot + chBC * sCsC + j * sCsK, cols[j], maskBC);
    });
    k.ifThen(verify, [&] {
      Value offsH = k.range(BH), maskH = offsH < H;
      k.forLoop(k.constInt(0), L, k.constInt(1), {}, [&](Value t, const std::vector<Value>&) {
        Value v = k.load(xbc, b * sXb + t * sXt + chBC * sXc, maskBC, zero);
        k.store(xbcCache, slot * sXcSlot + t * sXcT + chBC * sXcC, v, maskBC);
        Value d = k.load(dt, b * sDtB + t * sDtT + offsH * sDtH, maskH, zero);
        k.store(dtCache, slot * sDcSlot + t * sDcT + offsH * sDcH, d, maskH);
        return std::vector<Value>{};
      });
    });
    k.store(cached, slot * sCached, k.ifElse(verify, [&] { return std::vector<Value>{L}; },
                                              [&] { return std::vector<Value>{k.constInt(0)}; })[0]);
  });
}

// The SSM state row (N) whole in one tile; rows of P so that each thread keeps 16 state values in
// registers across the replayed and verified tokens: the conv windows and weights of the x, B and
// C channels live beside them (ptxas: ~200 registers at P 64, N 128, W 4; 64 values spill).
void chooseMeta(Specialization& s) {
  const int64_t P = s.get("P"), N = s.get("N"), H = s.get("H"), G = s.get("G");
  if (!s.find("meta:num_warps")) s.set("meta:num_warps", 4);
  if (!s.find("meta:BLOCK_N")) s.set("meta:BLOCK_N", std::max<int64_t>(4, nextPow2(N)));
  const int64_t BN = s.get("meta:BLOCK_N");
  if (!s.find("meta:BLOCK_P")) {
    int64_t bp = std::max<int64_t>(1, 16 * 32 * s.get("meta:num_warps") / BN);
    s.set("meta:BLOCK_P", std::min(bp, std::max<int64_t>(1, nextPow2(P))));
  }
  // The B and C conv channels are row vectors of the state tile, each carried through the tokens
  // with its window and weights (~18 of them): spread over all 32 lanes they cost 4 registers
  // each, not 16 (the default layout keeps 8 lanes along N).
  if (!s.find("meta:inner_lanes")) s.set("meta:inner_lanes", 32);
  if (!s.find("meta:BLOCK_H")) s.set("meta:BLOCK_H", std::max<int64_t>(4, nextPow2(H)));
  if (!s.find("meta:BLOCK_BC")) s.set("meta:BLOCK_BC", std::max<int64_t>(4, nextPow2(2 * G * N)));
  if (!s.find("meta:index_bits")) s.set("meta:index_bits", 32);
}

}  // namespace

KernelDef decodeStepKernel() { return {kDecodeStepKernel, build, chooseMeta}; }

}  // namespace ssmjit::kernels
