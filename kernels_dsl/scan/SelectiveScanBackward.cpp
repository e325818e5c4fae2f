// Mamba-1 selective scan backward, written once in the DSL for dense rows and packed rows. See
// SelectiveScanBackward.h for the launches and the workspace.
//
// Per state n, token t (dt after bias and softplus, a_t = exp(dt_t A_n), b_t = dt_t B_nt u_t):
// h_t = a_t h_{t-1} + b_t; y_t = sum_n C_nt h_t + D u_t. The adjoint of h, g_t = C_t dy_t +
// a_{t+1} g_{t+1}, is kept as s_t = a_t g_t = a_t (C_t dy_t + s_{t+1}): a reverse associative scan
// of (a_t, a_t C_t dy_t) pairs with no shifted decay, and g_t = C_t dy_t + s_{t+1} (a shift of
// s by one token, the next tile's s from the carry). a_t h_{t-1} = h_t - b_t, so neither scan
// needs the state before a token. The carried s at a sequence's start is d(initial state).
#include "kernels_dsl/scan/SelectiveScanBackward.h"

#include <algorithm>
#include <functional>
#include <string>

#include "kernels_dsl/Dsl.h"
#include "kernels_dsl/MetaDefaults.h"
#include "kernels_dsl/Registry.h"
#include "kernels_dsl/conv/ConvTiles.h"
#include "kernels_dsl/scan/PackedRuns.h"
#include "kernels_dsl/scan/ScanSequences.h"
#include "kernels_dsl/scan/SelectiveScan.h"
#include "kernels_dsl/scan/StagedBC.h"
#include "kernels_dsl/scan/TileEnds.h"

namespace ssmjit::kernels {
using namespace dsl;

namespace {

// Where the per-token dB (or dC) sum of channel block `blk`'s local group lg, state n, sits in
// ws (SelectiveScanBackward.h, launch 3): token tok of the sequence whose first tile has
// checkpoint key key0, in the region of rows x ckpt_per_row tiles of BT tokens.
Value bcPartOffset(Value region, Value blk, int64_t NGL, Value lg, int64_t N, Value n, Value rows, Value cpr,
                   int64_t BT, Value key0, Value tok) {
  return region + ((blk * NGL + lg) * N + n) * (rows * cpr * BT) + key0 * BT + tok;
}

void buildScanBwd(KernelBuilder& k, const Specialization& spec) {
  const int64_t BD = spec.get("meta:BLOCK_D"), BT = spec.get("meta:BLOCK_T"), N = spec.get("meta:dstate"),
                NGL = spec.get("meta:groups_per_block"), NS = scanBwdSums(N), SPAN = spec.get("meta:span");
  const bool adjointPass = spec.get("meta:adjoint_pass") != 0;
  k.setShiftLanes(static_cast<int>(spec.get("meta:time_lanes")));
  auto P = [&](const char* n) { return k.arg(n); };
  Value u = P("u"), delta = P("delta"), A = P("A"), Bp = P("B"), Cp = P("C"), Dv = P("Dv"), z = P("z"),
        dbias = P("dbias"), dout = P("dout"), dfin = P("dfinal"), du = P("du"), ddelta = P("ddelta"), dz = P("dz"),
        dinit = P("dinit"), ws = P("ws"), part = P("part");
  Value cu = k.arg("cu"), initIdx = k.arg("init_idx"), finIdx = k.arg("final_idx"), err = k.arg("err");
  auto I = [&](const char* n) { return k.arg(n); };
  Value D = I("D"), L = I("L"), nseq = I("nseq"), nInit = I("nslots_init"), nFinal = I("nslots_final"),
        maxLen = I("max_len"), cpr = I("ckpt_per_row"), spr = I("span_keys_per_row"), group = I("group"),
        adjBase = I("adj_base"), partBase = I("part_base"), bcBase = I("bc_base"), bcSize = I("bc_size");
  Value sUb = I("s_u_b"), sUd = I("s_u_d"), sDlb = I("s_dl_b"), sDld = I("s_dl_d"), sZb = I("s_z_b"), sZd = I("s_z_d"),
        sDob = I("s_do_b"), sDod = I("s_do_d"), sDub = I("s_du_b"), sDud = I("s_du_d"), sDdlb = I("s_ddl_b"),
        sDdld = I("s_ddl_d"), sDzb = I("s_dz_b"), sDzd = I("s_dz_d"), sAd = I("s_A_d"), sAn = I("s_A_n"),
        sBb = I("s_B_b"), sBg = I("s_B_g"), sBn = I("s_B_n"), sBd = I("s_B_d"), sCb = I("s_C_b"), sCg = I("s_C_g"),
        sCn = I("s_C_n"), sCd = I("s_C_d"), sDd = I("s_D_d"), sDbd = I("s_db_d"), sFs = I("s_df_slot"),
        sFd = I("s_df_d"), sFn = I("s_df_n"), sIs = I("s_di_slot"), sId = I("s_di_d"), sIn = I("s_di_n"),
        sCu = I("s_cu"), sIidx = I("s_init_idx"), sFidx = I("s_final_idx");
  auto Fl = [&](const char* n) { return k.arg(n); };
  Value bVar = Fl("b_varying"), cVar = Fl("c_varying"), hasD = Fl("has_D"), hasZ = Fl("has_z"),
        hasDbias = Fl("has_dbias"), softplusOn = Fl("softplus"), hasCu = Fl("has_cu"), hasDfinal = Fl("has_dfinal"),
        hasFinalIdx = Fl("has_final_idx"), hasDinit = Fl("has_dinit"), hasInitIdx = Fl("has_init_idx"),
        partIn = Fl("part_in"), partOut = Fl("part_out");

  Value pidD = k.programId(0), j = k.programId(2);
  Value i = programSequence(k, spec, cu, sCu, nseq, k.programId(1));  // longest first (ScanSequences.h)
  Value zeroI = k.constInt(0), zero = k.constFloat(0), one = k.constFloat(1);
  // The sequence. Bad cu_seqlens and over-long sequences were reported by the checkpoint launch.
  const ScanSequence seq = scanSequence(k, hasCu, cu, sCu, L, nseq, i);
  Value start = seq.start, end = seq.end, row = seq.row;
  k.returnIf(seq.bad);
  Value len = end - start;
  k.returnIf(len > maxLen);
  // Span j of the sequence: tokens [t0, t0 + spanLen), relative to its start (so a sequence's
  // spans do not depend on where it lies in a packed row).
  Value t0 = j * SPAN;
  k.returnIf(t0 >= len);
  if (adjointPass) k.returnIf(j == 0);  // only spans with a predecessor
  Value nspans = cdiv(len, k.constInt(SPAN)), spanLen = k.minimum(k.constInt(SPAN), len - t0);
  Value spanKey = firstScanKey(k, seq, spr, SPAN, hasCu, i) + j;

  Value offsD = pidD * BD + k.range(BD), mD = offsD < D;
  auto dE = [&](Value v) { return k.expandDims(v, 1); };  // [BD] -> [BD, 1]
  auto tE = [&](Value v) { return k.expandDims(v, 0); };  // [BT] -> [1, BT]
  Value dOffs = dE(offsD), mD2 = dE(mD);
  std::vector<Value> An, A2;  // A, and A * log2(e): exp(dt A) = exp2(dt A2)
  for (int64_t n = 0; n < N; ++n) {
    An.push_back(k.load(A, offsD * sAd + n * sAn, mD, zero));
    A2.push_back(An.back() * kLog2e);
  }
  auto param = [&](Value has, Value p, Value s) {
    return k.ifElse(
        has, [&] { return std::vector<Value>{dE(k.load(p, offsD * s, mD, zero))}; },
        [&] { return std::vector<Value>{dE(k.splat(zero, {BD}))}; })[0];
  };
  Value dbiasT = param(hasDbias, dbias, sDbd), DvT = param(hasD, Dv, sDd);
  Value gE = dE(offsD / group);
  Value g0 = (pidD * BD) / group;  // the block's first group
  Value rT = k.range(BT);
  Value DN = D * N;
  Value rowsBC = k.select(hasCu, k.constInt(1), nseq);
  Value ckptKey0 = firstScanKey(k, seq, cpr, BT, hasCu, i);
  Value nTiles = cdiv(spanLen, k.constInt(BT));
  // The adjoint pass' results of span jj: S[n] (the adjoint at its first token from a zero carry
  // at its end), then its summed dt, at ws[adj_base + (key * (N + 1) + r) * D + d].
  auto adjOff = [&](Value key, int64_t r) { return adjBase + (key * (N + 1) + r) * D + offsD; };

  std::vector<Value> carry;  // s[n], then the sums: dA[n], dD, ddelta_bias, dB[n], dC[n] (constant B/C)
  if (adjointPass) {
    for (int64_t n = 0; n <= N; ++n) carry.push_back(k.splat(zero, {BD}));  // s[n], summed dt
  } else {
    // The adjoint at the span's end: d(final state) of the sequence's slot (or 0) carried back
    // through the later spans, last first: s = S + exp(A sum_dt) s.
    Value slotF = k.ifElse(
        hasDfinal,
        [&] {
          return std::vector<Value>{
              checkedSlot(k, hasFinalIdx, finIdx, sFidx, nFinal, i, pidD + j, err, kErrScanFinalSlot)};
        },
        [&] { return std::vector<Value>{k.constInt(-1)}; })[0];
    for (int64_t n = 0; n < N; ++n)
      carry.push_back(k.load(dfin, slotF * sFs + offsD * sFd + n * sFn, mD && (slotF >= 0), zero));
    carry = k.forLoop(zeroI, nspans - 1 - j, k.constInt(1), carry, [&](Value q, const std::vector<Value>& c) {
      Value key = spanKey + (nspans - 1 - j - q);
      Value sd = k.load(ws, adjOff(key, N), mD, zero);
      std::vector<Value> next;
      for (int64_t n = 0; n < N; ++n) next.push_back(k.load(ws, adjOff(key, n), mD, zero) + k.exp2(A2[n] * sd) * c[n]);
      return next;
    });
    for (int64_t r = 0; r < NS; ++r) carry.push_back(k.splat(zero, {BD}));
  }

  auto linear = [&](const std::vector<Value>& l, const std::vector<Value>& r) {
    return std::vector<Value>{l[0] * r[0], r[0] * l[1] + r[1]};
  };
  const bool channelsWhole = spec.find("D") && spec.get("D") % BD == 0;
  // A packed row's tiles load through PackedRuns (aligned vectors moved along time) and run one
  // tile body, as the forward's (SelectiveScan.cpp); the stores stay element by element.
  const bool realignPacked = spec.get("has_cu", 0) != 0;
  const int64_t run = BT / spec.get("meta:time_lanes");  // a thread's tokens
  // Time-varying B and C rows staged through shared memory when the block's channels share a group
  // (StagedBC; the adjoint pass reads no B).
  const bool oneGroup = spec.find("group") && spec.get("group") % BD == 0;
  const bool stageB = oneGroup && !adjointPass && spec.get("b_varying", 0) && StagedBC::fits(N, BT, 1);
  const bool stageC = oneGroup && spec.get("c_varying", 0) && StagedBC::fits(N, BT, stageB ? 2 : 1);
  StagedBC staged(k, N, BD, BT, stageB, stageC, g0, row, {Bp, sBb, sBg, sBn}, {Cp, sCb, sCg, sCn});
  // One tile [c, c + BT) of the sequence, walked after every later tile.
  auto tile = [&](bool whole, Value c, const std::vector<Value>& cs) {
    Value tl = c + rT;  // token of the sequence
    Value m1 = tl < len;
    Value m2 = tE(m1) && mD2;
    Value mask = whole ? (channelsWhole ? Value{} : k.broadcastTo(mD2, {BD, BT})) : m2;
    Value tOff = tE(start + tl);
    auto load = [&](Value p, Value off) { return mask.valid() ? k.load(p, off, mask, zero) : k.load(p, off); };
    Value full = c + BT <= len;
    Value chan = channelsWhole ? Value{} : k.broadcastTo(mD2, {BD, BT});
    auto store = [&](Value p, Value off, Value v) {
      auto st = [&](Value m) { m.valid() ? k.store(p, off, v, m) : k.store(p, off, v); };
      if (!realignPacked) return st(mask);
      k.ifThen(full, [&] { st(chan); });  // a whole tile's stores unmasked along time
      k.ifThen(!full, [&] { st(m2); });
    };
    // A packed row's tiles with their places past the sequence (a loaded tile's: read from the
    // next one) zeroed where `m` is false ([1, BT] or the tiles' shape), in a partial tile only.
    auto pastEndZeroed = [&](const std::vector<Value>& v, Value m) {
      return k.ifElse(
          full, [&] { return v; },
          [&] {
            std::vector<Value> r;
            for (Value x : v) r.push_back(k.select(m.shape() == x.shape() ? m : k.broadcastTo(m, x.shape()), x, zero));
            return r;
          });
    };
    // Past the sequence: a = 1, b = 0, no gradient.
    auto pastEndZero = [&](Value x) {
      if (realignPacked) return pastEndZeroed({x}, m2)[0];
      return whole ? x : k.select(m2, x, zero);
    };
    // The tiles p[base + start + tl] (base [BD, 1] each).
    auto loadTiles = [&](const std::vector<std::pair<Value, Value>>& pb) {
      std::vector<Value> r;
      if (!realignPacked) {
        for (const auto& [p, base] : pb) r.push_back(load(p, base + tOff));
        return r;
      }
      PackedRuns pr(k, start + c, BT, run, L);
      for (const auto& [p, base] : pb) pr.load(p, base, chan);
      return pastEndZeroed(pr.realign(), tE(m1));
    };
    auto bcTile = [&](Value varying, Value p, Value sB, Value sG, Value sN, Value sD, int64_t n) {
      return k.ifElse(
          varying, [&] { return std::vector<Value>{load(p, row * sB + gE * sG + n * sN + tOff)}; },
          [&] {
            return std::vector<Value>{k.broadcastTo(dE(k.load(p, offsD * sD + n * sN, mD, zero)), {BD, BT})};
          })[0];
    };
    std::vector<std::pair<Value, Value>> tiles = {
        {u, row * sUb + dOffs * sUd}, {delta, row * sDlb + dOffs * sDld}, {dout, row * sDob + dOffs * sDod}};
    std::vector<Value> udg;
    if (realignPacked) {  // u, delta, dout and the staged rows in one move
      PackedRuns pr(k, start + c, BT, run, L);
      for (const auto& [p, base] : tiles) pr.load(p, base, chan);
      staged.queue(pr);
      udg = pastEndZeroed(pr.realign(), tE(m1));
    } else {
      udg = loadTiles(tiles);
    }
    staged.fill(realignPacked ? std::vector<Value>(udg.begin() + 3, udg.end()) : std::vector<Value>{},
                whole ? Value{} : tE(m1), tOff);
    Value xu = udg[0];
    Value draw = udg[1] + dbiasT;
    Value dt = k.ifElse(
        softplusOn, [&] { return std::vector<Value>{softplus(draw)}; }, [&] { return std::vector<Value>{draw}; })[0];
    dt = pastEndZero(dt);
    Value go = udg[2];
    std::vector<Value> zg = k.ifElse(
        hasZ,
        [&] {
          Value zt = loadTiles({{z, row * sZb + dOffs * sZd}})[0];
          Value sg = sigmoid(zt);
          return std::vector<Value>{go * (zt * sg), sg * (1.0 + zt * (1.0 - sg))};  // dy, silu'(z)
        },
        [&] {
          return std::vector<Value>{go, k.splat(zero, {BD, BT})};
        });
    Value dy = zg[0];
    if (adjointPass) {
      // The adjoint at the tile's first token only (TileEnds.h).
      TileEnds e = scanTileEnds(
          k, dt, A2, cs,
          [&](int64_t n) { return (stageC ? staged.row(n, true) : bcTile(cVar, Cp, sCb, sCg, sCn, sCd, n)) * dy; },
          true);
      e.carries.push_back(cs[N] + e.dtSum);
      return e.carries;
    }
    Value key = ckptKey0 + c / BT;
    Value dtu = dt * xu;
    // State chunks (SelectiveScanBackward.h): the earlier chunks' sums over their states of du,
    // ddelta before softplus' derivative, and y, from the three planes of `part`.
    Value plane = rowsBC * D * L, pOff = (row * D + dOffs) * L + tOff;
    std::vector<Value> acc = k.ifElse(
        partIn,
        [&] {
          Value yIn = k.ifElse(
              hasZ, [&] { return std::vector<Value>{DvT * xu + load(part, plane * 2 + pOff)}; },
              [&] { return std::vector<Value>{DvT * xu}; })[0];  // y is only for dz
          return std::vector<Value>{DvT * dy + load(part, pOff), load(part, plane + pOff), yIn};
        },
        [&] {
          return std::vector<Value>{DvT * dy, k.splat(zero, {BD, BT}), DvT * xu};
        });
    Value duAcc = acc[0], ddt = acc[1], y = acc[2];
    std::vector<Value> next(cs.size()), partB, partC;
    for (int64_t n = 0; n < N; ++n) {
      Value a = k.exp2(dt * dE(A2[n]));
      Value Bt = stageB ? staged.row(n, false) : bcTile(bVar, Bp, sBb, sBg, sBn, sBd, n);
      Value b = dtu * Bt;
      Value h0 = k.load(ws, key * DN + n * D + offsD, mD, zero);
      Value h = k.associativeScan({a, b}, 1, linear, {k.splat(one, {BD}), h0})[1];
      Value Ct = stageC ? staged.row(n, true) : bcTile(cVar, Cp, sCb, sCg, sCn, sCd, n);
      Value cdy = Ct * dy;
      y = y + Ct * h;
      std::vector<Value> rs = k.associativeScan({a, a * cdy}, 1, linear, {k.splat(one, {BD}), cs[n]}, true);
      Value sNext = k.shift(rs[1], k.broadcastTo(dE(cs[n]), {BD, BT}), 1, -1);  // s_{t+1}
      Value g = cdy + sNext;
      Value gah = g * (h - b);  // g_t a_t h_{t-1}
      ddt = ddt + g * (Bt * xu) + dE(An[n]) * gah;
      duAcc = duAcc + g * (dt * Bt);
      next[n] = rs[3];
      next[N + n] = cs[N + n] + k.reduce(dt * gah, 1, "sum");
      Value gB = g * dtu, gC = dy * h;
      // Time-varying dB/dC: this block's channels of each group summed per token; stored after
      // the last state, so that the reductions of every state share one barrier.
      auto perToken = [&](Value varying, Value v, int64_t r, std::vector<Value>& parts) {
        std::vector<Value> res = k.ifElse(
            varying,
            [&] {
              std::vector<Value> out{cs[r]};
              for (int64_t lg = 0; lg < NGL; ++lg)
                out.push_back(k.reduce(NGL == 1 ? v : k.select(gE == g0 + lg, v, zero), 0, "sum"));
              return out;
            },
            [&] {
              std::vector<Value> out{cs[r] + k.reduce(v, 1, "sum")};
              for (int64_t lg = 0; lg < NGL; ++lg) out.push_back(k.splat(zero, {BT}));
              return out;
            });
        next[r] = res[0];
        parts.insert(parts.end(), res.begin() + 1, res.end());
      };
      perToken(bVar, gB, N + N + 2 + n, partB);
      perToken(cVar, gC, N + N + 2 + N + n, partC);
    }
    // At the tile's checkpoint key (see the header): aligned vectors in packed rows too.
    auto storeParts = [&](const std::vector<Value>& parts, Value regionBase) {
      for (int64_t n = 0; n < N; ++n)
        for (int64_t lg = 0; lg < NGL; ++lg) {
          Value off =
              bcPartOffset(regionBase, pidD, NGL, k.constInt(lg), N, k.constInt(n), rowsBC, cpr, BT, ckptKey0, tl);
          // A packed row's partial tile too stores whole: the sums kernel reads no token past the
          // sequence, and the tile's key is the sequence's own.
          whole || realignPacked ? k.store(ws, off, parts[n * NGL + lg]) : k.store(ws, off, parts[n * NGL + lg], m1);
        }
    };
    k.ifThen(bVar, [&] { storeParts(partB, bcBase); });
    k.ifThen(cVar, [&] { storeParts(partC, bcBase + k.select(bVar, bcSize, zeroI)); });
    next[N + N] = cs[N + N] + k.reduce(dy * xu, 1, "sum");
    next[N + N + 1] = k.ifElse(
        partOut,
        [&] {
          store(part, pOff, duAcc);
          store(part, plane + pOff, ddt);
          k.ifThen(hasZ, [&] { store(part, plane * 2 + pOff, y); });
          return std::vector<Value>{cs[N + N + 1]};
        },
        [&] {
          k.ifThen(hasZ, [&] { store(dz, row * sDzb + dOffs * sDzd + tOff, go * y * zg[1]); });
          Value dd = k.ifElse(
              softplusOn,
              [&] {
                return std::vector<Value>{ddt * k.select(draw <= 20.0, sigmoid(draw), k.splat(one, {BD, BT}))};
              },
              [&] { return std::vector<Value>{ddt}; })[0];
          dd = pastEndZero(dd);
          store(du, row * sDub + dOffs * sDud + tOff, duAcc);
          store(ddelta, row * sDdlb + dOffs * sDdld + tOff, dd);
          return std::vector<Value>{cs[N + N + 1] + k.reduce(dd, 1, "sum")};
        })[0];
    return next;
  };
  const bool tilesWhole = scanTilesWhole(spec, BT);
  carry = k.forLoop(zeroI, nTiles, k.constInt(1), carry, [&](Value q, const std::vector<Value>& cs) {
    Value c = t0 + (nTiles - 1 - q) * BT;
    if (realignPacked) return tile(false, c, cs);  // one body (see above)
    if (tilesWhole) return tile(true, c, cs);
    return k.ifElse(
        c + BT <= len, [&] { return tile(true, c, cs); }, [&] { return tile(false, c, cs); });
  });

  if (adjointPass) {
    for (int64_t r = 0; r <= N; ++r) k.store(ws, adjOff(spanKey, r), carry[r], mD);
    return;
  }
  // The sums of the span, and d(initial state) (slots were checked by the checkpoint launch).
  for (int64_t r = 0; r < NS; ++r) k.store(ws, partBase + (spanKey * NS + r) * D + offsD, carry[N + r], mD);
  k.ifThen(hasDinit && (j == 0), [&] {
    Value slotI = checkedSlot(k, hasInitIdx, initIdx, sIidx, nInit, i, k.constInt(1), err, kErrScanInitSlot);
    for (int64_t n = 0; n < N; ++n) k.store(dinit, slotI * sIs + offsD * sId + n * sIn, carry[n], mD && (slotI >= 0));
  });
}

// As the forward's layout (8 lanes along time, the warps along channels), with 4 tokens a thread:
// the backward holds about twice the forward's values a token, and at 8 tokens a thread the
// compiler spilled a few hundred bytes (at 4: none to ~150 bytes at N = 16).
void chooseScanBwdMeta(Specialization& s) {
  const int64_t D = s.get("D");
  setDefault(s, "meta:time_lanes", 8);
  const int64_t lanes = s.get("meta:time_lanes");
  setDefault(s, "meta:BLOCK_T", 4 * lanes);
  setDefault(s, "meta:num_warps", std::clamp<int64_t>(nextPow2(D) * lanes / 32, 1, 4));
  setDefault(s, "meta:BLOCK_D", s.get("meta:num_warps") * 32 / lanes);
  if (!s.find("meta:groups_per_block")) {
    // The most groups BLOCK_D consecutive channels can touch.
    const int64_t bd = s.get("meta:BLOCK_D"), group = s.find("group") ? s.get("group") : 1;
    s.set("meta:groups_per_block", group % bd == 0 ? 1 : (bd - 1) / group + 2);
  }
  // Four blocks an SM (128 registers a thread) at N <= 16: the spills cost less than the occupancy
  // they buy (6.6 ms at D 5120, 8x2048, against 8.7 with the compiler's choice). Larger N is
  // unmeasured: 0 leaves the register budget to the compiler.
  if (!s.find("meta:min_blocks")) s.set("meta:min_blocks", s.get("meta:dstate") <= 16 ? 4 : 0);
  // The forward's spans at any width (the adjoint pass costs about a forward scan of every span
  // but the first).
  if (!s.find("meta:span")) s.set("meta:span", std::max(scanSpanForWidth(D), s.get("meta:BLOCK_T")));
  setDefault(s, "meta:adjoint_pass", 0);
  setDefault(s, "meta:longest_first", 0);
  setDefault(s, "meta:index_bits", 32);
}

// meta:part 0: the per-sequence sums; 1: the per-block sums of time-varying dB/dC.
void buildScanBwdSum(KernelBuilder& k, const Specialization& spec) {
  const int64_t BLOCK = spec.get("meta:BLOCK"), N = spec.get("meta:dstate"), BDb = spec.get("meta:bwd_block_d"),
                NGL = spec.get("meta:groups_per_block"), NS = scanBwdSums(N);
  const int64_t SPAN = spec.get("meta:span"), BT = spec.get("meta:bwd_block_t");
  const bool part1 = spec.get("meta:part") != 0;
  Value ws = k.arg("ws"), dA = k.arg("dA"), dD = k.arg("dD"), ddb = k.arg("ddbias"), dB = k.arg("dB"), dC = k.arg("dC"),
        cu = k.arg("cu");
  auto I = [&](const char* n) { return k.arg(n); };
  Value D = I("D"), L = I("L"), nseq = I("nseq"), rows = I("rows"), G = I("G"), group = I("group"),
        dblocks = I("dblocks"), spr = I("span_keys_per_row"), cpr = I("ckpt_per_row"), partBase = I("part_base"),
        bcBase = I("bc_base"), bcSize = I("bc_size"), sCu = I("s_cu");
  Value sAd = I("s_dA_d"), sAn = I("s_dA_n"), sDD = I("s_dD"), sDdb = I("s_ddb"), sBb = I("s_dB_b"), sBg = I("s_dB_g"),
        sBn = I("s_dB_n"), sBd = I("s_dB_d"), sCb = I("s_dC_b"), sCg = I("s_dC_g"), sCn = I("s_dC_n"),
        sCd = I("s_dC_d");
  Value bVar = k.arg("b_varying"), cVar = k.arg("c_varying"), hasD = k.arg("has_D"), hasDbias = k.arg("has_dbias"),
        hasCu = k.arg("has_cu");
  Value zero = k.constFloat(0), zeroI = k.constInt(0);
  Value offs = k.programId(0) * BLOCK + k.range(BLOCK);
  if (!part1) {
    Value r = k.programId(1), m = offs < D;
    // Per sequence its spans in order, then the sequences in order: a sequence's sum does not
    // depend on where it lies in a packed row. A bad cu_seqlens (reported by the checkpoint
    // launch) reads no span.
    Value acc =
        k.forLoop(zeroI, nseq, k.constInt(1), {k.splat(zero, {BLOCK})}, [&](Value i, const std::vector<Value>& c) {
          const ScanSequence s = scanSequence(k, hasCu, cu, sCu, L, nseq, i);
          Value key0 = firstScanKey(k, s, spr, SPAN, hasCu, i);
          Value spans = k.select(s.bad, zeroI, cdiv(s.end - s.start, k.constInt(SPAN)));
          Value seq = k.forLoop(
              zeroI, spans, k.constInt(1), {k.splat(zero, {BLOCK})}, [&](Value jj, const std::vector<Value>& cs) {
                return std::vector<Value>{cs[0] + k.load(ws, partBase + ((key0 + jj) * NS + r) * D + offs, m, zero)};
              })[0];
          return std::vector<Value>{c[0] + seq};
        })[0];
    k.ifThen(r < N, [&] { k.store(dA, offs * sAd + r * sAn, acc, m); });
    k.ifThen((r == N) && hasD, [&] { k.store(dD, offs * sDD, acc, m); });
    k.ifThen((r == N + 1) && hasDbias, [&] { k.store(ddb, offs * sDdb, acc, m); });
    k.ifThen((r >= N + 2) && (r < 2 * N + 2) && !bVar, [&] { k.store(dB, offs * sBd + (r - N - 2) * sBn, acc, m); });
    k.ifThen((r >= 2 * N + 2) && !cVar, [&] { k.store(dC, offs * sCd + (r - 2 * N - 2) * sCn, acc, m); });
    return;
  }
  Value n = k.programId(1), zi = k.programId(2);
  Value isC = zi % 2, rg = zi / 2, i = rg / G, g = rg % G;
  k.returnIf(k.select(isC == 1, !cVar, !bVar));
  // Tokens of sequence i (a bad cu_seqlens, reported by the checkpoint launch, sums nothing).
  const ScanSequence s = scanSequence(k, hasCu, cu, sCu, L, nseq, i);
  k.returnIf(s.bad);
  Value len = s.end - s.start;
  k.returnIf(k.programId(0) * BLOCK >= len);
  Value m = offs < len;
  Value region = bcBase + k.select((isC == 1) && bVar, bcSize, k.constInt(0));
  Value key0 = firstScanKey(k, s, cpr, BT, hasCu, i);
  // The blocks holding the group's channels, in order.
  Value b0 = (g * group) / BDb, b1 = k.minimum(((g + 1) * group - 1) / BDb, dblocks - 1);
  Value acc =
      k.forLoop(b0, b1 + 1, k.constInt(1), {k.splat(zero, {BLOCK})}, [&](Value blk, const std::vector<Value>& c) {
        Value lg = g - (blk * BDb) / group;
        return std::vector<Value>{
            c[0] + k.load(ws, bcPartOffset(region, blk, NGL, lg, N, n, rows, cpr, BT, key0, offs), m, zero)};
      })[0];
  Value t = s.start + offs;
  k.ifThen(isC == 1, [&] { k.store(dC, s.row * sCb + g * sCg + n * sCn + t, acc, m); });
  k.ifThen(isC == 0, [&] { k.store(dB, s.row * sBb + g * sBg + n * sBn + t, acc, m); });
}

void chooseScanBwdSumMeta(Specialization& s) {
  setDefaults(s, {{"meta:num_warps", 4}, {"meta:BLOCK", 512}, {"meta:index_bits", 32}});
}

}  // namespace

const KernelRegistration kBackward(__FILE__, {kScanBwd.kernel, buildScanBwd, chooseScanBwdMeta, &kScanBwd});
const KernelRegistration kSum(__FILE__, {kScanBwdSum.kernel, buildScanBwdSum, chooseScanBwdSumMeta, &kScanBwdSum});

}  // namespace ssmjit::kernels
