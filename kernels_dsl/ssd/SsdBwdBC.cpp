// ssd_bwd_db and ssd_bwd_dc (SsdBackward.h): a group's dB or dC for 64 tokens r of a chunk and a
// block of states, on the tensor cores (zeros past the chunk, the states and the channels):
//   dB_r = sum_{i >= r} dCB_ir C_i + sum_h dt'_r exp(cum_last - cum_r) x_r . g_h,
//   dC_r = sum_{j <= r} dCB_rj B_j + sum_h exp(cum_r) dy_r . S_in,h,
// with g_h the gradient of head h's chunk state (the g plane) and S_in,h the state entering the
// chunk; the heads of the group in order. The states' part is skipped where they are zero: g in
// a sequence's last chunk without d(final states), S_in in its first without initial states.
// dCB (fp32) and the scaled x or dy take meta:pieces terms (SsdChunks.h); on the ring path, an x
// or dy exact in fewer terms (bf16 x; bf16 dout without z) meets the states as it is, and the
// scale multiplies each head's sum.
// With 16-bit B, C, x, dout and z whose rows the bindings prove aligned, every tile arrives
// through cp.async rings two steps ahead of its use (dCB's and the states' f32 tiles, the other
// operand's, x's or dout's and z's 16-bit ones), the states' tiles split into bf16 terms, and the
// staged operands are read by ldmatrix. Otherwise each product's b is staged as f32.
#include <algorithm>

#include "compiler/IntMath.h"
#include "kernels_dsl/Dsl.h"
#include "kernels_dsl/Registry.h"
#include "kernels_dsl/ssd/Ssd.h"
#include "kernels_dsl/ssd/SsdBackward.h"
#include "kernels_dsl/ssd/SsdChunks.h"

namespace ssmjit::kernels {
using namespace dsl;

namespace {

constexpr int64_t kStep = 32;  // tokens, then channels, a step of the products
constexpr int kStages = 3;     // the rings'

// What both forms read: the program's block of tokens r and states n.
struct BCBlock {
  SsdChunk ch;
  Value g, slot, bm, n0, rR, mR, nC, mN, dcbBase;
  bool dC;
};

// The scale of head h's states part for the tokens r: exp(cum_r) (dC) or dt'_r exp(cum_last -
// cum_r) (dB).
Value stateScale(KernelBuilder& k, const SsdBwdValues& a, const BCBlock& b, int64_t Q, Value h) {
  Value zero = k.constFloat(0);
  Value wsRow = (b.slot * a.H + h) * Q;
  Value cumR = k.load(a.ws, a.oCum + wsRow + b.rR, b.mR, zero);
  if (b.dC) return k.exp(cumR);
  return k.load(a.ws, a.oDt + wsRow + b.rR, b.mR, zero) * k.exp(k.load(a.ws, a.oCum + wsRow + b.ch.n - 1) - cumR);
}

// Both parts with each product's b staged as f32.
Value buildStaged(KernelBuilder& k, const Specialization& spec, const SsdBwdValues& a, const BCBlock& b, int64_t Q,
                  int64_t BN, Value statesZero) {
  const int64_t T = kSsdTokenBlock, LDs = BN + 4;
  const bool dC = b.dC;
  Value zero = k.constFloat(0), zeroI = k.constInt(0), oneI = k.constInt(1);
  Value smem = k.sharedBuffer(kStep * LDs);
  Value sC = k.expandDims(k.range(kStep), 0), sR = k.expandDims(k.range(kStep), 1);  // [1, 32], [32, 1]
  Value bnC = k.expandDims(k.range(BN), 0);
  const SsdChunk& ch = b.ch;

  // dCB against the other operand of CB: C_i for i >= r (dB), B_j for j <= r (dC).
  Value other = dC ? a.B : a.C;
  Value sOl = dC ? a.sBl : a.sCl, sOn = dC ? a.sBn : a.sCn;
  Value oBase = ch.row * (dC ? a.sBb : a.sCb) + b.g * (dC ? a.sBg : a.sCg);
  Value lo = dC ? zeroI : b.bm * T, hi = dC ? k.minimum(ch.n, (b.bm + 1) * T) : ch.n;
  const int po = dotPieces(spec, dC ? "B" : "C"), pf = ssdBwdPieces(spec);
  Value acc =
      k.forLoop(lo, hi, k.constInt(kStep), {k.splat(zero, {T, BN})}, [&](Value t0, const std::vector<Value>& c) {
        Value tR = t0 + sR;
        Value ot = k.load(other, oBase + (ch.t0 + tR) * sOl + b.nC * sOn, (tR < ch.n) && b.mN, zero);  // [32, BN]
        k.barrier();
        k.store(smem, sR * LDs + bnC, ot);
        k.barrier();
        Value tC = t0 + sC;  // [1, 32]
        Value keep = (dC ? (tC <= b.rR) : (tC >= b.rR)) && (tC < ch.n) && b.mR;
        Value d = k.load(a.ws, dC ? b.dcbBase + b.rR * Q + tC : b.dcbBase + tC * Q + b.rR, keep, zero);  // [T, 32]
        return std::vector<Value>{k.dot(d, smem, zeroI, k.constInt(LDs), k.constInt(1), c[0], pf, po)};
      })[0];

  // The states' part, per head of the group: (scaled x or dy) [T, 32 channels] times g or S_in
  // [32 channels, BN].
  auto statesPart = [&] {
    return k.forLoop(zeroI, a.hpg, oneI, {acc}, [&](Value hh, const std::vector<Value>& ah) {
      Value h = b.g * a.hpg + hh;
      Value scale = stateScale(k, a, b, Q, h);
      Value stBase = (dC ? a.oSt : a.oG) + (b.slot * a.H + h) * a.P * a.N;
      return k.forLoop(zeroI, a.P, k.constInt(kStep), {ah[0]}, [&](Value c0, const std::vector<Value>& c) {
        Value pR = c0 + sR;
        Value st = k.load(a.ws, stBase + pR * a.N + b.nC, (pR < a.P) && b.mN, zero);  // [32, BN]
        k.barrier();
        k.store(smem, sR * LDs + bnC, st);
        k.barrier();
        Value pC = c0 + sC, m = b.mR && (pC < a.P);
        Value op = dC ? ssdBwdDy(k, a, ch.row, ch.t0 + b.rR, h, pC, m)
                      : k.load(a.x, ch.row * a.sXb + (ch.t0 + b.rR) * a.sXl + h * a.sXh + pC * a.sXp, m, zero);
        return std::vector<Value>{k.dot(op * scale, smem, zeroI, k.constInt(LDs), k.constInt(1), c[0], pf, pf)};
      });
    })[0];
  };
  // None where the states are zero (a uniform branch).
  return k.ifElse(
      statesZero, [&] { return std::vector<Value>{acc}; }, [&] { return std::vector<Value>{statesPart()}; })[0];
}

// The vectors of the ring form's copies (0: a copy the bindings do not prove aligned).
struct BCVectors {
  int64_t dcb, st, other, x;
  SsdDyVectors dy;
  bool all() const { return dcb && st && other && x && dy.dout && dy.z; }
};

// The ring form's shared buffers and their pitches. 16-bit rows are padded by 8 halves (an odd
// number of 16-byte units, for ldmatrix), the dots' b tiles (the other operand's, the states'
// terms) as ssdStagedRows stages them; f32 rows read as they lie by 8 floats (16-byte rows for the
// copies, and the four rows of a half-warp's 8-byte reads in distinct banks), read transposed by 4
// (4-byte reads whose rows then fall in distinct banks).
struct BCRings {
  bool wgmma;
  int64_t p16, pIn, dcbPitch, dcbStage, stPitch, stStage, oStage, inStage, term;
  Value ring;   // f32: dCB's tiles, then the states' (S_in or g)
  Value os;     // the other operand of CB (B for dC, C for dB)
  Value terms;  // the states' tile as bf16 terms
  Value ins;    // x (dB) or dout (dC), [64 r, 32 channels]
  Value zs;     // z (dC)
  BCRings(KernelBuilder& k, const Specialization& spec, bool dC, int64_t BN, int pf) {
    const int64_t T = kSsdTokenBlock;
    wgmma = ssdWgmmaRows(spec, 2 * BN);
    const SsdStagedRows rows = ssdStagedRows(wgmma, BN);
    p16 = rows.pitch, pIn = kStep + 8;
    // dCB's tile: [64 r, 32 t] as it lies (dC) or [32 t, 64 r] (dB, read transposed).
    dcbPitch = dC ? kStep + 8 : T + 4, dcbStage = dC ? T * dcbPitch : kStep * dcbPitch;
    stPitch = BN + 8, stStage = kStep * stPitch;
    oStage = kStep * p16, inStage = T * pIn, term = kStep * p16;
    ring = k.sharedBuffer(kStages * std::max(dcbStage, stStage), DType::F32);
    const DType oT = ssdDtype(spec, dC ? "B" : "C");
    os = k.sharedBuffer(kStages * oStage, oT, rows.swizzle);
    terms = k.sharedBuffer(pf * term, DType::BF16, rows.swizzle);
    ins = k.sharedBuffer(kStages * inStage, ssdDtype(spec, dC ? "dout" : "x"));
    zs = dC ? ssdBwdZRing(k, spec, kStages * inStage) : Value{};
  }
};

// dCB against the other operand of CB: C_i for i >= r (dB), B_j for j <= r (dC), the tiles
// through the rings.
Value dcbPartInRings(KernelBuilder& k, const SsdBwdValues& a, const BCBlock& b, int64_t Q, int64_t BN,
                     const BCVectors& v, const BCRings& r, int pf) {
  const int64_t T = kSsdTokenBlock;
  const bool dC = b.dC;
  const SsdChunk& ch = b.ch;
  Value zero = k.constFloat(0), zeroI = k.constInt(0), one = k.constInt(1);
  Value sC = k.expandDims(k.range(kStep), 0);  // [1, 32]
  Value r0 = b.bm * T;
  Value other = dC ? a.B : a.C;
  Value sOl = dC ? a.sBl : a.sCl;
  Value oBase = ch.row * (dC ? a.sBb : a.sCb) + b.g * (dC ? a.sBg : a.sCg) + b.n0;
  Value lo = dC ? zeroI : r0, hi = dC ? k.minimum(ch.n, r0 + T) : ch.n;
  Value tiles = cdiv(hi - lo, k.constInt(kStep));
  auto copyD = [&](Value u) {
    Value t0 = lo + u * kStep, st = u % kStages;
    k.copyTileAsync(r.os, st * r.oStage, r.p16, other, oBase + (ch.t0 + t0) * sOl, sOl, kStep, BN, ch.n - t0,
                    a.N - b.n0, v.other);
    if (dC)
      k.copyTileAsync(r.ring, st * r.dcbStage, r.dcbPitch, a.ws, b.dcbBase + r0 * Q + t0, k.constInt(Q), T, kStep,
                      ch.n - r0, ch.n - t0, v.dcb);
    else
      k.copyTileAsync(r.ring, st * r.dcbStage, r.dcbPitch, a.ws, b.dcbBase + t0 * Q + r0, k.constInt(Q), kStep, T,
                      ch.n - t0, ch.n - r0, v.dcb);
  };
  for (int64_t u = 0; u < kStages - 1; ++u) {
    k.ifThen(k.constInt(u) < tiles, [&] { copyD(k.constInt(u)); });
    k.commitGroup();
  }
  Value rT = k.expandDims(k.range(T), 1);  // [T, 1]: r - r0
  return k.forLoop(zeroI, tiles, one, {k.splat(zero, {T, BN})}, [&](Value u, const std::vector<Value>& c) {
    Value next = u + (kStages - 1);
    k.ifThen(next < tiles, [&] { copyD(next); });
    k.commitGroup();
    k.waitGroup(kStages - 1);
    k.barrier(r.wgmma);
    Value st = u % kStages, tC = lo + u * kStep + sC;  // [1, 32]
    Value keep = (dC ? (tC <= b.rR) : (tC >= b.rR)) && (tC < ch.n) && b.mR;
    Value d = k.load(r.ring, st * r.dcbStage + (dC ? rT * r.dcbPitch + sC : sC * r.dcbPitch + rT));  // [T, 32]
    Value res = k.dot(k.select(keep, d, zero), r.os, st * r.oStage, k.constInt(r.p16), one, c[0], pf, 1);
    k.barrier();  // stage u is read before step u + 1 copies into it
    return std::vector<Value>{res};
  })[0];
}

// The states' part added to `acc`: step s is head g hpg + s / nC's channels (s % nC) 32 .. : g or
// S_in [32 channels, BN] (f32, split into terms) and x or dout and z [64 r, 32 channels], through
// the rings (dCB's tiles are read: its last step's barrier).
Value statesPartInRings(KernelBuilder& k, const Specialization& spec, const SsdBwdValues& a, const BCBlock& b,
                        int64_t Q, int64_t BN, const BCVectors& v, const BCRings& r, int pf, Value acc) {
  const int64_t T = kSsdTokenBlock;
  const bool dC = b.dC;
  const SsdChunk& ch = b.ch;
  Value zero = k.constFloat(0), zeroI = k.constInt(0), one = k.constInt(1);
  Value sC = k.expandDims(k.range(kStep), 0), sR = k.expandDims(k.range(kStep), 1);  // [1, 32], [32, 1]
  Value rT = k.expandDims(k.range(T), 1);                                            // [T, 1]: r - r0
  Value r0 = b.bm * T;
  Value nCh = cdiv(a.P, k.constInt(kStep)), steps = a.hpg * nCh;
  auto copyS = [&](Value s) {
    Value h = b.g * a.hpg + s / nCh, c0 = (s % nCh) * kStep, st = s % kStages;
    Value stBase = (dC ? a.oSt : a.oG) + (b.slot * a.H + h) * a.P * a.N;
    k.copyTileAsync(r.ring, st * r.stStage, r.stPitch, a.ws, stBase + c0 * a.N + b.n0, a.N, kStep, BN, a.P - c0,
                    a.N - b.n0, v.st);
    Value rows = ch.n - r0, cols = a.P - c0;
    if (dC) {
      ssdCopyDyTiles(k, a, r.ins, r.zs, st * r.inStage, r.pIn, ch.row, ch.t0 + r0, h, c0, T, kStep, rows, cols, v.dy);
    } else {
      k.copyTileAsync(r.ins, st * r.inStage, r.pIn, a.x, ch.row * a.sXb + (ch.t0 + r0) * a.sXl + h * a.sXh + c0, a.sXl,
                      T, kStep, rows, cols, v.x);
    }
  };
  for (int64_t s = 0; s < kStages - 1; ++s) {
    k.ifThen(k.constInt(s) < steps, [&] { copyS(k.constInt(s)); });
    k.commitGroup();
  }
  Value stOff = sR * r.stPitch + k.expandDims(k.range(BN), 0), tOff = sR * r.p16 + k.expandDims(k.range(BN), 0);
  Value inOff = rT * r.pIn + sC;  // [T, 32]
  // x (dB) or dy (dC) is exact in fewer terms than its product with the rows' scale (bf16 x, or
  // bf16 dout without z: one): each head's product then takes the operand as it is, and the scale
  // multiplies the head's sum, half the products of pf terms against pf.
  const int pOp = dC ? ssdBwdDyPieces(spec) : dotPieces(spec, "x");
  const bool scaleAfter = pOp < pf;
  // Head hh's channel steps added to `init`, the operand scaled by `scale` unless it is undefined.
  auto headSteps = [&](Value hh, Value init, Value scale) {
    return k.forLoop(zeroI, nCh, one, {init}, [&](Value c, const std::vector<Value>& cc) {
      Value s = hh * nCh + c, next = s + (kStages - 1);
      k.ifThen(next < steps, [&] { copyS(next); });
      k.commitGroup();
      k.waitGroup(kStages - 1);
      k.barrier();  // tile s is in; the last step's products have read the terms
      Value st = s % kStages;
      ssdStoreTerms(k, r.terms, tOff, r.term, pf, k.load(r.ring, st * r.stStage + stOff));
      Value in = k.load(r.ins, st * r.inStage + inOff);
      Value op = dC ? ssdGateDy(k, a, in, [&] { return k.load(r.zs, st * r.inStage + inOff); }) : in;
      k.barrier(r.wgmma);  // the terms are written
      Value res = scale.valid() ? ssdDotTerms(k, op * scale, r.terms, r.term, k.constInt(r.p16), one, cc[0], pf, pf)
                                : ssdDotTerms(k, op, r.terms, r.term, k.constInt(r.p16), one, cc[0], pf, pOp);
      k.barrier();  // stage s and the terms are read before the next step writes them
      return std::vector<Value>{res};
    })[0];
  };
  return k.forLoop(zeroI, a.hpg, one, {acc}, [&](Value hh, const std::vector<Value>& ah) {
    Value scale = stateScale(k, a, b, Q, b.g * a.hpg + hh);
    if (!scaleAfter) return std::vector<Value>{headSteps(hh, ah[0], scale)};
    return std::vector<Value>{ah[0] + scale * headSteps(hh, k.splat(zero, {T, BN}), Value{})};
  })[0];
}

// Both parts through rings; the states' part not where the states are zero (a uniform branch).
Value buildInRings(KernelBuilder& k, const Specialization& spec, const SsdBwdValues& a, const BCBlock& b, int64_t Q,
                   int64_t BN, const BCVectors& v, Value statesZero) {
  const int pf = ssdBwdPieces(spec);
  const BCRings r(k, spec, b.dC, BN, pf);
  Value acc = dcbPartInRings(k, a, b, Q, BN, v, r, pf);
  return k.ifElse(
      statesZero, [&] { return std::vector<Value>{acc}; },
      [&] { return std::vector<Value>{statesPartInRings(k, spec, a, b, Q, BN, v, r, pf, acc)}; })[0];
}

void buildBC(KernelBuilder& k, const Specialization& spec, bool dC) {
  const int64_t Q = spec.get("meta:chunk"), T = kSsdTokenBlock, BN = spec.get("meta:BLOCK_N");
  const SsdBwdValues a = ssdBwdValues(k);
  BCBlock b;
  b.dC = dC;
  Value nNb = cdiv(a.N, k.constInt(BN));
  const SsdSlotHeadBlock at = ssdSlotHeadBlock(k, spec, a.H / a.hpg, nNb * (Q / T));
  b.slot = at.slot, b.g = at.h;
  Value blk = at.blk;
  b.bm = blk / nNb, b.n0 = (blk % nNb) * BN;
  b.ch = ssdChunkOfSlot(k, a, b.slot);
  k.returnIf(b.bm * T >= b.ch.n);
  Value G = a.H / a.hpg;
  b.rR = b.bm * T + k.expandDims(k.range(T), 1), b.mR = b.rR < b.ch.n;  // [T, 1]: tokens r
  b.nC = b.n0 + k.expandDims(k.range(BN), 0), b.mN = b.nC < a.N;        // [1, BN]
  b.dcbBase = a.oDcb + (b.slot * G + b.g) * Q * Q;

  const char* otherName = dC ? "B" : "C";
  const bool rings =
      ssdIs16Bit(spec, otherName) && (dC ? ssdBwdDyRings(spec) : ssdIs16Bit(spec, "x") && ssdTileCopy(spec));
  BCVectors v{};
  if (rings) {
    const std::string o = otherName;
    v.dcb = ssdTileVector(spec, "ws", "", {"o_dcb"});
    v.st = ssdTileVector(spec, "ws", "", {dC ? "o_st" : "o_g", "N"});
    v.other = ssdTileVector(spec, o, "s_" + o + "_n", {"s_" + o + "_b", "s_" + o + "_l", "s_" + o + "_g"});
    v.x = dC ? 1 : ssdTileVector(spec, "x", "s_x_p", {"s_x_b", "s_x_l", "s_x_h"});
    v.dy = dC ? ssdBwdDyVectors(spec) : SsdDyVectors{1, 1};
  }
  // S_in is zero in a sequence's first chunk without initial states (dC), g in its last without
  // d(final states) (dB).
  Value statesZero =
      dC ? !a.hasInit && ssdFirstChunk(k, a, b.slot, b.ch, Q) : !a.hasDfinal && ssdLastChunk(k, a, b.slot, b.ch, Q);
  Value acc =
      v.all() ? buildInRings(k, spec, a, b, Q, BN, v, statesZero) : buildStaged(k, spec, a, b, Q, BN, statesZero);
  Value tok = b.ch.t0 + b.rR;
  if (dC)
    k.store(a.dC, b.ch.row * a.sDCb + tok * a.sDCl + b.g * a.sDCg + b.nC * a.sDCn, acc, b.mR && b.mN);
  else
    k.store(a.dB, b.ch.row * a.sDBb + tok * a.sDBl + b.g * a.sDBg + b.nC * a.sDBn, acc, b.mR && b.mN);
}

void chooseBCMeta(Specialization& s) {
  ssdDefaultMeta(s);
  ssdSlotHeadMeta(s);
  if (!s.find("meta:BLOCK_N")) s.set("meta:BLOCK_N", std::clamp<int64_t>(nextPow2(s.get("N")), 16, 64));
}

}  // namespace

const KernelRegistration kBwdDb(__FILE__, {kSsdBwdDb.kernel,
                                           [](KernelBuilder& k, const Specialization& s) { buildBC(k, s, false); },
                                           chooseBCMeta, &kSsdBwdDb});
const KernelRegistration kBwdDc(__FILE__, {kSsdBwdDc.kernel,
                                           [](KernelBuilder& k, const Specialization& s) { buildBC(k, s, true); },
                                           chooseBCMeta, &kSsdBwdDc});

}  // namespace ssmjit::kernels
