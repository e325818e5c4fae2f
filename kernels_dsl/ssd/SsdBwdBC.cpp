// ssd_bwd_db and ssd_bwd_dc (SsdBackward.h): a group's dB or dC for 64 tokens r of a chunk and a
// block of states, on the tensor cores, each product's b staged through shared memory (zeros past
// the chunk, the states and the channels):
//   dB_r = sum_{i >= r} dCB_ir C_i + sum_h dt'_r exp(cum_last - cum_r) x_r . g_h,
//   dC_r = sum_{j <= r} dCB_rj B_j + sum_h exp(cum_r) dy_r . S_in,h,
// with g_h the gradient of head h's chunk state (the g plane) and S_in,h the state entering the
// chunk; the heads of the group in order. dCB (fp32) and the scaled x or dy take meta:pieces terms (SsdChunks.h).
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

void buildBC(KernelBuilder& k, const Specialization& spec, bool dC) {
  const int64_t Q = spec.get("meta:chunk"), T = kSsdTokenBlock, BN = spec.get("meta:BLOCK_N"), LDs = BN + 4;
  const SsdBwdValues a = ssdBwdValues(k);
  Value slot = k.programId(0), g = k.programId(1), blk = k.programId(2);
  Value nNb = cdiv(a.N, k.constInt(BN));
  Value bm = blk / nNb, n0 = (blk % nNb) * BN;
  const SsdChunk ch = ssdChunkOfSlot(k, a, slot);
  k.returnIf(bm * T >= ch.n);
  Value zero = k.constFloat(0), zeroI = k.constInt(0), oneI = k.constInt(1);
  Value G = a.H / a.hpg;
  Value smem = k.sharedBuffer(kStep * LDs);
  Value rR = bm * T + k.expandDims(k.range(T), 1), mR = rR < ch.n;                   // [T, 1]: tokens r
  Value sC = k.expandDims(k.range(kStep), 0), sR = k.expandDims(k.range(kStep), 1);  // [1, 32], [32, 1]
  Value nC = n0 + k.expandDims(k.range(BN), 0), mN = nC < a.N;                       // [1, BN]
  Value bnC = k.expandDims(k.range(BN), 0);
  Value dcbBase = a.oDcb + (slot * G + g) * Q * Q;

  // dCB against the other operand of CB: C_i for i >= r (dB), B_j for j <= r (dC).
  Value other = dC ? a.B : a.C;
  Value sOl = dC ? a.sBl : a.sCl, sOn = dC ? a.sBn : a.sCn;
  Value oBase = ch.row * (dC ? a.sBb : a.sCb) + g * (dC ? a.sBg : a.sCg);
  Value lo = dC ? zeroI : bm * T, hi = dC ? k.minimum(ch.n, (bm + 1) * T) : ch.n;
  const int po = dotPieces(spec, dC ? "B" : "C"), pf = ssdBwdPieces(spec);
  Value acc =
      k.forLoop(lo, hi, k.constInt(kStep), {k.splat(zero, {T, BN})}, [&](Value t0, const std::vector<Value>& c) {
        Value tR = t0 + sR;
        Value ot = k.load(other, oBase + (ch.t0 + tR) * sOl + nC * sOn, (tR < ch.n) && mN, zero);  // [32, BN]
        k.barrier();
        k.store(smem, sR * LDs + bnC, ot);
        k.barrier();
        Value tC = t0 + sC;  // [1, 32]
        Value keep = (dC ? (tC <= rR) : (tC >= rR)) && (tC < ch.n) && mR;
        Value d = k.load(a.ws, dC ? dcbBase + rR * Q + tC : dcbBase + tC * Q + rR, keep, zero);  // [T, 32]
        return std::vector<Value>{k.dot(d, smem, zeroI, k.constInt(LDs), k.constInt(1), c[0], pf, po)};
      })[0];

  // The states' part, per head of the group: (scaled x or dy) [T, 32 channels] times g or S_in
  // [32 channels, BN].
  acc = k.forLoop(zeroI, a.hpg, oneI, {acc}, [&](Value hh, const std::vector<Value>& ah) {
    Value h = g * a.hpg + hh;
    Value wsRow = (slot * a.H + h) * Q;
    Value cumR = k.load(a.ws, a.oCum + wsRow + rR, mR, zero);
    Value scale =
        dC ? k.exp(cumR)
           : k.load(a.ws, a.oDt + wsRow + rR, mR, zero) * k.exp(k.load(a.ws, a.oCum + wsRow + ch.n - 1) - cumR);
    Value stBase = (dC ? a.oSt : a.oG) + (slot * a.H + h) * a.P * a.N;
    return k.forLoop(zeroI, a.P, k.constInt(kStep), {ah[0]}, [&](Value c0, const std::vector<Value>& c) {
      Value pR = c0 + sR;
      Value st = k.load(a.ws, stBase + pR * a.N + nC, (pR < a.P) && mN, zero);  // [32, BN]
      k.barrier();
      k.store(smem, sR * LDs + bnC, st);
      k.barrier();
      Value pC = c0 + sC, m = mR && (pC < a.P);
      Value op = dC ? ssdBwdDy(k, a, ch.row, ch.t0 + rR, h, pC, m)
                    : k.load(a.x, ch.row * a.sXb + (ch.t0 + rR) * a.sXl + h * a.sXh + pC * a.sXp, m, zero);
      return std::vector<Value>{k.dot(op * scale, smem, zeroI, k.constInt(LDs), k.constInt(1), c[0], pf, pf)};
    });
  })[0];
  Value tok = ch.t0 + rR;
  if (dC)
    k.store(a.dC, ch.row * a.sDCb + tok * a.sDCl + g * a.sDCg + nC * a.sDCn, acc, mR && mN);
  else
    k.store(a.dB, ch.row * a.sDBb + tok * a.sDBl + g * a.sDBg + nC * a.sDBn, acc, mR && mN);
}

void chooseBCMeta(Specialization& s) {
  ssdDefaultMeta(s);
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
