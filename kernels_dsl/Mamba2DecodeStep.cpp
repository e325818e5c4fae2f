// Mamba-2 decode step with activation replay (Algorithm 2 of the speculative-decoding design), in
// one launch: replay the c accepted drafts of the last verify from the pre-conv cache through the
// conv window and the SSM state, commit both, then run the L new drafts from the corrected state
// (conv, SSM, y per draft) without committing, and cache them for the next replay. The SSM state
// tile and the conv windows stay in registers throughout: the state is read once and written
// once. The B and C conv (shared by every head of a sequence) and dt run once per sequence, in
// its first program, which hands them to the others through the scratch and a flag. See
// Mamba2DecodeStep.h for the argument contract.
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
                BT = spec.get("meta:BLOCK_T"), BC = spec.get("meta:BLOCK_C"),
                W = spec.get("meta:width");
  k.setInnerLanes(static_cast<int>(spec.get("meta:inner_lanes")));
  auto F = PtrClass::Float;
  auto M = [&](const char* n) { return k.ptrArg(n, PtrClass::Int, PtrRole::Metadata); };
  Value convState = k.ptrArg("conv_state", F), ssmState = k.ptrArg("ssm_state", F),
        xbcCache = k.ptrArg("xbc_cache", F), dtCache = k.ptrArg("dt_cache", F), convW = k.ptrArg("conv_w", F),
        convB = k.ptrArg("conv_b", F), A = k.ptrArg("A", F), Dp = k.ptrArg("D", F), dtBias = k.ptrArg("dt_bias", F),
        xbc = k.ptrArg("xbc", F), dt = k.ptrArg("dt", F), z = k.ptrArg("z", F), y = k.ptrArg("y", F),
        ws = k.ptrArg("ws", F);
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
  Value sWsSlot = I("s_ws_slot"), sWsT = I("s_ws_t");
  Value sIdx = I("s_idx_b"), sAcc = I("s_acc_b"), sCached = I("s_cached");
  Value hasConvBias = k.flagArg("has_conv_bias"), hasD = k.flagArg("has_D"), hasZ = k.flagArg("has_z"),
        hasDtBias = k.flagArg("has_dt_bias"), softplusOn = k.flagArg("dt_softplus"),
        hasClamp = k.flagArg("has_clamp"), hasIdx = k.flagArg("has_state_idx"), replay = k.flagArg("replay"),
        verify = k.flagArg("verify");

  Value pidP = k.programId(0), h = k.programId(1), b = k.programId(2);
  Value first = (pidP == 0) && (h == 0);  // the row's lowest block id

  // The row's slot (-1: pad, skipped by all its programs: none touches its flag or counter).
  Value slot = k.ifElse(hasIdx, [&] { return std::vector<Value>{k.load(stateIdx, b * sIdx)}; },
                        [&] { return std::vector<Value>{b}; })[0];
  k.returnIf(slot == -1);
  Value badSlot = (slot < 0) || (slot >= nslots);
  k.ifThen(badSlot && first, [&] { k.reportError(err, k.constInt(kErrDecodeSlot), b, slot, nslots); });
  k.returnIf(badSlot);
  Value c = k.ifElse(replay, [&] { return std::vector<Value>{k.load(accepted, b * sAcc)}; },
                     [&] { return std::vector<Value>{k.constInt(0)}; })[0];

  Value zero = k.constFloat(0);
  Value HP = H * P, GN = G * N;
  // Conv channels: a tile of them, its window (W - 1 columns, oldest first), weights and bias.
  struct Conv {
    Value ch, mask;
    std::vector<Value> win, w;
    Value bias;
  };
  auto loadConv = [&](Value ch, Value mask, int64_t n) {
    Conv cv{ch, mask, {}, {}, {}};
    for (int64_t j = 0; j + 1 < W; ++j) cv.win.push_back(k.load(convState, slot * sCsSlot + ch * sCsC + j * sCsK, mask, zero));
    for (int64_t j = 0; j < W; ++j) cv.w.push_back(k.load(convW, ch * sWc + j * sWk, mask, zero));
    cv.bias = k.ifElse(hasConvBias, [&] { return std::vector<Value>{k.load(convB, ch * sCb, mask, zero)}; },
                       [&] { return std::vector<Value>{k.splat(zero, {n})}; })[0];
    return cv;
  };
  // One conv step (as causal_conv1d_update computes it): the SiLU output for token v; the window
  // slides by one.
  auto convStep = [&](const Conv& cv, std::vector<Value>& win, Value v) {
    Value acc = cv.bias + cv.w[W - 1] * v;
    for (int64_t j = 0; j + 1 < W; ++j) acc = acc + cv.w[j] * win[j];
    win.erase(win.begin());
    win.push_back(v);
    return silu(acc);
  };
  auto wsRow = [&](Value t) { return slot * sWsSlot + t * sWsT; };
  Value flagAt = slot * 2 + 1;

  // ---- the row's first program: the B/C conv and dt of every replayed and new token at once,
  // as [tokens, channels] tiles over the row's "virtual sequence" (the W - 1 conv state columns,
  // the c cached drafts, the L new drafts), into the scratch; then the flag; then the B/C conv
  // state committed and the drafts' B/C and dt cached.
  k.ifThen(first, [&] {
    Value nCached = k.load(cached, slot * sCached);
    Value bad = (c < 0) || (c > nCached);
    k.ifThen(bad, [&] { k.reportError(err, k.constInt(kErrDecodeAccepted), b, c, nCached); });
    Value nTok = c + k.ifElse(verify, [&] { return std::vector<Value>{L}; },
                              [&] { return std::vector<Value>{k.constInt(0)}; })[0];
    Value offsT = k.range(BT), tok = k.expandDims(offsT, 1), rowOk = tok < nTok;
    // in(pos) for a [tokens, 1] tile of virtual positions and a [1, BN] tile of channels.
    auto virtualIn = [&](Value pos, Value ch2, Value m2) {
      Value fromState = pos < 0, fromCache = (pos >= 0) && (pos < c), fromDraft = (pos >= c) && (pos < nTok);
      Value vs = k.load(convState, slot * sCsSlot + ch2 * sCsC + (pos + (W - 1)) * sCsK, m2 && fromState, zero);
      Value vc = k.load(xbcCache, slot * sXcSlot + pos * sXcT + ch2 * sXcC, m2 && fromCache, zero);
      Value vd = k.load(xbc, b * sXb + (pos - c) * sXt + ch2 * sXc, m2 && fromDraft, zero);
      return vs + vc + vd;  // two of the three are 0 (masked)
    };
    k.ifThen(!bad, [&] {
      // The 2GN channels B | C in chunks of BC (scratch column = channel - H*P).
      for (int64_t j = 0; j < spec.get("meta:bc_chunks"); ++j) {
        Value col = j * BC + k.range(BC), maskC = col < 2 * GN;
        Value ch1 = HP + col, ch2 = k.expandDims(ch1, 0), m2 = k.expandDims(maskC, 0);
        auto wk = [&](int64_t q) { return k.expandDims(k.load(convW, ch1 * sWc + q * sWk, maskC, zero), 0); };
        Value bias = k.ifElse(hasConvBias, [&] { return std::vector<Value>{k.expandDims(k.load(convB, ch1 * sCb, maskC, zero), 0)}; },
                              [&] { return std::vector<Value>{k.splat(zero, {1, BC})}; })[0];
        // As causal_conv1d_update sums: bias + w[W-1] x(t), then w[q] x(t - (W-1) + q).
        Value acc = bias + wk(W - 1) * virtualIn(tok, ch2, m2);
        for (int64_t q = 0; q + 1 < W; ++q) acc = acc + wk(q) * virtualIn(tok - (W - 1) + q, ch2, m2);
        k.store(ws, slot * sWsSlot + tok * sWsT + k.expandDims(col, 0), silu(acc), m2 && rowOk);
      }
      Value offsH = k.range(BH), h2 = k.expandDims(offsH, 0), mH2 = k.expandDims(offsH < H, 0);
      Value dc = k.load(dtCache, slot * sDcSlot + tok * sDcT + h2 * sDcH, mH2 && (tok < c), zero);
      Value dd = k.load(dt, b * sDtB + (tok - c) * sDtT + h2 * sDtH, mH2 && (tok >= c) && rowOk, zero);
      k.store(ws, slot * sWsSlot + tok * sWsT + 2 * GN + h2, dc + dd, mH2 && rowOk);
    });
    k.setFlag(arrivals, flagAt, k.select(bad, k.constInt(2), k.constInt(1)));
    k.ifThen(!bad, [&] {
      // The committed B/C window: in(c - (W-1) + q). Per chunk of channels, each thread loads its
      // channels' columns whole before it stores any (the stores are its own channels only).
      k.ifThen(c > 0, [&] {
        for (int64_t j = 0; j < spec.get("meta:bc_chunks"); ++j) {
          Value col = j * BC + k.range(BC), chC = HP + col, mC = col < 2 * GN;
          std::vector<Value> cols;
          for (int64_t q = 0; q + 1 < W; ++q) {
            Value pos = c - (W - 1) + q;
            Value vs = k.load(convState, slot * sCsSlot + chC * sCsC + k.maximum(pos + (W - 1), k.constInt(0)) * sCsK, mC && (pos < 0), zero);
            Value vc = k.load(xbcCache, slot * sXcSlot + k.maximum(pos, k.constInt(0)) * sXcT + chC * sXcC, mC && (pos >= 0), zero);
            cols.push_back(vs + vc);
          }
          for (int64_t q = 0; q + 1 < W; ++q) k.store(convState, slot * sCsSlot + chC * sCsC + q * sCsK, cols[q], mC);
        }
      });
      k.barrier();  // every read of the cached drafts is done before they are overwritten
      k.ifThen(verify, [&] {  // the drafts' B/C and dt into the cache
        Value okT = tok < L;
        for (int64_t j = 0; j < spec.get("meta:bc_chunks"); ++j) {
          Value col = k.expandDims(j * BC + k.range(BC), 0), mC2 = (col < 2 * GN) && okT;
          k.store(xbcCache, slot * sXcSlot + tok * sXcT + (HP + col) * sXcC,
                  k.load(xbc, b * sXb + tok * sXt + (HP + col) * sXc, mC2, zero), mC2);
        }
        Value h2 = k.expandDims(k.range(BH), 0), mH2 = h2 < H;
        k.store(dtCache, slot * sDcSlot + tok * sDcT + h2 * sDcH,
                k.load(dt, b * sDtB + tok * sDtT + h2 * sDtH, mH2 && okT, zero), mH2 && okT);
      });
      k.store(cached, slot * sCached, k.ifElse(verify, [&] { return std::vector<Value>{L}; },
                                                [&] { return std::vector<Value>{k.constInt(0)}; })[0]);
    });
  });
  Value ready = k.waitFlag(arrivals, flagAt) == 1;

  // ---- every program: its SSM state rows and x conv channels.
  k.ifThen(ready, [&] {
    Value offsP = pidP * BP + k.range(BP), offsN = k.range(BN);
    Value maskP = offsP < P, maskN = offsN < N;
    Value mask2 = k.expandDims(maskP, 1) && k.expandDims(maskN, 0);
    Value g = h / (H / G);
    Value chX = h * P + offsP;
    auto ssmOffsets = [&] {
      return slot * sSsSlot + h * sSsH + k.expandDims(offsP, 1) * sSsP + k.expandDims(offsN, 0) * sSsN;
    };
    Value st = k.load(ssmState, ssmOffsets(), mask2, zero);
    Conv cx = loadConv(chX, maskP, BP);
    Value Ahead = k.load(A, h * sAh);
    Value biasHead = k.ifElse(hasDtBias, [&] { return std::vector<Value>{k.load(dtBias, h * sDtbH)}; },
                              [&] { return std::vector<Value>{zero}; })[0];
    Value Dv = k.ifElse(hasD, [&] { return std::vector<Value>{k.load(Dp, h * sDh)}; },
                        [&] { return std::vector<Value>{zero}; })[0];
    // One SSM step (as selective_state_update computes it for Mamba-2): the new state.
    auto ssmStep = [&](Value s, Value xPost, Value bPost, Value dtRaw) {
      Value d = dtRaw + biasHead;
      d = k.ifElse(softplusOn, [&] { return std::vector<Value>{softplus(d)}; },
                   [&] { return std::vector<Value>{d}; })[0];
      d = k.ifElse(hasClamp, [&] { return std::vector<Value>{k.minimum(k.maximum(d, dtMin), dtMax)}; },
                   [&] { return std::vector<Value>{d}; })[0];
      Value decay = k.splat(k.exp(Ahead * d), {BP, BN});
      return s * decay + k.expandDims(bPost, 0) * k.expandDims(k.splat(d, {BP}) * xPost, 1);
    };
    auto bAt = [&](Value t) { return k.load(ws, wsRow(t) + g * N + offsN, maskN, zero); };
    auto dtAt = [&](Value t) { return k.load(ws, wsRow(t) + 2 * GN + h); };
    auto pack = [&](Value s, const std::vector<Value>& wx) {
      std::vector<Value> v{s};
      v.insert(v.end(), wx.begin(), wx.end());
      return v;
    };

    // Replay: cached drafts 0..c-1, then commit what this program owns.
    std::vector<Value> replayed = k.forLoop(k.constInt(0), c, k.constInt(1), pack(st, cx.win), [&](Value t, const std::vector<Value>& v) {
      std::vector<Value> wx(v.begin() + 1, v.end());
      Value xPost = convStep(cx, wx, k.load(xbcCache, slot * sXcSlot + t * sXcT + chX * sXcC, maskP, zero));
      return pack(ssmStep(v[0], xPost, bAt(t), dtAt(t)), wx);
    });
    std::vector<Value> wxC(replayed.begin() + 1, replayed.end());
    k.ifThen(c > 0, [&] {
      k.store(ssmState, ssmOffsets(), replayed[0], mask2);
      for (int64_t j = 0; j + 1 < W; ++j) k.store(convState, slot * sCsSlot + chX * sCsC + j * sCsK, wxC[j], maskP);
    });

    // Verify: the L drafts from the corrected state; y per draft; the x drafts into the cache.
    k.ifThen(verify, [&] {
      k.forLoop(k.constInt(0), L, k.constInt(1), pack(replayed[0], wxC), [&](Value t, const std::vector<Value>& v) {
        std::vector<Value> wx(v.begin() + 1, v.end());
        Value xIn = k.load(xbc, b * sXb + t * sXt + chX * sXc, maskP, zero);
        Value xPost = convStep(cx, wx, xIn);
        Value s = ssmStep(v[0], xPost, bAt(c + t), dtAt(c + t));
        Value cPost = k.load(ws, wsRow(c + t) + GN + g * N + offsN, maskN, zero);
        Value yv = k.reduce(s * k.expandDims(cPost, 0), 1, "sum");
        yv = yv + xPost * Dv;
        yv = k.ifElse(hasZ, [&] {
               Value zv = k.load(z, b * sZb + t * sZt + h * sZh + offsP * sZp, maskP, zero);
               return std::vector<Value>{yv * silu(zv)};
             }, [&] { return std::vector<Value>{yv}; })[0];
        k.store(y, b * sYb + t * sYt + h * sYh + offsP * sYp, yv, maskP);
        k.store(xbcCache, slot * sXcSlot + t * sXcT + chX * sXcC, xIn, maskP);
        return pack(s, wx);
      });
    });
  });

  // The row's last program clears the flag for the next launch (every program has read it).
  Value last = k.arriveLast(arrivals, slot * 2, H * cdiv(P, k.constInt(BP)));
  k.ifThen(last, [&] { k.store(arrivals, flagAt, k.constInt(0)); });
}

// The SSM state row (N) whole in one tile; rows of P so that each thread keeps 64 state values in
// registers across the replayed and verified tokens, beside its rows' conv windows and weights;
// 8 lanes along N, so that the per-row work (x conv, SiLU of x and z), which the lanes along N
// repeat, is shared by 4 rows of lanes. Measured on an H100 (H 80, P 64, N 128, batch 64, L 8;
// verify / fused, us): 64 rows, 8 lanes 415 / 574; 32 rows, 32 lanes 409 / 714; 32, 8: 497 / 670;
// 64, 16: 531 / 729; 16, 8: 645 / 837.
void chooseMeta(Specialization& s) {
  const int64_t P = s.get("P"), N = s.get("N"), H = s.get("H"), G = s.get("G");
  if (!s.find("meta:num_warps")) s.set("meta:num_warps", 4);
  if (!s.find("meta:BLOCK_N")) s.set("meta:BLOCK_N", std::max<int64_t>(4, nextPow2(N)));
  const int64_t BN = s.get("meta:BLOCK_N");
  if (!s.find("meta:BLOCK_P")) {
    // Wider convs and state rows past 128 leave room for 32 values a thread (ptxas spills at 64).
    const int64_t perThread = s.get("meta:width") <= 4 && BN <= 128 ? 64 : 32;
    int64_t bp = std::max<int64_t>(1, perThread * 32 * s.get("meta:num_warps") / BN);
    s.set("meta:BLOCK_P", std::min(bp, std::max<int64_t>(1, nextPow2(P))));
    // Small heads: fewer warps, so that every thread holds a few state values (a reduction
    // along N needs at least one element a thread).
    int64_t warps = s.get("meta:num_warps");
    while (warps > 1 && s.get("meta:BLOCK_P") * BN < 4 * 32 * warps) warps /= 2;
    s.set("meta:num_warps", warps);
  }
  if (!s.find("meta:inner_lanes")) s.set("meta:inner_lanes", 8);
  // The first program's B/C conv: [tokens, 64 channels] tiles (wider ones spill at W 8).
  if (!s.find("meta:BLOCK_C")) s.set("meta:BLOCK_C", std::min<int64_t>(64, std::max<int64_t>(4, nextPow2(2 * G * N))));
  s.set("meta:bc_chunks", (2 * G * N + s.get("meta:BLOCK_C") - 1) / s.get("meta:BLOCK_C"));
  // The first program's [tokens, channels] tiles: every replayed and new token.
  if (!s.find("meta:BLOCK_T")) s.set("meta:BLOCK_T", std::max<int64_t>(2, nextPow2(s.get("Lc") + s.get("L"))));
  if (!s.find("meta:BLOCK_H")) s.set("meta:BLOCK_H", std::max<int64_t>(4, nextPow2(H)));
  if (!s.find("meta:index_bits")) s.set("meta:index_bits", 32);
}

}  // namespace

KernelDef decodeStepKernel() { return {kDecodeStepKernel, build, chooseMeta}; }

}  // namespace ssmjit::kernels
