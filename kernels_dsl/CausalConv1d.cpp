// Causal depthwise conv1d forward, written once in the DSL for both memory orders, dense rows and
// packed rows (cu_seqlens or per-token positions), with initial and final conv states. See
// CausalConv1d.h for the argument contract.
//
// A program streams one block of channels along a chunk of time, one [channels x time] tile at a
// time (oriented so that the memory-contiguous axis is the vector axis). Each x element is loaded
// once: the taps x[t - s] are the current tile shifted along time with the previous tile's tail
// shifted in (sj.shift: register moves and warp shuffles), not W re-reads of memory. Tiles whose
// windows stay inside one sequence (all but those near a sequence start) take a path with no
// per-element test; the others compute each token's position in its sequence and read the taps
// before the start from the initial state (or zeros).
#include "kernels_dsl/CausalConv1d.h"

#include <algorithm>

#include "kernels_dsl/Dsl.h"
#include "kernels_dsl/Registry.h"

namespace ssmjit::kernels {
using namespace dsl;

namespace {

void buildForward(KernelBuilder& k, const Specialization& spec) {
  const int64_t BD = spec.get("meta:BLOCK_D"), BT = spec.get("meta:BLOCK_T"),
                tiles = spec.get("meta:tiles"), W = spec.get("meta:width");
  const bool cl = spec.get("meta:channel_last") != 0;
  const int ta = cl ? 0 : 1;  // the time axis of 2-D tiles
  auto F = PtrClass::Float, Ix = PtrClass::Int;
  auto M = PtrRole::Metadata;
  Value x = k.ptrArg("x", F), w = k.ptrArg("weight", F), bias = k.ptrArg("bias", F),
        out = k.ptrArg("out", F), init = k.ptrArg("init", F);
  Value cu = k.ptrArg("cu", Ix, M), pos = k.ptrArg("pos", Ix, M), initIdx = k.ptrArg("init_idx", Ix, M);
  k.ptrArg("err", Ix, M);
  Value D = k.intArg("D"), L = k.intArg("L"), nseq = k.intArg("nseq"), nslots = k.intArg("nslots"),
        steps = k.intArg("search_steps");
  auto I = [&](const char* n) { return k.intArg(n); };
  Value sXb = I("s_x_b"), sXt = I("s_x_t"), sXd = I("s_x_d"), sWd = I("s_w_d"), sWk = I("s_w_k"),
        sBias = I("s_bias_d"), sOb = I("s_out_b"), sOt = I("s_out_t"), sOd = I("s_out_d"),
        sIs = I("s_init_slot"), sId = I("s_init_d"), sIk = I("s_init_k"), sCu = I("s_cu"),
        sPos = I("s_pos_t"), sIidx = I("s_init_idx");
  Value hasBias = k.flagArg("has_bias"), siluOn = k.flagArg("silu"), hasCu = k.flagArg("has_cu"),
        hasPos = k.flagArg("has_pos"), hasInit = k.flagArg("has_init"),
        hasInitIdx = k.flagArg("has_init_idx");

  Value pidD = k.programId(0), pidC = k.programId(1), row = k.programId(2);
  Value offsD = pidD * BD + k.range(BD), maskD = offsD < D;
  // 1-D tiles along channels / time, made 2-D in the kernel's orientation.
  auto dE = [&](Value v) { return k.expandDims(v, cl ? 0 : 1); };
  auto tE = [&](Value v) { return k.expandDims(v, cl ? 1 : 0); };
  Value dOffs = dE(offsD), mD = dE(maskD), rT = k.range(BT);
  Value zero = k.constFloat(0), zeroI = k.constInt(0);
  std::vector<Value> wk;
  for (int64_t j = 0; j < W; ++j) wk.push_back(dE(k.load(w, offsD * sWd + j * sWk, maskD, zero)));
  Value biasT = k.ifElse(hasBias, [&] { return std::vector<Value>{dE(k.load(bias, offsD * sBias, maskD, zero))}; },
                         [&] { return std::vector<Value>{dE(k.splat(zero, {BD}))}; })[0];

  Value t0 = pidC * (BT * tiles);
  Value xRow = row * sXb, oRow = row * sOb;
  auto xAt = [&](Value tv) { return xRow + tE(tv) * sXt + dOffs * sXd; };

  // The sequence holding t0: its index, first token, and the next sequence's first token.
  Value seq0 = k.ifElse(hasCu, [&] {
    // Largest i with cu[i] <= t0 (cu[0] = 0 <= t0 < cu[nseq] = L).
    auto lohi = k.forLoop(zeroI, steps, k.constInt(1), {zeroI, nseq}, [&](Value, const std::vector<Value>& c) {
      Value mid = (c[0] + c[1]) / 2;
      Value le = k.load(cu, mid * sCu) <= t0;
      return std::vector<Value>{k.select(le, mid, c[0]), k.select(le, c[1], mid)};
    });
    return std::vector<Value>{lohi[0]};
  }, [&] { return std::vector<Value>{row}; })[0];
  auto seqBounds = [&](Value s) {
    return k.ifElse(hasCu, [&] { return std::vector<Value>{k.load(cu, s * sCu), k.load(cu, (s + 1) * sCu)}; },
                    [&] { return std::vector<Value>{zeroI, L + BT}; });
  };
  std::vector<Value> b0 = seqBounds(seq0);

  // The previous tile: only its last W - 1 tokens are ever shifted in.
  Value tPrev = t0 - BT + rT;
  Value prev = k.load(x, xAt(tPrev), tE((tPrev >= 0) && (rT >= BT - (W - 1))) && mD, zero);

  Value nTiles = k.minimum(k.constInt(tiles), cdiv(L - t0, k.constInt(BT)));
  // One masked load a tile (vectorised when L's divisibility class allows), issued a tile ahead:
  // the next tile's load is in flight while this one is computed and stored.
  auto loadTile = [&](Value i) {
    Value tv = t0 + i * BT + rT;
    return k.load(x, xAt(tv), tE((tv < L) && (i < nTiles)) && mD, zero);
  };
  k.forLoop(zeroI, nTiles, k.constInt(1), {prev, loadTile(zeroI), seq0, b0[0], b0[1]},
            [&](Value i, const std::vector<Value>& c) {
    Value prevT = c[0], cur = c[1], seq = c[2], start = c[3], next = c[4];
    Value ahead = loadTile(i + 1);
    Value tt = t0 + i * BT, tv = tt + rT;
    auto conv = [&](const std::function<Value(int)>& tap) {
      Value acc = biasT + wk[W - 1] * cur;
      for (int s = 1; s < W; ++s) acc = acc + wk[W - 1 - s] * tap(s);
      return acc;
    };
    // Every window of this tile inside one sequence: no per-element test.
    Value inside = !hasPos && (tt - start >= W - 1) && (tt + BT <= next);
    std::vector<Value> r = k.ifElse(inside, [&] {
      return std::vector<Value>{conv([&](int s) { return k.shift(cur, prevT, ta, s); }), seq, start, next};
    }, [&] {
      // Each token's position in its sequence (lp) and, for the states, its sequence (seqE).
      std::vector<Value> ps = k.ifElse(hasPos, [&] {
        return std::vector<Value>{k.load(pos, tv * sPos, tv < L, zeroI), k.splat(zeroI, {BT}), seq, start, next};
      }, [&] {
        return k.ifElse(hasCu, [&] {
          // The sequence of the tile's last token: at most BT starts lie in the tile, so it is in
          // [seq, seq + BT] (cu strictly increases).
          Value lastT = k.minimum(tt + BT, L) - 1;
          std::vector<Value> lh = {seq, k.minimum(seq + (BT + 1), nseq)};
          for (int64_t step = 0; step <= log2Ceil(BT + 1); ++step) {
            Value mid = (lh[0] + lh[1]) / 2;
            Value le = k.load(cu, mid * sCu) <= lastT;
            lh = {k.select(le, mid, lh[0]), k.select(le, lh[1], mid)};
          }
          Value seqLast = lh[0];
          auto se = k.forLoop(seq + 1, seqLast + 1, k.constInt(1), {k.splat(start, {BT}), k.splat(seq, {BT})},
                              [&](Value kk, const std::vector<Value>& e) {
            Value bk = k.load(cu, kk * sCu);
            Value after = tv >= bk;
            return std::vector<Value>{k.select(after, bk, e[0]), k.select(after, kk, e[1])};
          });
          std::vector<Value> nb = seqBounds(seqLast);
          return std::vector<Value>{tv - se[0], se[1], seqLast, nb[0], nb[1]};
        }, [&] {  // a dense row: one sequence from token 0
          return std::vector<Value>{tv, k.splat(row, {BT}), seq, start, next};
        });
      });
      Value lp = tE(ps[0]), seqE = ps[1];
      Value slotE = k.ifElse(hasInitIdx, [&] { return std::vector<Value>{k.load(initIdx, seqE * sIidx)}; },
                             [&] { return std::vector<Value>{seqE}; })[0];
      Value slotOk = tE((slotE >= 0) && (slotE < nslots));
      Value slotOffs = tE(slotE) * sIs + dOffs * sId;
      Value acc = conv([&](int s) {
        Value before = lp < s;
        Value fromInit = k.ifElse(hasInit, [&] {
          return std::vector<Value>{k.load(init, slotOffs + (lp + (W - 1 - s)) * sIk,
                                           before && (lp >= 0) && slotOk && mD, zero)};
        }, [&] { return std::vector<Value>{k.splat(zero, cur.shape())}; })[0];
        return k.select(before, fromInit, k.shift(cur, prevT, ta, s));
      });
      return std::vector<Value>{acc, ps[2], ps[3], ps[4]};
    });
    Value y = k.ifElse(siluOn, [&] { return std::vector<Value>{silu(r[0])}; },
                       [&] { return std::vector<Value>{r[0]}; })[0];
    k.store(out, oRow + tE(tv) * sOt + dOffs * sOd, y, tE(tv < L) && mD);
    return std::vector<Value>{cur, ahead, r[1], r[2], r[3]};
  });
}

// Per sequence (and block of channels): check its cu_seqlens entries and slot indices, then write
// its final state
// (the last W - 1 tokens; older columns from its initial state when it is shorter). 1-D tiles
// along channels: the thread that reads a channel's initial state writes its final state, so an
// in-place update (same tensor, same slot) needs no barrier.
void buildFinalState(KernelBuilder& k, const Specialization& spec) {
  const int64_t BD = spec.get("meta:BLOCK_D"), W = spec.get("meta:width");
  auto F = PtrClass::Float, Ix = PtrClass::Int;
  auto M = PtrRole::Metadata;
  Value x = k.ptrArg("x", F), init = k.ptrArg("init", F), fin = k.ptrArg("final", F);
  Value cu = k.ptrArg("cu", Ix, M), initIdx = k.ptrArg("init_idx", Ix, M),
        finalIdx = k.ptrArg("final_idx", Ix, M), err = k.ptrArg("err", Ix, M);
  Value D = k.intArg("D"), L = k.intArg("L"), nseq = k.intArg("nseq"),
        nInit = k.intArg("nslots_init"), nFinal = k.intArg("nslots_final");
  auto I = [&](const char* n) { return k.intArg(n); };
  Value sXb = I("s_x_b"), sXt = I("s_x_t"), sXd = I("s_x_d"), sIs = I("s_init_slot"),
        sId = I("s_init_d"), sIk = I("s_init_k"), sFs = I("s_final_slot"), sFd = I("s_final_d"),
        sFk = I("s_final_k"), sCu = I("s_cu"), sIidx = I("s_init_idx"), sFidx = I("s_final_idx");
  Value hasCu = k.flagArg("has_cu"), hasInit = k.flagArg("has_init"),
        hasInitIdx = k.flagArg("has_init_idx"), hasFinal = k.flagArg("has_final"),
        hasFinalIdx = k.flagArg("has_final_idx");

  Value pidD = k.programId(0), i = k.programId(1);
  Value zero = k.constFloat(0), zeroI = k.constInt(0), code = k.constInt(kErrConvCuSeqlens);
  std::vector<Value> se = k.ifElse(hasCu, [&] {
    return std::vector<Value>{k.load(cu, i * sCu), k.load(cu, (i + 1) * sCu), zeroI};
  }, [&] { return std::vector<Value>{zeroI, L, i}; });
  Value start = se[0], end = se[1], row = se[2];
  Value bad = hasCu && (((i == 0) && (start != 0)) || (end <= start) || ((i == nseq - 1) && (end != L)));
  k.ifThen(bad && (pidD == 0), [&] { k.reportError(err, code, i, start, end); });
  k.returnIf(bad);

  auto slotOf = [&](Value has, Value idx, Value stride, Value n, long long errCode) {
    Value s = k.ifElse(has, [&] { return std::vector<Value>{k.load(idx, i * stride)}; },
                       [&] { return std::vector<Value>{i}; })[0];
    Value badS = (s != -1) && ((s < 0) || (s >= n));
    k.ifThen(badS && (pidD == 0), [&] { k.reportError(err, k.constInt(errCode), i, s, n); });
    return k.select(badS, k.constInt(-1), s);
  };
  Value slotIn = k.ifElse(hasInit, [&] { return std::vector<Value>{slotOf(hasInitIdx, initIdx, sIidx, nInit, kErrConvInitSlot)}; },
                          [&] { return std::vector<Value>{k.constInt(-1)}; })[0];
  k.returnIf(!hasFinal);
  Value slotOut = slotOf(hasFinalIdx, finalIdx, sFidx, nFinal, kErrConvFinalSlot);

  Value offsD = pidD * BD + k.range(BD), maskD = offsD < D;
  Value len = end - start;
  std::vector<Value> cols;
  for (int64_t j = 0; j + 1 < W; ++j) {
    Value p = end - (W - 1) + j;
    Value fromX = p >= start;
    Value xv = k.load(x, row * sXb + p * sXt + offsD * sXd, maskD && fromX, zero);
    Value iv = k.load(init, slotIn * sIs + offsD * sId + (len + j) * sIk,
                      maskD && !fromX && (slotIn >= 0), zero);
    cols.push_back(k.select(fromX, xv, iv));
  }
  k.returnIf(slotOut == -1);
  for (int64_t j = 0; j + 1 < W; ++j) k.store(fin, slotOut * sFs + offsD * sFd + j * sFk, cols[j], maskD);
}

// Forward tiles: the vector axis (channels when channel-last, time otherwise) holds 16 bytes a
// thread. Channel-first: 8 lanes span a time tile of 8 vectors, the warps go along channels.
// Channel-last: a time tile of the next power of two >= W tokens (longer than any shift), one
// token a thread, the rest of the warp and the warps along channels. A program covers `tiles`
// tiles of time (at least 128 tokens: the previous tile's tail is loaded once per program).
void chooseForwardMeta(Specialization& s) {
  const int64_t bytes = std::min(scalarTypeBytes(static_cast<ScalarType>(s.get("dtype:x", 0))),
                                 scalarTypeBytes(static_cast<ScalarType>(s.get("dtype:out", 0))));
  const int64_t vec = 16 / bytes, W = s.get("meta:width");
  if (!s.find("meta:num_warps")) s.set("meta:num_warps", 4);
  const int64_t warps = s.get("meta:num_warps");
  if (s.get("meta:channel_last")) {
    const int64_t bt = std::max<int64_t>(4, nextPow2(W));
    if (!s.find("meta:BLOCK_T")) s.set("meta:BLOCK_T", bt);
    if (!s.find("meta:BLOCK_D")) s.set("meta:BLOCK_D", vec * (32 / bt) * warps);
  } else {
    if (!s.find("meta:BLOCK_T")) s.set("meta:BLOCK_T", std::max<int64_t>(vec * 8, nextPow2(W)));
    if (!s.find("meta:BLOCK_D")) s.set("meta:BLOCK_D", 4 * warps);
  }
  if (!s.find("meta:tiles")) s.set("meta:tiles", std::max<int64_t>(4, 128 / s.get("meta:BLOCK_T")));
  if (!s.find("meta:index_bits")) s.set("meta:index_bits", 32);
}

void chooseFinalStateMeta(Specialization& s) {
  if (!s.find("meta:num_warps")) s.set("meta:num_warps", 2);
  if (!s.find("meta:BLOCK_D")) s.set("meta:BLOCK_D", 256);
  if (!s.find("meta:index_bits")) s.set("meta:index_bits", 32);
}

}  // namespace

KernelDef convForwardKernel() { return {kConvFwdKernel, buildForward, chooseForwardMeta}; }
KernelDef convFinalStateKernel() { return {kConvFinalStateKernel, buildFinalState, chooseFinalStateMeta}; }

}  // namespace ssmjit::kernels
