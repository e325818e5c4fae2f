// ssd_bwd_dcb (SsdBackward.h): the gradient of CB for a chunk's 64 x 64 block (i, j), j <= i,
//   dCB_ij = sum over the group's heads h, in order, of exp(cum_i - cum_j) dt'_j dy_i . x_j,
// on the tensor cores: per head, dy [64 rows i, 32 channels] (fp32: three terms) times x^T [32
// channels, 64 tokens j] staged through shared memory (zeros past the chunk and the channels),
// then decayed and masked (j > i: 0). fp32 to the dcb plane; blocks above the diagonal skipped.
#include "kernels_dsl/Dsl.h"
#include "kernels_dsl/Registry.h"
#include "kernels_dsl/ssd/Ssd.h"
#include "kernels_dsl/ssd/SsdBackward.h"
#include "kernels_dsl/ssd/SsdChunks.h"

namespace ssmjit::kernels {
using namespace dsl;

namespace {

constexpr int64_t kChannels = 32;  // channels a step of the product

void buildDcb(KernelBuilder& k, const Specialization& spec) {
  const int64_t Q = spec.get("meta:chunk"), T = kSsdTokenBlock, LDs = T + 4;
  const SsdBwdValues a = ssdBwdValues(k);
  const auto [slot, g, bi, bj, ch] = ssdPairBlock(k, a, Q);
  Value zero = k.constFloat(0), zeroI = k.constInt(0), oneI = k.constInt(1);
  Value G = a.H / a.hpg;
  Value smem = k.sharedBuffer(kChannels * LDs);
  Value iR = bi * T + k.expandDims(k.range(T), 1), jC = bj * T + k.expandDims(k.range(T), 0);  // [T, 1], [1, T]
  Value cR = k.expandDims(k.range(kChannels), 1), cC = k.expandDims(k.range(kChannels), 0);    // [32, 1], [1, 32]
  Value mI = iR < ch.n, mJ = jC < ch.n;
  Value keep = (jC <= iR) && mI && mJ;
  const int px = dotPieces(spec, "x");
  Value total = k.forLoop(zeroI, a.hpg, oneI, {k.splat(zero, {T, T})}, [&](Value hh, const std::vector<Value>& t) {
    Value h = g * a.hpg + hh;
    Value wsRow = (slot * a.H + h) * Q;
    Value dots = k.forLoop(
        zeroI, a.P, k.constInt(kChannels), {k.splat(zero, {T, T})}, [&](Value c0, const std::vector<Value>& c) {
          Value pR = c0 + cR;
          Value xt = k.load(a.x, ch.row * a.sXb + (ch.t0 + jC) * a.sXl + h * a.sXh + pR * a.sXp, mJ && (pR < a.P),
                            zero);  // [32 channels, T tokens j]
          k.barrier();
          k.store(smem, cR * LDs + k.expandDims(k.range(T), 0), xt);
          k.barrier();
          Value pC = c0 + cC;
          Value dy = ssdBwdDy(k, a, ch.row, ch.t0 + iR, h, pC, mI && (pC < a.P));  // [T, 32]
          return std::vector<Value>{k.dot(dy, smem, zeroI, k.constInt(LDs), k.constInt(1), c[0], 3, px)};
        })[0];
    Value cumI = k.load(a.ws, a.oCum + wsRow + iR, mI, zero);
    Value cumJ = k.load(a.ws, a.oCum + wsRow + jC, mJ, zero), dtJ = k.load(a.ws, a.oDt + wsRow + jC, mJ, zero);
    return std::vector<Value>{t[0] + k.select(keep, dots * k.exp(k.minimum(cumI - cumJ, zero)) * dtJ, zero)};
  })[0];
  k.store(a.ws, a.oDcb + ((slot * G + g) * Q + iR) * Q + jC, total);
}

void chooseDcbMeta(Specialization& s) { ssdDefaultMeta(s); }

}  // namespace

const KernelRegistration kBwdDcb(__FILE__, {kSsdBwdDcb.kernel, buildDcb, chooseDcbMeta, &kSsdBwdDcb});

}  // namespace ssmjit::kernels
