// ssd_bwd_dx (SsdBackward.h): for 64 tokens j of a chunk, a head and a block of p,
//   acc_j = exp(cum_last - cum_j) B_j . g[p, :]  +  sum_{i >= j} CB_ij exp(cum_i - cum_j) dy_i,
//   dx_j = dt'_j acc_j + D dy_j,   dz_j = dout_j y_j dsilu(z_j),
// with g the gradient of the chunk's own state (the g plane; zero in a sequence's last chunk
// without d(final states), whose programs skip the state part), on the tensor cores: B [64, 32
// states] from memory into registers times g [32 states, BLOCK_P]; then over the tokens i >= j in
// steps of 32 the decayed scores CB^T [64, 32] times dy [32, BLOCK_P]. The f32 operands take
// meta:pieces terms (SsdChunks.h). Per token it leaves this block's share of u = dy . (y - D x),
// s = x . acc and w = dt' x . (the state part of acc) in the token planes (ssd_bwd_dt sums them),
// and the 64 tokens' sum of dy x per channel in the dD partials.
// With 16-bit dout and z whose rows the bindings prove aligned, g's f32 tiles, then C.B's and
// dout's and z's, arrive through cp.async rings ahead of their use; g and the gated dy are split
// into bf16 terms in shared memory and read by ldmatrix. Otherwise g and dy are staged as f32.
#include <algorithm>
#include <functional>

#include "compiler/IntMath.h"
#include "kernels_dsl/Dsl.h"
#include "kernels_dsl/Registry.h"
#include "kernels_dsl/ssd/Ssd.h"
#include "kernels_dsl/ssd/SsdBackward.h"
#include "kernels_dsl/ssd/SsdChunks.h"
#include "kernels_dsl/ssd/SsdDecayRing.h"

namespace ssmjit::kernels {
using namespace dsl;

namespace {

constexpr int64_t kStep = 32;    // states, then tokens, a step of the products
constexpr int kStages = 3;       // the rings of the scores' steps
constexpr int kStateStages = 2;  // g's ring
// Row pitches: g's f32 tiles [p, 32 states] (16-byte rows for the copies; 8 words past 32, so
// that the four rows of a half-warp's 8-byte reads fall in distinct banks) and their bf16 terms
// (an odd number of 16-byte units, for ldmatrix).
constexpr int64_t kStatePitchF32 = kStep + 8, kStatePitch16 = kStep + 8;

// What every part of a program reads: its block, tokens j and channels p.
struct DxBlock {
  SsdChunk ch;
  Value slot, h, g, bm, pb, nPb, p0, jR, pC, mP, mJ, wsRow, cumJ;
};

// exp(cum_last - cum_j) B_j . g with g staged as f32 [n, p].
Value stateStaged(KernelBuilder& k, const Specialization& spec, const SsdBwdValues& a, const DxBlock& d, int64_t BP) {
  const int64_t LDs = BP + 4;
  Value zero = k.constFloat(0), zeroI = k.constInt(0);
  Value smem = k.sharedBuffer(kStep * LDs);
  Value sC = k.expandDims(k.range(kStep), 0), sR = k.expandDims(k.range(kStep), 1), bpC = k.expandDims(k.range(BP), 0);
  Value gBase = a.oG + (d.slot * a.H + d.h) * a.P * a.N;
  Value bBase = d.ch.row * a.sBb + (d.ch.t0 + d.jR) * a.sBl + d.g * a.sBg;
  const int pb16 = dotPieces(spec, "B"), pf = ssdBwdPieces(spec);
  return k.forLoop(zeroI, a.N, k.constInt(kStep), {k.splat(zero, {kSsdTokenBlock, BP})},
                   [&](Value n0, const std::vector<Value>& c) {
                     Value nR = n0 + sR;
                     Value gt = k.load(a.ws, gBase + d.pC * a.N + nR, (nR < a.N) && d.mP, zero);  // [32, BP]
                     k.barrier();
                     k.store(smem, sR * LDs + bpC, gt);
                     k.barrier();
                     Value nC = n0 + sC;
                     Value Bt = k.load(a.B, bBase + nC * a.sBn, d.mJ && (nC < a.N), zero);  // [T, 32]
                     return std::vector<Value>{k.dot(Bt, smem, zeroI, k.constInt(LDs), k.constInt(1), c[0], pb16, pf)};
                   })[0];
}

// The scores' part with dy staged as f32 [i, p].
Value scoresStaged(KernelBuilder& k, const Specialization& spec, const SsdBwdValues& a, const DxBlock& d, int64_t BP,
                   int64_t Q, Value acc) {
  const int64_t T = kSsdTokenBlock, LDs = BP + 4;
  Value zero = k.constFloat(0), zeroI = k.constInt(0);
  Value smem = k.sharedBuffer(kStep * LDs);
  Value sC = k.expandDims(k.range(kStep), 0), sR = k.expandDims(k.range(kStep), 1), bpC = k.expandDims(k.range(BP), 0);
  Value cbBase = a.oCb + (d.slot * (a.H / a.hpg) + d.g) * Q * Q;
  const int pf = ssdBwdPieces(spec);
  return k.forLoop(d.bm * T, d.ch.n, k.constInt(kStep), {acc}, [&](Value i0, const std::vector<Value>& c) {
    Value iR = i0 + sR;                                                                    // [32, 1]
    Value dyI = ssdBwdDy(k, a, d.ch.row, d.ch.t0 + iR, d.h, d.pC, (iR < d.ch.n) && d.mP);  // [32, BP]
    k.barrier();
    k.store(smem, sR * LDs + bpC, dyI);
    k.barrier();
    Value iC = i0 + sC;  // [1, 32]
    Value keep = (iC >= d.jR) && (iC < d.ch.n);
    Value cumI = k.load(a.ws, a.oCum + d.wsRow + iC, iC < d.ch.n, zero);
    Value cb = k.load(a.ws, cbBase + iC * Q + d.jR, keep, zero);  // [T, 32]: CB[i, j], written blocks only
    Value s = k.select(keep, cb * ssdDecay(k, cumI, d.cumJ), zero);
    return std::vector<Value>{k.dot(s, smem, zeroI, k.constInt(LDs), k.constInt(1), c[0], pf, pf)};
  })[0];
}

// The shared buffers of the ring path (16-bit dout and z): an f32 ring that holds g's tiles, then
// C.B's; bf16 terms of g's tile, then of dy's; dout's and z's rings.
struct DxRings {
  int64_t gVec, cbVec;
  SsdDyVectors dy;
  Value ring, terms, os, zs;
  // Where the products' b go to wgmma (ssdWgmmaRows): the dy terms in a buffer swizzled in rows
  // of BP, the state terms in one of their own in rows of 32 states; else both in `terms`.
  bool wgmma = false;
  Value stTerms;
};
constexpr int64_t kDyPad = 8, kCbPitch = kSsdTokenBlock + 4;

DxRings dxRings(KernelBuilder& k, const Specialization& spec, int64_t BP, int64_t gVec, int64_t cbVec,
                const SsdDyVectors& dy) {
  const int pf = ssdBwdPieces(spec);
  const int64_t dyStage = kStep * (BP + kDyPad);
  DxRings r{gVec, cbVec, dy, {}, {}, {}, {}};
  r.ring = k.sharedBuffer(std::max(kStateStages * BP * kStatePitchF32, kStages * kStep * kCbPitch), DType::F32);
  r.wgmma = ssdWgmmaRows(spec, 2 * BP);
  if (r.wgmma) {
    r.terms = k.sharedBuffer(pf * kStep * BP, DType::BF16, ssdStagedRows(true, BP).swizzle);
    r.stTerms = k.sharedBuffer(pf * BP * kStep, DType::BF16, ssdStagedRows(true, kStep).swizzle);
  } else {
    r.terms = r.stTerms = k.sharedBuffer(pf * std::max(BP * kStatePitch16, dyStage), DType::BF16);
  }
  r.os = k.sharedBuffer(kStages * dyStage, ssdDtype(spec, "dout"));
  r.zs = ssdBwdZRing(k, spec, kStages * dyStage);
  return r;
}

// B_j . g with g[p, n0 .. n0 + 32) copied as it lies, two tiles in flight, split into terms.
Value stateInRings(KernelBuilder& k, const Specialization& spec, const SsdBwdValues& a, const DxBlock& d,
                   const DxRings& r, int64_t BP) {
  const int64_t tPitch = ssdStagedRows(r.wgmma, kStep).pitch;
  const int64_t T = kSsdTokenBlock, gStage = BP * kStatePitchF32, gTerm = BP * tPitch;
  const int pf = ssdBwdPieces(spec), pb16 = dotPieces(spec, "B");
  Value zero = k.constFloat(0), zeroI = k.constInt(0), one = k.constInt(1);
  const int64_t nSteps = cdiv(spec.get("N"), kStep);
  Value gBase = a.oG + (d.slot * a.H + d.h) * a.P * a.N;
  Value bBase = d.ch.row * a.sBb + (d.ch.t0 + d.jR) * a.sBl + d.g * a.sBg;
  Value pR = k.expandDims(k.range(BP), 1), nCc = k.expandDims(k.range(kStep), 0);  // [BP, 1], [1, 32]
  auto copyG = [&](Value s) {
    k.copyTileAsync(r.ring, (s % kStateStages) * gStage, kStatePitchF32, a.ws, gBase + d.p0 * a.N + s * kStep, a.N, BP,
                    kStep, a.P - d.p0, a.N - s * kStep, r.gVec);
  };
  for (int64_t s = 0; s < kStateStages; ++s) {
    if (s < nSteps) copyG(k.constInt(s));
    k.commitGroup();
  }
  return k.forLoop(zeroI, k.constInt(nSteps), one, {k.splat(zero, {T, BP})}, [&](Value s, const std::vector<Value>& c) {
    Value nC = s * kStep + nCc;
    Value Bt = k.load(a.B, bBase + nC * a.sBn, d.mJ && (nC < a.N), zero);  // [T, 32]; overlaps the wait
    k.waitGroup(1);
    k.barrier();  // tile s is in; the last step's products have read the terms
    Value gt = k.load(r.ring, (s % kStateStages) * gStage + pR * kStatePitchF32 + nCc);
    ssdStoreTerms(k, r.stTerms, pR * tPitch + nCc, gTerm, pf, gt);
    k.barrier(r.wgmma);  // stage s is read, the terms are written
    k.ifThen(s + kStateStages < k.constInt(nSteps), [&] { copyG(s + kStateStages); });
    k.commitGroup();
    return std::vector<Value>{ssdDotTerms(k, Bt, r.stTerms, gTerm, one, k.constInt(tPitch), c[0], pf, pb16)};
  })[0];
}

// acc + the scores' part over the chunk's tokens i >= j in steps of 32: C.B's [32 i, 64 j] tile and
// dout's and z's [32 i, BP] through three-stage rings; the gated dy split into terms.
Value scoresInRings(KernelBuilder& k, const Specialization& spec, const SsdBwdValues& a, const DxBlock& d,
                    const DxRings& r, int64_t BP, int64_t Q, Value acc) {
  const int64_t T = kSsdTokenBlock, dyPitch = BP + kDyPad, cbStage = kStep * kCbPitch, dyStage = kStep * dyPitch;
  const int pf = ssdBwdPieces(spec), py = ssdBwdDyPieces(spec);
  Value zero = k.constFloat(0), zeroI = k.constInt(0), one = k.constInt(1);
  Value iFirst = d.bm * T, tiles = cdiv(d.ch.n - iFirst, k.constInt(kStep));
  Value cbBase = a.oCb + (d.slot * (a.H / a.hpg) + d.g) * Q * Q;
  const SsdDecayRing decays(k, spec, a, d.wsRow, kStages, kStep);  // the cumsums of tokens i, with C.B's tiles
  auto copyI = [&](Value u) {
    Value i0 = iFirst + u * kStep, st = u % kStages;
    decays.copy(u, i0);
    k.copyTileAsync(r.ring, st * cbStage, kCbPitch, a.ws, cbBase + i0 * Q + iFirst, k.constInt(Q), kStep, T,
                    d.ch.n - i0, k.constInt(T), r.cbVec);
    ssdCopyDyTiles(k, a, r.os, r.zs, st * dyStage, dyPitch, d.ch.row, d.ch.t0 + i0, d.h, d.p0, kStep, BP, d.ch.n - i0,
                   a.P - d.p0, r.dy);
  };
  for (int64_t u = 0; u < kStages - 1; ++u) {  // the ring's g tiles are read (the state part's barriers)
    k.ifThen(k.constInt(u) < tiles, [&] { copyI(k.constInt(u)); });
    k.commitGroup();
  }
  Value sR = k.expandDims(k.range(kStep), 1), sC = k.expandDims(k.range(kStep), 0);  // [32, 1], [1, 32]
  Value dyOff = sR * dyPitch + k.expandDims(k.range(BP), 0);                         // [32, BP] in a stage
  const int64_t tPitch = ssdStagedRows(r.wgmma, BP).pitch, tStage = kStep * tPitch;  // the dy terms'
  Value tOff = sR * tPitch + k.expandDims(k.range(BP), 0);
  Value jLocal = d.jR - iFirst;  // [T, 1]
  return k.forLoop(zeroI, tiles, one, {acc}, [&](Value u, const std::vector<Value>& c) {
    Value next = u + (kStages - 1);
    k.ifThen(next < tiles, [&] { copyI(next); });
    k.commitGroup();
    Value iC = iFirst + u * kStep + sC;  // [1, 32]
    Value cumI =
        decays.staged() ? Value{} : k.load(a.ws, a.oCum + d.wsRow + iC, iC < d.ch.n, zero);  // overlaps the wait
    k.waitGroup(kStages - 1);
    k.barrier();
    if (decays.staged()) cumI = decays.cum(u);  // past the chunk: the last cumsum (masked below by keep)
    Value st = u % kStages;
    Value dy = ssdGateDy(k, a, k.load(r.os, st * dyStage + dyOff), [&] { return k.load(r.zs, st * dyStage + dyOff); });
    ssdStoreTerms(k, r.terms, tOff, tStage, py, dy);
    Value keep = (iC >= d.jR) && (iC < d.ch.n);
    Value cb = k.load(r.ring, st * cbStage + sC * kCbPitch + jLocal);  // [T, 32]: CB[i, j]
    Value s = k.select(keep, cb * ssdDecay(k, cumI, d.cumJ), zero);
    k.barrier(r.wgmma);  // the terms are written
    // dy in one exact term (bf16 dout, no z) meets every piece of the scores.
    Value res = py == 1 ? k.dot(s, r.terms, zeroI, k.constInt(tPitch), one, c[0], pf, 1)
                        : ssdDotTerms(k, s, r.terms, tStage, k.constInt(tPitch), one, c[0], py, pf);
    k.barrier();  // stage u and the terms are read before the next step writes them
    return std::vector<Value>{res};
  })[0];
}

void buildDx(KernelBuilder& k, const Specialization& spec) {
  const int64_t Q = spec.get("meta:chunk"), T = kSsdTokenBlock, BP = ssdBwdBlockP(spec.get("P"));
  const SsdBwdValues a = ssdBwdValues(k);
  DxBlock d;
  d.nPb = cdiv(a.P, k.constInt(BP));
  const SsdSlotHeadBlock at = ssdSlotHeadBlock(k, spec, a.H, d.nPb * (Q / T));
  d.slot = at.slot, d.h = at.h;
  Value blk = at.blk;
  d.bm = blk / d.nPb, d.pb = blk % d.nPb, d.p0 = d.pb * BP;
  d.ch = ssdChunkOfSlot(k, a, d.slot);
  k.returnIf(d.bm * T >= d.ch.n);
  Value zero = k.constFloat(0), one = k.constFloat(1);
  d.g = d.h / a.hpg;
  d.jR = d.bm * T + k.expandDims(k.range(T), 1);  // [T, 1]: tokens j
  d.pC = d.p0 + k.expandDims(k.range(BP), 0), d.mP = d.pC < a.P;
  d.mJ = d.jR < d.ch.n;
  Value mOut = d.mJ && d.mP;
  d.wsRow = (d.slot * a.H + d.h) * Q;
  d.cumJ = k.load(a.ws, a.oCum + d.wsRow + d.jR, d.mJ, zero);
  Value dtJ = k.load(a.ws, a.oDt + d.wsRow + d.jR, d.mJ, zero);
  Value cumLast = k.load(a.ws, a.oCum + d.wsRow + d.ch.n - 1);

  const bool rings = ssdBwdDyRings(spec);
  const int64_t gVec = rings ? ssdTileVector(spec, "ws", "", {"o_g", "N"}) : 0;
  const int64_t cbVec = rings ? ssdTileVector(spec, "ws", "", {"o_cb"}) : 0;
  const SsdDyVectors dyVec = rings ? ssdBwdDyVectors(spec) : SsdDyVectors{};
  Value xOff = d.ch.row * a.sXb + (d.ch.t0 + d.jR) * a.sXl + d.h * a.sXh + d.pC * a.sXp;
  Value xj, w, acc;
  auto stateShare = [&](Value accS) {    // w = dt' x . (the state part of acc)
    xj = k.load(a.x, xOff, mOut, zero);  // [T, BP]
    w = k.expandDims(k.reduce(xj * accS, 1, "sum"), 1) * dtJ;
  };
  // A sequence's last chunk leaves its final state, whose gradient is zero without d(final
  // states): its programs skip the state part (a uniform branch; the same zeros).
  Value gZero = !a.hasDfinal && ssdLastChunk(k, a, d.slot, d.ch, Q);
  auto statePart = [&](const std::function<Value()>& product) {
    return k.ifElse(
        gZero,
        [&] {
          return std::vector<Value>{k.splat(zero, {T, BP})};
        },
        [&] { return std::vector<Value>{product() * k.exp(cumLast - d.cumJ)}; })[0];
  };
  if (gVec && cbVec && dyVec.dout && dyVec.z) {
    const DxRings r = dxRings(k, spec, BP, gVec, cbVec, dyVec);
    Value accS = statePart([&] { return stateInRings(k, spec, a, d, r, BP); });
    stateShare(accS);
    acc = scoresInRings(k, spec, a, d, r, BP, Q, accS);
  } else {
    Value accS = statePart([&] { return stateStaged(k, spec, a, d, BP); });
    stateShare(accS);
    acc = scoresStaged(k, spec, a, d, BP, Q, accS);
  }

  // Epilogue: dy_j, y_j, the gate; dx, dz and the partials.
  Value tok = d.ch.t0 + d.jR;
  Value dout = k.load(a.dout, d.ch.row * a.sOb + tok * a.sOl + d.h * a.sOh + d.pC * a.sOp, mOut, zero);
  Value y = k.load(a.y, d.ch.row * a.sYb + tok * a.sYl + d.h * a.sYh + d.pC * a.sYp, mOut, zero);
  Value D = k.ifElse(
      a.hasD, [&] { return std::vector<Value>{k.load(a.Dv, d.h * a.sDh + d.pC * a.sDp, d.mP, zero)}; },
      [&] {
        return std::vector<Value>{k.splat(zero, {1, BP})};
      })[0];
  std::vector<Value> gate = k.ifElse(
      a.hasZ,
      [&] {
        Value z = k.load(a.z, d.ch.row * a.sZb + tok * a.sZl + d.h * a.sZh + d.pC * a.sZp, mOut, zero);
        Value sg = sigmoid(z);
        Value dz = dout * y * sg * (one + z * (one - sg));
        k.store(a.dz, d.ch.row * a.sDzb + tok * a.sDzl + d.h * a.sDzh + d.pC * a.sDzp, dz, mOut);
        return std::vector<Value>{dout * z * sg};
      },
      [&] { return std::vector<Value>{dout}; });
  Value dy = gate[0];
  k.store(a.dx, d.ch.row * a.sDxb + tok * a.sDxl + d.h * a.sDxh + d.pC * a.sDxp, acc * dtJ + D * dy, mOut);
  Value u = k.expandDims(k.reduce(dy * (y - D * xj), 1, "sum"), 1);
  Value s = k.expandDims(k.reduce(xj * acc, 1, "sum"), 1);
  Value plane = a.slots * a.H * d.nPb * Q;
  Value tokAt = a.oTok + ((d.slot * a.H + d.h) * d.nPb + d.pb) * Q + d.jR;
  k.store(a.ws, tokAt, u, d.mJ);
  k.store(a.ws, tokAt + plane, s, d.mJ);
  k.store(a.ws, tokAt + 2 * plane, w, d.mJ);
  Value dD = k.expandDims(k.reduce(dy * xj, 0, "sum"), 0);  // [1, BP]
  k.store(a.ws, a.oDd + ((d.slot * (Q / T) + d.bm) * a.H + d.h) * a.P + d.pC, dD, d.mP);
}

void chooseDxMeta(Specialization& s) {
  ssdDefaultMeta(s);
  ssdSlotHeadMeta(s);
}

}  // namespace

const KernelRegistration kBwdDx(__FILE__, {kSsdBwdDx.kernel, buildDx, chooseDxMeta, &kSsdBwdDx});

}  // namespace ssmjit::kernels
