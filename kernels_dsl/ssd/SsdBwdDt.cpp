// ssd_bwd_dt and ssd_bwd_sums (SsdBackward.h).
// ssd_bwd_dt, per (slot, block of heads), a chunk's tokens along the tile: the token planes'
// partials summed over the blocks of p (u, s, w), then
//   d cum_t = u_t - dt'_t s_t,   d a_t = sum_{t' >= t} d cum_t' + sum_t' w_t' + pass,
// (a_t = dt'_t A: the reverse associative scan; w and the pass plane, the gradient of the
// chunk's last cumsum, reach every token), d dt'_t = s_t + A d a_t, and ddt through the clamp
// (0 where it binds), the softplus (sigmoid(dt + dt_bias) up to 20) and the bias; the chunk's
// sums of dt' d a (dA) and of ddt (ddt_bias) go to the per-slot partials.
// ssd_bwd_sums, per head: dA, ddt_bias and dD as sums of the partials over the slots, in slot
// order (dD: over each slot's 64-token blocks in order, then over p for D (H,)); empty slots and
// blocks past a chunk's tokens hold nothing and are skipped.
#include <algorithm>

#include "compiler/IntMath.h"
#include "kernels_dsl/Dsl.h"
#include "kernels_dsl/MetaDefaults.h"
#include "kernels_dsl/Registry.h"
#include "kernels_dsl/ssd/Ssd.h"
#include "kernels_dsl/ssd/SsdBackward.h"
#include "kernels_dsl/ssd/SsdChunks.h"

namespace ssmjit::kernels {
using namespace dsl;

namespace {

void buildDt(KernelBuilder& k, const Specialization& spec) {
  const int64_t Q = spec.get("meta:chunk"), BH = spec.get("meta:BLOCK_H"), P = spec.get("P");
  const int64_t nPb = (P + ssdBwdBlockP(P) - 1) / ssdBwdBlockP(P);
  const SsdBwdValues a = ssdBwdValues(k);
  Value slot = k.programId(0), pidH = k.programId(1);
  const SsdChunk ch = ssdChunkOfSlot(k, a, slot);
  k.returnIf(ch.n == 0);
  Value zero = k.constFloat(0), one = k.constFloat(1), zeroI = k.constInt(0), oneI = k.constInt(1);
  Value h = k.expandDims(pidH * BH + k.range(BH), 1);  // [BH, 1]
  Value t = k.expandDims(k.range(Q), 0);               // [1, Q]
  Value mH = h < a.H, m = mH && (t < ch.n);
  Value plane = a.slots * a.H * nPb * Q;
  Value u = k.splat(zero, {BH, Q}), s = u, w = u;
  for (int64_t pb = 0; pb < nPb; ++pb) {
    Value at = a.oTok + ((slot * a.H + h) * nPb + pb) * Q + t;
    u = u + k.load(a.ws, at, m, zero);
    s = s + k.load(a.ws, at + plane, m, zero);
    w = w + k.load(a.ws, at + 2 * plane, m, zero);
  }
  Value nPn = a.passParts;
  Value pass = k.forLoop(zeroI, nPn, oneI, {k.splat(zero, {BH, 1})}, [&](Value q, const std::vector<Value>& c) {
    return std::vector<Value>{c[0] + k.load(a.ws, a.oPn + (slot * a.H + h) * nPn + q, mH, zero)};
  })[0];
  Value dtp = k.load(a.ws, a.oDt + (slot * a.H + h) * Q + t, m, zero);
  Value dcum = u - dtp * s;
  Value rev = k.cumulativeSum(dcum, 1, true)[0];
  Value last = pass + k.expandDims(k.reduce(w, 1, "sum"), 1);  // [BH, 1]
  Value da = k.select(m, rev + last, zero);
  Value A = k.load(a.A, h * a.sAh, mH, zero);
  Value ddtp = s + A * da;
  Value dtOff = ch.row * a.sDtb + (ch.t0 + t) * a.sDtl;
  Value pre = k.load(a.dt, dtOff + h * a.sDth, m, zero);
  pre = pre + k.ifElse(
                  a.hasDtb, [&] { return std::vector<Value>{k.load(a.dtb, h * a.sDbh, mH, zero)}; },
                  [&] {
                    return std::vector<Value>{k.splat(zero, {BH, 1})};
                  })[0];
  Value v = k.select(a.softplusOn, softplus(pre), pre);
  Value gPre = k.select(a.softplusOn && (pre <= 20.0), sigmoid(pre), k.splat(one, {BH, Q}));
  Value binds = a.hasClamp && ((v < a.dtMin) || (v > a.dtMax));
  Value ddt = k.select(m && !binds, ddtp * gPre, zero);
  k.store(a.ddt, ch.row * a.sDdtb + (ch.t0 + t) * a.sDdtl + h * a.sDdth, ddt, m);
  Value rowAt = a.oSl + slot * a.H + h;
  k.store(a.ws, rowAt, k.expandDims(k.reduce(dtp * da, 1, "sum"), 1), mH);
  k.store(a.ws, rowAt + a.slots * a.H, k.expandDims(k.reduce(ddt, 1, "sum"), 1), mH);
}

void chooseDtMeta(Specialization& s) {
  ssdDefaultMeta(s);
  setDefault(s, "meta:BLOCK_H", 4);
}

void buildSums(KernelBuilder& k, const Specialization& spec) {
  const int64_t Q = spec.get("meta:chunk"), T = kSsdTokenBlock, BP = std::max<int64_t>(16, nextPow2(spec.get("P")));
  const SsdBwdValues a = ssdBwdValues(k);
  Value h = k.programId(0);
  Value zero = k.constFloat(0), zeroI = k.constInt(0), oneI = k.constInt(1);
  Value p = k.range(BP), mP = p < a.P;
  std::vector<Value> r =
      k.forLoop(zeroI, a.slots, oneI, {zero, zero, k.splat(zero, {BP})}, [&](Value slot, const std::vector<Value>& c) {
        Value n = k.load(a.chunks, slot * 4 + 3);
        Value live = n > 0;
        Value at = a.oSl + slot * a.H + h;
        Value dA = c[0] + k.select(live, k.load(a.ws, at), zero);
        Value dtb = c[1] + k.select(live, k.load(a.ws, at + a.slots * a.H), zero);
        Value dD = c[2];
        for (int64_t bm = 0; bm < Q / T; ++bm)
          dD = dD + k.load(a.ws, a.oDd + ((slot * (Q / T) + bm) * a.H + h) * a.P + p, mP && (n > bm * T), zero);
        return std::vector<Value>{dA, dtb, dD};
      });
  k.store(a.dA, h * a.sDAh, r[0]);
  k.ifThen(a.hasDtb, [&] { k.store(a.ddtb, h * a.sDdbh, r[1]); });
  k.ifThen(a.hasD && a.dPerChannel, [&] { k.store(a.dD, h * a.sDDh + p * a.sDDp, r[2], mP); });
  k.ifThen(a.hasD && !a.dPerChannel, [&] { k.store(a.dD, h * a.sDDh, k.reduce(r[2], 0, "sum")); });
}

void chooseSumsMeta(Specialization& s) { ssdDefaultMeta(s); }

}  // namespace

const KernelRegistration kBwdDt(__FILE__, {kSsdBwdDt.kernel, buildDt, chooseDtMeta, &kSsdBwdDt});
const KernelRegistration kBwdSums(__FILE__, {kSsdBwdSums.kernel, buildSums, chooseSumsMeta, &kSsdBwdSums});

}  // namespace ssmjit::kernels
