// Mamba-2 decode step with activation replay (Algorithm 2 of the speculative-decoding design), in
// one launch: replay the c accepted drafts of the last verify from the pre-conv cache through the
// conv window and the SSM state, commit both, then run the L new drafts from the corrected state
// (conv, SSM, y per draft) without committing, and cache them for the next replay. A program
// stages every token's conv outputs, B, C and dt in shared memory at once, then runs the tokens
// with the SSM state tile in registers: the state is read once and written once. No program
// waits for another: each runs the B and C conv of its group itself, once for its heads (several
// at large batches). See Mamba2DecodeStep.h for the argument contract.
//
// Deferred commit (the twin kernel): the committed states are a checkpoint and the ring holds the
// r tokens accepted since it; the replay is the ring's tokens then the c accepted drafts, from the
// checkpoint, and writes the states only when r + c would overflow the ring (or with replay
// only), after which the ring is empty; otherwise the c drafts are appended to the ring. Either
// way the new drafts run from the state after the r + c tokens, with the same per-token math.
//
// The per-token math is written exactly as the one-token kernels write it (CausalConv1dUpdate,
// SelectiveStateUpdate), so replaying a token gives the same fp32 results as decoding it alone.
#include "kernels_dsl/decode/Mamba2DecodeStep.h"

#include <algorithm>

#include "kernels_dsl/Dsl.h"
#include "kernels_dsl/MetaDefaults.h"
#include "kernels_dsl/Registry.h"

namespace ssmjit::kernels {
using namespace dsl;

namespace {

// The shared memory (f32) a step may take to stage all its tokens at once: 80 KiB.
constexpr int64_t kOneChunkFloats = 20480;

void build(KernelBuilder& k, const Specialization& spec, bool deferred) {
  const int64_t BP = spec.get("meta:BLOCK_P"), BN = spec.get("meta:BLOCK_N"), BH = spec.get("meta:BLOCK_H"),
                BT = spec.get("meta:BLOCK_T"), BC = spec.get("meta:BLOCK_C"), W = spec.get("meta:width");
  k.setInnerLanes(static_cast<int>(spec.get("meta:inner_lanes")));
  auto M = [&](const char* n) { return k.arg(n); };
  Value convState = k.arg("conv_state"), ssmState = k.arg("ssm_state"), xbcCache = k.arg("xbc_cache"),
        dtCache = k.arg("dt_cache"), convW = k.arg("conv_w"), convB = k.arg("conv_b"), A = k.arg("A"), Dp = k.arg("D"),
        dtBias = k.arg("dt_bias"), xbc = k.arg("xbc"), dt = k.arg("dt"), z = k.arg("z"), y = k.arg("y");
  Value stateIdx = M("state_idx"), accepted = M("accepted"), cached = M("cached"), arrivals = M("arrivals"),
        err = M("err");
  auto I = [&](const char* n) { return k.arg(n); };
  I("batch");
  Value nslots = I("nslots"), H = I("H"), P = I("P"), N = I("N"), G = I("G"), L = I("L"), Lc = I("Lc"), hpp = I("hpp");
  Value dtMin = k.arg("dt_min"), dtMax = k.arg("dt_max");
  Value sCsSlot = I("s_cs_slot"), sCsC = I("s_cs_c"), sCsK = I("s_cs_k");
  Value sSsSlot = I("s_ss_slot"), sSsH = I("s_ss_h"), sSsP = I("s_ss_p"), sSsN = I("s_ss_n");
  Value sXcSlot = I("s_xc_slot"), sXcT = I("s_xc_t"), sXcC = I("s_xc_c");
  Value sDcSlot = I("s_dc_slot"), sDcT = I("s_dc_t"), sDcH = I("s_dc_h");
  Value sWc = I("s_w_c"), sWk = I("s_w_k"), sCb = I("s_cb_c"), sAh = I("s_A_h"), sDh = I("s_D_h"), sDtbH = I("s_dtb_h");
  Value sXb = I("s_xbc_b"), sXt = I("s_xbc_t"), sXc = I("s_xbc_c");
  Value sDtB = I("s_dt_b"), sDtT = I("s_dt_t"), sDtH = I("s_dt_h");
  Value sZb = I("s_z_b"), sZt = I("s_z_t"), sZh = I("s_z_h"), sZp = I("s_z_p");
  Value sYb = I("s_y_b"), sYt = I("s_y_t"), sYh = I("s_y_h"), sYp = I("s_y_p");
  Value sIdx = I("s_idx_b"), sAcc = I("s_acc_b"), sCached = I("s_cached");
  Value hasConvBias = k.arg("has_conv_bias"), hasD = k.arg("has_D"), hasZ = k.arg("has_z"),
        hasDtBias = k.arg("has_dt_bias"), softplusOn = k.arg("dt_softplus"), hasClamp = k.arg("has_clamp"),
        hasIdx = k.arg("has_state_idx"), replay = k.arg("replay"), verify = k.arg("verify");
  (void)hasZ;  // read from the specialisation: it decides the shared-memory plan
  Value xbcRing, dtRing, ring, Rv, sXrSlot, sXrT, sXrC, sDrSlot, sDrT, sDrH, sRing;
  if (deferred) {
    xbcRing = k.arg("xbc_ring"), dtRing = k.arg("dt_ring"), ring = M("ring"), Rv = I("R");
    sXrSlot = I("s_xr_slot"), sXrT = I("s_xr_t"), sXrC = I("s_xr_c");
    sDrSlot = I("s_dr_slot"), sDrT = I("s_dr_t"), sDrH = I("s_dr_h"), sRing = I("s_ring");
  }
  const bool verifies = spec.get("verify") != 0;

  Value pidP = k.programId(0), hb = k.programId(1), b = k.programId(2);
  Value first = (pidP == 0) && (hb == 0);  // the row's lowest block id: reports the row's errors

  // The row's slot (-1: pad, skipped by all its programs: none touches its counter).
  Value slot = k.ifElse(
      hasIdx, [&] { return std::vector<Value>{k.load(stateIdx, b * sIdx)}; }, [&] { return std::vector<Value>{b}; })[0];
  k.returnIf(slot == -1);
  Value badSlot = (slot < 0) || (slot >= nslots);
  k.ifThen(badSlot && first, [&] { k.reportError(err, k.constInt(kErrDecodeSlot), b, slot, nslots); });
  k.returnIf(badSlot);
  // Every program of the row reads the same count and bound (only the row's last program writes
  // `cached`, after all have read it), so all skip a bad row alike.
  Value c = k.ifElse(
      replay, [&] { return std::vector<Value>{k.load(accepted, b * sAcc)}; },
      [&] { return std::vector<Value>{k.constInt(0)}; })[0];
  Value bound = k.ifElse(
      replay, [&] { return std::vector<Value>{k.minimum(k.load(cached, slot * sCached), Lc)}; },
      [&] { return std::vector<Value>{k.constInt(0)}; })[0];
  Value bad = (c < 0) || (c > bound);
  k.ifThen(bad && first, [&] { k.reportError(err, k.constInt(kErrDecodeAccepted), b, c, bound); });
  k.returnIf(bad);
  // Deferred: the ring's count r (read by every program before the last writes it), checked as c
  // is. The replay is the ring's r tokens, then the c accepted drafts.
  Value r, nRep = c, commitNow, appendNow;
  if (deferred) {
    r = k.load(ring, slot * sRing);
    Value badRing = (r < 0) || (r > Rv);
    k.ifThen(badRing && first, [&] { k.reportError(err, k.constInt(kErrDecodeRing), b, r, Rv); });
    k.returnIf(badRing);
    nRep = r + c;
    // The states are written when the ring cannot take the c drafts (R >= 1: then nRep > 0), or
    // with replay only, which empties the ring; else the drafts go to the ring.
    commitNow = verifies ? nRep > Rv : nRep > 0;
    appendNow = verifies ? (nRep <= Rv) && (c > 0) : k.constBool(false);
  }
  // Whether the replay writes the states (in place of `c > 0`, built at each use as before).
  auto commits = [&] { return deferred ? commitNow : c > 0; };
  Value nTok =
      nRep + k.ifElse(
                 verify, [&] { return std::vector<Value>{L}; }, [&] { return std::vector<Value>{k.constInt(0)}; })[0];

  Value zero = k.constFloat(0);
  Value HP = H * P, GN = G * N;
  Value offsP = pidP * BP + k.range(BP), offsN = k.range(BN);
  Value maskP = offsP < P, maskN = offsN < N;
  Value mask2 = k.expandDims(maskP, 1) && k.expandDims(maskN, 0);
  Value g = (hb * hpp) / (H / G);  // the program's heads share one group (hpp divides H / G)
  auto dtTransform = [&](Value d) { return dsl::dtTransform(d, softplusOn, hasClamp, dtMin, dtMax); };

  // The row's "virtual sequence": the W - 1 conv state columns (positions < 0), the c cached
  // drafts (0 <= pos < c), the L new drafts (c <= pos < nTok). in(pos) for a [rows, 1] tile of
  // positions and a [1, n] tile of channels. Deferred: the ring's r tokens come first
  // (0 <= pos < r), the cached drafts after them (r <= pos < nRep).
  auto virtualIn = [&](Value pos, Value ch2, Value m2) {
    if (deferred) {
      Value fromState = pos < 0, fromRing = (pos >= 0) && (pos < r), fromCache = (pos >= r) && (pos < nRep),
            fromDraft = (pos >= nRep) && (pos < nTok);
      Value vs = k.load(convState, slot * sCsSlot + ch2 * sCsC + (pos + (W - 1)) * sCsK, m2 && fromState, zero);
      Value vr = k.load(xbcRing, slot * sXrSlot + pos * sXrT + ch2 * sXrC, m2 && fromRing, zero);
      Value vc = k.load(xbcCache, slot * sXcSlot + (pos - r) * sXcT + ch2 * sXcC, m2 && fromCache, zero);
      Value vd = k.load(xbc, b * sXb + (pos - nRep) * sXt + ch2 * sXc, m2 && fromDraft, zero);
      return vs + vr + vc + vd;  // three of the four are 0 (masked)
    }
    Value fromState = pos < 0, fromCache = (pos >= 0) && (pos < c), fromDraft = (pos >= c) && (pos < nTok);
    Value vs = k.load(convState, slot * sCsSlot + ch2 * sCsC + (pos + (W - 1)) * sCsK, m2 && fromState, zero);
    Value vc = k.load(xbcCache, slot * sXcSlot + pos * sXcT + ch2 * sXcC, m2 && fromCache, zero);
    Value vd = k.load(xbc, b * sXb + (pos - c) * sXt + ch2 * sXc, m2 && fromDraft, zero);
    return vs + vc + vd;  // two of the three are 0 (masked)
  };

  // Each program stages the math inputs of BT tokens at a time in shared memory, as [row, place]
  // f32 rows, so that the token loop waits on memory once a chunk, not once a token. Every program
  // runs the B/C conv it needs itself (a few KB of L2 reads, once for its hpp heads) instead of
  // waiting for another program's. First the conv inputs of the chunk's tokens and their W - 1
  // predecessors ("raw" rows: B and C of the group, x of the head's rows), all loads in flight at
  // once; then the convs from shared memory, written over the first TS raw rows: post-conv B, C
  // and x of token r at row r. Beside them: dt' x, silu(z), exp(A dt') and dt' per token. B and
  // C rows hold place n at n + 4 (n / 32), as the state update kernel's do.
  // The tiles span BT tokens (a power of two); the rows, TS: where one chunk holds every token,
  // only the maxTokens its tokens can fill (24 rows of BT 32 at R 8, L 8), so that the rows of a
  // deep ring fit more programs an SM.
  const int64_t maxTokens = (spec.get("replay") ? spec.get("Lc") : 0) + spec.get("R", 0) + spec.get("L");
  const bool oneChunk = BT >= maxTokens;
  const int64_t TS = oneChunk ? maxTokens : BT;
  const int64_t R = TS + W - 1, RT = nextPow2(R), BNp = BN + BN / 32 * 4;
  const bool withZ = spec.get("has_z") != 0;
  auto padN = [&](Value n) { return n + (n / 32) * 4; };
  // The conv weights (W rows) and bias (a row) of B, C and x sit beside their raw rows, staged with
  // them: their loads are in flight with the raw rows', instead of a memory latency after the
  // barrier.
  const int64_t oC = R * BNp, oX = 2 * R * BNp, oDtx = oX + R * BP, oZ = oDtx + TS * BP,
                oDec = oZ + (withZ ? TS * BP : 0), oDt = oDec + kMaxHeadsPerProgram * TS,
                oWB = oDt + kMaxHeadsPerProgram * TS, oWC = oWB + (W + 1) * BNp, oWX = oWC + (W + 1) * BNp;
  // Past 48 KiB (a deep ring staged in one chunk) the rows go to dynamic shared memory.
  const int64_t smemFloats = oWX + (W + 1) * BP;
  Value smem = smemFloats > kMaxSharedBufferFloats ? k.sharedBuffer(smemFloats, DType::F32) : k.sharedBuffer(smemFloats);
  Value tr = k.range(BT), tC = k.expandDims(tr, 1);  // [BT], [BT, 1]
  // Tile rows past TS are not stored (tStaged, none when TS = BT) and read the last staged row
  // (tRow): no token uses what they compute, and no read leaves the rows.
  Value tStaged = TS < BT ? tC < TS : Value{}, tRow = TS < BT ? k.minimum(tC, k.constInt(TS - 1)) : tC;
  Value rC = k.expandDims(k.range(RT), 1);           // [RT, 1]
  Value nR = k.expandDims(offsN, 0), mN2 = k.expandDims(maskN, 0);
  // The [rows, P] tiles spread P along the lanes (written so that CSE does not fold them into
  // maskP and the state's row offsets: a 1-D tile has one layout).
  Value pLoc = k.range(BP), pR = k.expandDims(pLoc, 0), maskP0 = pLoc < P - pidP * BP, mP2 = k.expandDims(maskP0, 0);
  Value chB = HP + g * N + offsN, chC = HP + GN + g * N + offsN;
  auto xChannels = [&](Value h) { return (h * P + pidP * BP) + pLoc; };  // head h's x rows, as [BP]
  auto ssmOffsets = [&](Value h) {
    return slot * sSsSlot + h * sSsH + k.expandDims(offsP, 1) * sSsP + k.expandDims(offsN, 0) * sSsN;
  };
  // Channels ch2 ([1, n], mask m2)'s conv weights and bias to their rows at `oW` (row stride
  // `rs`, places `at`): W weight rows, then the bias (0 without one).
  const int64_t WR = nextPow2(W + 1);
  Value wR = k.expandDims(k.range(WR), 1);  // [WR, 1]
  auto stageWeights = [&](int64_t oW, int64_t rs, Value at, Value ch2, Value m2) {
    Value w = k.load(convW, ch2 * sWc + k.minimum(wR, k.constInt(W - 1)) * sWk, m2 && (wR < W), zero);
    Value bias = k.ifElse(
        hasConvBias, [&] { return std::vector<Value>{k.load(convB, ch2 * sCb, m2, zero)}; },
        [&] {
          return std::vector<Value>{k.splat(zero, {1, ch2.shape()[1]})};
        })[0];
    k.store(smem, oW + wR * rs + at, k.select(wR == W, k.broadcastTo(bias, w.shape()), w), wR <= W);
  };
  // The SiLU conv of the chunk's tokens from the raw rows at `o` (row stride `rs`, places `at`)
  // with the weights at `oW`: bias + w[W-1] x(t), then w[q] x(t - (W-1) + q), as
  // causal_conv1d_update sums.
  auto convRows = [&](int64_t o, int64_t oW, int64_t rs, Value at) {
    auto wk = [&](int64_t q) { return k.load(smem, oW + q * rs + at); };
    auto raw = [&](int64_t q) { return k.load(smem, o + (tRow + q) * rs + at); };
    Value bias = wk(W);
    Value acc = bias + wk(W - 1) * raw(W - 1);
    for (int64_t q = 0; q + 1 < W; ++q) acc = acc + wk(q) * raw(q);
    return silu(acc);
  };
  const int64_t LB = std::max<int64_t>(1, nextPow2(spec.get("L")));
  Value lr = k.expandDims(k.range(LB), 1);  // [LB, 1]
  // Deferred: the accepted drafts' rows, [nextPow2(Lc), 1] (c <= Lc).
  Value cr = deferred ? k.expandDims(k.range(nextPow2(spec.get("Lc"))), 1) : Value{};
  // The group's B and C of tokens v0.., and dt' and exp(A dt') of the program's heads (at most
  // kMaxHeadsPerProgram): after this the program reads no data its row shares but x.
  const int64_t HB = kMaxHeadsPerProgram;
  auto stageBC = [&](Value v0) {
    Value pos = v0 - (W - 1) + rC, okR = rC < R;  // raw row r: position v0 - (W-1) + r
    // Places past N get 0, which the token loop reads unmasked.
    k.store(smem, rC * BNp + padN(nR), virtualIn(pos, k.expandDims(chB, 0), okR && mN2), okR);
    k.store(smem, oC + rC * BNp + padN(nR), virtualIn(pos, k.expandDims(chC, 0), okR && mN2), okR);
    stageWeights(oWB, BNp, padN(nR), k.expandDims(chB, 0), mN2);
    stageWeights(oWC, BNp, padN(nR), k.expandDims(chC, 0), mN2);
    Value v1 = v0 + tC, ok1 = v1 < nTok, hs = hb * hpp + k.expandDims(k.range(HB), 0);  // [BT, 1], [1, HB]
    Value okH = (hs < hb * hpp + hpp) && (hs < H);
    Value dRaw;
    if (deferred)
      dRaw =
          k.load(dtRing, slot * sDrSlot + v1 * sDrT + hs * sDrH, ok1 && okH && (v1 < r), zero) +
          k.load(dtCache, slot * sDcSlot + (v1 - r) * sDcT + hs * sDcH, ok1 && okH && (v1 >= r) && (v1 < nRep), zero) +
          k.load(dt, b * sDtB + (v1 - nRep) * sDtT + hs * sDtH, ok1 && okH && (v1 >= nRep), zero);
    else
      dRaw = k.load(dtCache, slot * sDcSlot + v1 * sDcT + hs * sDcH, ok1 && okH && (v1 < c), zero) +
             k.load(dt, b * sDtB + (v1 - c) * sDtT + hs * sDtH, ok1 && okH && (v1 >= c), zero);
    Value bias = k.ifElse(
        hasDtBias, [&] { return std::vector<Value>{k.load(dtBias, hs * sDtbH, okH, zero)}; },
        [&] {
          return std::vector<Value>{k.splat(zero, {1, HB})};
        })[0];
    Value d = dtTransform(dRaw + bias);
    Value hl = k.expandDims(k.range(HB), 0);
    k.store(smem, oDec + hl * TS + tC, k.exp(k.load(A, hs * sAh, okH, zero) * d), tStaged);
    k.store(smem, oDt + hl * TS + tC, d, tStaged);
    k.barrier();
    Value bPost = convRows(0, oWB, BNp, padN(nR)), cPost = convRows(oC, oWC, BNp, padN(nR));
    k.barrier();  // every raw row is read before the first TS are overwritten
    k.store(smem, tC * BNp + padN(nR), bPost, tStaged);
    k.store(smem, oC + tC * BNp + padN(nR), cPost, tStaged);
  };
  // The x (and silu(z)) of tokens v0.. of head h (the i-th of the program), and dt' x. With
  // commitFromRaw (one chunk holds every token), the head's x conv window after the replay and
  // its x drafts go to the conv state and the cache from the raw rows, before they are
  // overwritten (raw row of position p: p + W - 1); deferred, the accepted drafts' x to the ring.
  auto stageHead = [&](Value v0, Value h, Value i, bool commitFromRaw) {
    Value pos = v0 - (W - 1) + rC, okR = rC < R;
    Value chX0 = xChannels(h);
    k.store(smem, oX + rC * BP + pR, virtualIn(pos, k.expandDims(chX0, 0), okR && mP2), okR);
    stageWeights(oWX, BP, pR, k.expandDims(chX0, 0), mP2);
    Value vC = v0 + tC, okC = vC < nTok;
    if (withZ) {
      Value mZ = okC && (vC >= nRep) && mP2;
      k.store(smem, oZ + tC * BP + pR,
                silu(k.load(z, b * sZb + (vC - nRep) * sZt + h * sZh + (pidP * BP + pR) * sZp, mZ, zero)), tStaged);
    }
    k.barrier();
    if (commitFromRaw) {
      k.ifThen(commits(), [&] {
        for (int64_t q = 0; q + 1 < W; ++q)
          k.store(convState, slot * sCsSlot + chX0 * sCsC + q * sCsK, k.load(smem, oX + (nRep + q) * BP + pLoc),
                  maskP0);
      });
      if (deferred)
        k.ifThen(appendNow, [&] {
          Value m = (cr < c) && mP2;
          k.store(xbcRing, slot * sXrSlot + (r + cr) * sXrT + k.expandDims(chX0, 0) * sXrC,
                  k.load(smem, oX + (r + (W - 1) + cr) * BP + pR, m, zero), m);
        });
      k.ifThen(verify, [&] {
        Value m = (lr < L) && mP2;
        k.store(xbcCache, slot * sXcSlot + lr * sXcT + k.expandDims(chX0, 0) * sXcC,
                k.load(smem, oX + (nRep + (W - 1) + lr) * BP + pR, m, zero), m);
      });
    }
    Value xPost = convRows(oX, oWX, BP, pR);
    Value dtx = k.load(smem, oDt + i * TS + tRow) * xPost;
    k.barrier();
    k.store(smem, oX + tC * BP + pR, xPost, tStaged);
    k.store(smem, oDtx + tC * BP + pR, dtx, tStaged);
    k.barrier();
  };
  // The tokens of the staged chunk from v0 for head h: the replayed ones update the state (the
  // last commits it); the new drafts also give y.
  auto tokens = [&](Value v0, Value h, Value i, Value s0) {
    Value Dv = k.ifElse(
        hasD, [&] { return std::vector<Value>{k.load(Dp, h * sDh)}; }, [&] { return std::vector<Value>{zero}; })[0];
    Value sIn = s0.valid() ? s0 : k.load(ssmState, ssmOffsets(h), mask2, zero);
    return k.forLoop(v0, k.minimum(v0 + BT, nTok), k.constInt(1), {sIn}, [&](Value v, const std::vector<Value>& sv) {
      Value r = v - v0, row = r * BP + offsP - pidP * BP;
      Value Bv = k.load(smem, r * BNp + padN(offsN)), dtx = k.load(smem, oDtx + row);
      Value decay = k.splat(k.load(smem, oDec + i * TS + r), {BP, BN});
      Value s = sv[0] * decay + k.expandDims(Bv, 0) * k.expandDims(dtx, 1);
      k.ifThen(deferred ? (v == nRep - 1) && commitNow : v == c - 1,
               [&] { k.store(ssmState, ssmOffsets(h), s, mask2); });
      k.ifThen(v >= nRep, [&] {
        Value Cv = k.load(smem, oC + r * BNp + padN(offsN));
        Value yv = k.reduce(s * k.expandDims(Cv, 0), 1, "sum");
        yv = k.ifElse(
            hasD, [&] { return std::vector<Value>{yv + k.load(smem, oX + row) * Dv}; },
            [&] { return std::vector<Value>{yv}; })[0];
        if (withZ) yv = yv * k.load(smem, oZ + row);
        k.store(y, b * sYb + (v - nRep) * sYt + h * sYh + offsP * sYp, yv, maskP);
      });
      return std::vector<Value>{s};
    })[0];
  };
  // The conv window after the replay, in(nRep - (W-1) + q), of a 1-D tile of channels, committed;
  // each thread loads its channels' columns whole before it stores any.
  auto commitWindow = [&](Value ch, Value mask) {
    std::vector<Value> cols;
    for (int64_t q = 0; q + 1 < W; ++q) {
      Value pos = nRep - (W - 1) + q;
      Value vs = k.load(convState, slot * sCsSlot + ch * sCsC + k.maximum(pos + (W - 1), k.constInt(0)) * sCsK,
                        mask && (pos < 0), zero);
      if (deferred) {
        Value vr = k.load(xbcRing, slot * sXrSlot + k.maximum(pos, k.constInt(0)) * sXrT + ch * sXrC,
                          mask && (pos >= 0) && (pos < r), zero);
        Value vc = k.load(xbcCache, slot * sXcSlot + k.maximum(pos - r, k.constInt(0)) * sXcT + ch * sXcC,
                          mask && (pos >= r), zero);
        cols.push_back(vs + vr + vc);
        continue;
      }
      Value vc =
          k.load(xbcCache, slot * sXcSlot + k.maximum(pos, k.constInt(0)) * sXcT + ch * sXcC, mask && (pos >= 0), zero);
      cols.push_back(vs + vc);
    }
    for (int64_t q = 0; q + 1 < W; ++q) k.store(convState, slot * sCsSlot + ch * sCsC + q * sCsK, cols[q], mask);
  };
  // The accepted drafts (cache rows 0..c-1) of channels ch2 ([1, n], mask m2) appended to the ring
  // at rows r.., copied from the cache before the verify overwrites it.
  auto appendToRing = [&](Value ch2, Value m2) {
    Value m = (cr < c) && m2;
    k.store(xbcRing, slot * sXrSlot + (r + cr) * sXrT + ch2 * sXrC,
            k.load(xbcCache, slot * sXcSlot + cr * sXcT + ch2 * sXcC, m, zero), m);
  };
  // After a head's tokens (several chunks): its x conv window committed (deferred: or its accepted
  // x drafts appended to the ring); its x drafts cached (after every thread's reads of the cached
  // rows).
  auto commitHead = [&](Value h) {
    k.ifThen(commits(), [&] { commitWindow(h * P + offsP, maskP); });
    if (deferred) k.ifThen(appendNow, [&] { appendToRing(k.expandDims(xChannels(h), 0), mP2); });
    k.barrier();
    k.ifThen(verify, [&] {
      Value m = (lr < L) && mP2, ch = k.expandDims(xChannels(h), 0);
      k.store(xbcCache, slot * sXcSlot + lr * sXcT + ch * sXcC, k.load(xbc, b * sXb + lr * sXt + ch * sXc, m, zero), m);
    });
  };

  // ---- the row's last program to arrive (every other has read the shared B/C columns, the dt
  // cache and the count): commits the B/C conv window, caches the drafts' B/C and dt, sets the
  // count. Deferred: appends the accepted drafts' B/C and dt to the ring instead of committing
  // (as the step decides), and sets the ring's count.
  auto arriveAndCommitShared = [&] {
    Value last = k.arriveLast(arrivals, slot, cdiv(H, hpp) * cdiv(P, k.constInt(BP)));
    k.ifThen(last, [&] {
      k.ifThen(commits(), [&] {
        for (int64_t j = 0; j < spec.get("meta:bc_chunks"); ++j) {
          Value col = j * BC + k.range(BC);
          commitWindow(HP + col, col < 2 * GN);
        }
      });
      if (deferred)
        k.ifThen(appendNow, [&] {
          for (int64_t j = 0; j < spec.get("meta:bc_chunks"); ++j) {
            Value col = k.expandDims(j * BC + k.range(BC), 0);
            appendToRing(HP + col, col < 2 * GN);
          }
          Value h2 = k.expandDims(k.range(BH), 0), m = (h2 < H) && (cr < c);
          k.store(dtRing, slot * sDrSlot + (r + cr) * sDrT + h2 * sDrH,
                  k.load(dtCache, slot * sDcSlot + cr * sDcT + h2 * sDcH, m, zero), m);
        });
      k.barrier();  // every read of the cached drafts is done before they are overwritten
      k.ifThen(verify, [&] {
        for (int64_t j = 0; j < spec.get("meta:bc_chunks"); ++j) {
          Value col = k.expandDims(j * BC + k.range(BC), 0), mC2 = (col < 2 * GN) && (lr < L);
          k.store(xbcCache, slot * sXcSlot + lr * sXcT + (HP + col) * sXcC,
                  k.load(xbc, b * sXb + lr * sXt + (HP + col) * sXc, mC2, zero), mC2);
        }
        Value h2 = k.expandDims(k.range(BH), 0), mH2 = (h2 < H) && (lr < L);
        k.store(dtCache, slot * sDcSlot + lr * sDcT + h2 * sDcH,
                k.load(dt, b * sDtB + lr * sDtT + h2 * sDtH, mH2, zero), mH2);
      });
      k.store(cached, slot * sCached,
              k.ifElse(
                  verify, [&] { return std::vector<Value>{L}; }, [&] { return std::vector<Value>{k.constInt(0)}; })[0]);
      if (deferred) k.store(ring, slot * sRing, k.select(commitNow, k.constInt(0), nRep));
    });
  };

  // The program's heads h0 + i, one after the other.
  Value h0 = hb * hpp, nHeads = k.minimum(hpp, H - h0);
  if (oneChunk) {
    // One chunk holds every token: the group's B and C (and dt) are staged once, after which the
    // program arrives, so that the last one's commits overlap the others' tokens. The state is
    // loaded after its head's staging, so that its registers are free there.
    stageBC(k.constInt(0));
    arriveAndCommitShared();
    k.forLoop(k.constInt(0), nHeads, k.constInt(1), {}, [&](Value i, const std::vector<Value>&) {
      stageHead(k.constInt(0), h0 + i, i, true);
      tokens(k.constInt(0), h0 + i, i, Value{});
      k.barrier();  // the head's rows are read before the next head's are staged
      return std::vector<Value>{};
    });
  } else {
    k.forLoop(k.constInt(0), nHeads, k.constInt(1), {}, [&](Value i, const std::vector<Value>&) {
      Value h = h0 + i;
      Value st = k.load(ssmState, ssmOffsets(h), mask2, zero);
      k.forLoop(k.constInt(0), nTok, k.constInt(BT), {st}, [&](Value v0, const std::vector<Value>& sv) {
        stageBC(v0);
        stageHead(v0, h, i, false);
        Value s = tokens(v0, h, i, sv[0]);
        k.barrier();  // the chunk's rows are read before the next chunk's are staged
        return std::vector<Value>{s};
      });
      commitHead(h);
      return std::vector<Value>{};
    });
    arriveAndCommitShared();
  }
}

// The SSM state row (N) whole in one tile; rows of P so that each thread keeps 64 state values in
// registers across the tokens; 8 lanes along N. At least 3 programs an SM (168 registers; rows of N
// up to 128, wider ones spill there): the staging's latency is hidden by the other programs'
// tokens.
//
// Large batches (meta:large_batch, set by the op) have programs enough for 5 an SM of half the rows
// (32 state values a thread, 96 registers; 4 with fp32 drafts): more warps hide the staging's and
// the state's latency. Small batches keep 64 values a thread, where fewer programs would leave SMs
// idle. The fused step issues ~35% more instructions than the verify (ncu, batch 64) at the same
// stall mix: the replayed tokens, not the commit's write, make most of (a) - verify.
void chooseMeta(Specialization& s) {
  const int64_t P = s.get("P"), N = s.get("N"), H = s.get("H"), G = s.get("G");
  setDefault(s, "meta:num_warps", 4);
  setDefault(s, "meta:BLOCK_N", std::max<int64_t>(4, nextPow2(N)));
  const int64_t BN = s.get("meta:BLOCK_N");
  // Wider convs and state rows past 128 leave room for 32 values a thread (ptxas spills at 64).
  const bool roomy = s.get("meta:width") <= 4 && BN <= 128;
  const bool large = roomy && s.get("meta:large_batch", 0) != 0;
  s.set("meta:large_batch", large);  // whether the large-batch tiles are taken (the op reads it back)
  if (!s.find("meta:BLOCK_P")) {
    const int64_t perThread = roomy && !large ? 64 : 32;
    int64_t bp = std::max<int64_t>(1, perThread * 32 * s.get("meta:num_warps") / BN);
    s.set("meta:BLOCK_P", std::min(bp, std::max<int64_t>(1, nextPow2(P))));
    // Small heads: fewer warps, so that every thread holds a few state values (a reduction
    // along N needs at least one element a thread).
    int64_t warps = s.get("meta:num_warps");
    while (warps > 1 && s.get("meta:BLOCK_P") * BN < 4 * 32 * warps) warps /= 2;
    s.set("meta:num_warps", warps);
  }
  setDefault(s, "meta:inner_lanes", 8);
  // Wider rows spill at 168 registers; fp32 drafts (twice the staging registers) spill a little at
  // 96 (36 bytes), not at 128.
  const bool drafts16 = dtypeBytes(static_cast<DType>(s.get("dtype:xbc_cache"))) == 2;
  if (!s.find("meta:min_blocks") && BN <= 128) s.set("meta:min_blocks", large ? (drafts16 ? 5 : 4) : 3);
  // The first program's B/C conv: [tokens, 64 channels] tiles (wider ones spill at W 8).
  setDefault(s, "meta:BLOCK_C", std::min<int64_t>(64, std::max<int64_t>(4, nextPow2(2 * G * N))));
  s.set("meta:bc_chunks", (2 * G * N + s.get("meta:BLOCK_C") - 1) / s.get("meta:BLOCK_C"));
  // Tokens staged at a time: every replayed (at most Lc) and new token when their rows fit in
  // shared memory, else chunks of them.
  if (!s.find("meta:BLOCK_T")) {
    const int64_t BP = s.get("meta:BLOCK_P"), W = s.get("meta:width"), BNp = BN + BN / 32 * 4;
    const int64_t tokens = (s.get("replay") ? s.get("Lc") : 0) + s.get("R", 0) + s.get("L");
    auto floats = [&](int64_t bt) {
      return (bt + 2 * W) * (2 * BNp + BP) + bt * BP * 2 + 2 * kMaxHeadsPerProgram * bt;
    };
    // Every token at once up to kOneChunkFloats (dynamic shared memory past 48 KiB: a chunk
    // boundary costs a barrier and a re-stage of the W - 1 predecessors); else 48 KiB chunks.
    int64_t bt = std::max<int64_t>(2, nextPow2(tokens));
    if (floats(bt) > kOneChunkFloats)
      while (bt > 2 && floats(bt) > dsl::kMaxSharedBufferFloats) bt /= 2;
    s.set("meta:BLOCK_T", bt);
  }
  setDefault(s, "meta:BLOCK_H", std::max<int64_t>(4, nextPow2(H)));
  setDefault(s, "meta:index_bits", 32);
}

}  // namespace

int64_t decodeHeadsPerProgram(int64_t batch, int64_t H, int64_t G, int64_t programsPerHead, bool largeBatch) {
  const int64_t minPrograms = largeBatch ? 512 : 128;
  int64_t hpp = 1;
  for (int64_t cand = 2; cand <= kMaxHeadsPerProgram; ++cand)
    if ((H / G) % cand == 0 && batch * programsPerHead * (H / cand) >= minPrograms) hpp = cand;
  return hpp;
}

const KernelRegistration kDecode(__FILE__, {kDecodeStep.kernel,
                                            [](KernelBuilder& k, const Specialization& s) { build(k, s, false); },
                                            chooseMeta, &kDecodeStep});
const KernelRegistration kDecodeDeferred(__FILE__,
                                         {kDecodeStepDeferred.kernel,
                                          [](KernelBuilder& k, const Specialization& s) { build(k, s, true); },
                                          chooseMeta, &kDecodeStepDeferred});

}  // namespace ssmjit::kernels
