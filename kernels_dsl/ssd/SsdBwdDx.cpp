// ssd_bwd_dx (SsdBackward.h): for 64 tokens j of a chunk, a head and a block of p,
//   acc_j = exp(cum_last - cum_j) B_j . g[p, :]  +  sum_{i >= j} CB_ij exp(cum_i - cum_j) dy_i,
//   dx_j = dt'_j acc_j + D dy_j,   dz_j = dout_j y_j dsilu(z_j),
// with g the gradient of the chunk's own state (the g plane), on the tensor cores: B [64, 32
// states] from memory into registers times g [32 states, BLOCK_P] staged; then over the tokens
// i >= j in steps of 32 the decayed scores CB^T [64, 32] (fp32: three terms) times dy [32,
// BLOCK_P] staged. Per token it leaves this block's share of u = dy . (y - D x), s = x . acc
// and w = dt' x . (the state part of acc) in the token planes (ssd_bwd_dt sums them), and the 64
// tokens' sum of dy x per channel in the dD partials.
#include "kernels_dsl/Dsl.h"
#include "kernels_dsl/Registry.h"
#include "kernels_dsl/ssd/Ssd.h"
#include "kernels_dsl/ssd/SsdBackward.h"
#include "kernels_dsl/ssd/SsdChunks.h"

namespace ssmjit::kernels {
using namespace dsl;

namespace {

constexpr int64_t kStep = 32;  // states, then tokens, a step of the products

void buildDx(KernelBuilder& k, const Specialization& spec) {
  const int64_t Q = spec.get("meta:chunk"), T = kSsdTokenBlock, BP = ssdBwdBlockP(spec.get("P")), LDs = BP + 4;
  const SsdBwdValues a = ssdBwdValues(k);
  Value slot = k.programId(0), h = k.programId(1), blk = k.programId(2);
  Value nPb = cdiv(a.P, k.constInt(BP));
  Value bm = blk / nPb, pb = blk % nPb, p0 = pb * BP;
  const SsdChunk ch = ssdChunkOfSlot(k, a, slot);
  k.returnIf(bm * T >= ch.n);
  Value zero = k.constFloat(0), one = k.constFloat(1), zeroI = k.constInt(0);
  Value g = h / a.hpg, G = a.H / a.hpg;
  Value smem = k.sharedBuffer(kStep * LDs);
  Value jR = bm * T + k.expandDims(k.range(T), 1);                                   // [T, 1]: tokens j
  Value sC = k.expandDims(k.range(kStep), 0), sR = k.expandDims(k.range(kStep), 1);  // [1, 32], [32, 1]
  Value pC = p0 + k.expandDims(k.range(BP), 0), mP = pC < a.P;                       // [1, BP]
  Value bpC = k.expandDims(k.range(BP), 0);
  Value mJ = jR < ch.n, mOut = mJ && mP;
  Value wsRow = (slot * a.H + h) * Q;
  Value cumJ = k.load(a.ws, a.oCum + wsRow + jR, mJ, zero), dtJ = k.load(a.ws, a.oDt + wsRow + jR, mJ, zero);
  Value cumLast = k.load(a.ws, a.oCum + wsRow + ch.n - 1);
  const int pb16 = dotPieces(spec, "B");

  // exp(cum_last - cum_j) B_j . g: g[p, n] staged as [n, p].
  Value gBase = a.oG + (slot * a.H + h) * a.P * a.N;
  Value bBase = ch.row * a.sBb + (ch.t0 + jR) * a.sBl + g * a.sBg;
  Value accS =
      k.forLoop(zeroI, a.N, k.constInt(kStep), {k.splat(zero, {T, BP})}, [&](Value n0, const std::vector<Value>& c) {
        Value nR = n0 + sR;
        Value gt = k.load(a.ws, gBase + pC * a.N + nR, (nR < a.N) && mP, zero);  // [32, BP]
        k.barrier();
        k.store(smem, sR * LDs + bpC, gt);
        k.barrier();
        Value nC = n0 + sC;
        Value Bt = k.load(a.B, bBase + nC * a.sBn, mJ && (nC < a.N), zero);  // [T, 32]
        return std::vector<Value>{k.dot(Bt, smem, zeroI, k.constInt(LDs), k.constInt(1), c[0], pb16, 3)};
      })[0];
  accS = accS * k.exp(cumLast - cumJ);
  Value xOff = ch.row * a.sXb + (ch.t0 + jR) * a.sXl + h * a.sXh + pC * a.sXp;
  Value xj = k.load(a.x, xOff, mOut, zero);  // [T, BP]
  Value w = k.expandDims(k.reduce(xj * accS, 1, "sum"), 1) * dtJ;

  // The chunk's tokens i >= j: CB_ij exp(cum_i - cum_j) times dy_i.
  Value cbBase = a.oCb + (slot * G + g) * Q * Q;
  Value acc = k.forLoop(bm * T, ch.n, k.constInt(kStep), {accS}, [&](Value i0, const std::vector<Value>& c) {
    Value iR = i0 + sR;                                                        // [32, 1]
    Value dyI = ssdBwdDy(k, a, ch.row, ch.t0 + iR, h, pC, (iR < ch.n) && mP);  // [32, BP]
    k.barrier();
    k.store(smem, sR * LDs + bpC, dyI);
    k.barrier();
    Value iC = i0 + sC;  // [1, 32]
    Value keep = (iC >= jR) && (iC < ch.n);
    Value cumI = k.load(a.ws, a.oCum + wsRow + iC, iC < ch.n, zero);
    Value cb = k.load(a.ws, cbBase + iC * Q + jR, keep, zero);  // [T, 32]: CB[i, j], written blocks only
    Value s = k.select(keep, cb * k.exp(k.minimum(cumI - cumJ, zero)), zero);
    return std::vector<Value>{k.dot(s, smem, zeroI, k.constInt(LDs), k.constInt(1), c[0], 3, 3)};
  })[0];

  // Epilogue: dy_j, y_j, the gate; dx, dz and the partials.
  Value tok = ch.t0 + jR;
  Value dout = k.load(a.dout, ch.row * a.sOb + tok * a.sOl + h * a.sOh + pC * a.sOp, mOut, zero);
  Value y = k.load(a.ws, a.oY + ((ch.row * a.L + tok) * a.H + h) * a.P + pC, mOut, zero);
  Value D = k.ifElse(
      a.hasD, [&] { return std::vector<Value>{k.load(a.Dv, h * a.sDh + pC * a.sDp, mP, zero)}; },
      [&] {
        return std::vector<Value>{k.splat(zero, {1, BP})};
      })[0];
  std::vector<Value> gate = k.ifElse(
      a.hasZ,
      [&] {
        Value z = k.load(a.z, ch.row * a.sZb + tok * a.sZl + h * a.sZh + pC * a.sZp, mOut, zero);
        Value sg = sigmoid(z);
        Value dz = dout * y * sg * (one + z * (one - sg));
        k.store(a.dz, ch.row * a.sDzb + tok * a.sDzl + h * a.sDzh + pC * a.sDzp, dz, mOut);
        return std::vector<Value>{dout * z * sg};
      },
      [&] { return std::vector<Value>{dout}; });
  Value dy = gate[0];
  k.store(a.dx, ch.row * a.sDxb + tok * a.sDxl + h * a.sDxh + pC * a.sDxp, acc * dtJ + D * dy, mOut);
  Value u = k.expandDims(k.reduce(dy * (y - D * xj), 1, "sum"), 1);
  Value s = k.expandDims(k.reduce(xj * acc, 1, "sum"), 1);
  Value plane = a.slots * a.H * nPb * Q;
  Value tokAt = a.oTok + ((slot * a.H + h) * nPb + pb) * Q + jR;
  k.store(a.ws, tokAt, u, mJ);
  k.store(a.ws, tokAt + plane, s, mJ);
  k.store(a.ws, tokAt + 2 * plane, w, mJ);
  Value dD = k.expandDims(k.reduce(dy * xj, 0, "sum"), 0);  // [1, BP]
  k.store(a.ws, a.oDd + ((slot * (Q / T) + bm) * a.H + h) * a.P + pC, dD, mP);
}

void chooseDxMeta(Specialization& s) { ssdDefaultMeta(s); }

}  // namespace

const KernelRegistration kBwdDx(__FILE__, {kSsdBwdDx.kernel, buildDx, chooseDxMeta, &kSsdBwdDx});

}  // namespace ssmjit::kernels
