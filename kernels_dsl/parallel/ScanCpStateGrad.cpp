// The gradient of a context-parallel scan part's incoming state, the sums over chunks
// (ScanCpStateGrad.h): one program a block of channels, of states and a chunk walks its chunk
// of the first sequence (IncomingShare.h), summing each state's weighted gate dout C.
#include "kernels_dsl/parallel/ScanCpStateGrad.h"

#include <cmath>

#include "kernels_dsl/Dsl.h"
#include "kernels_dsl/MetaDefaults.h"
#include "kernels_dsl/Registry.h"
#include "kernels_dsl/parallel/IncomingShare.h"

namespace ssmjit::kernels {
using namespace dsl;

namespace {

void build(KernelBuilder& k, const Specialization& spec) {
  const int64_t BD = spec.get("meta:BLOCK_D"), BT = spec.get("meta:BLOCK_T"), BN = spec.get("meta:BLOCK_N");
  auto I = [&](const char* n) { return k.arg(n); };
  Value A = I("A"), C = I("C"), z = I("z"), dout = I("dout"), sums = I("sums"), part = I("part");
  Value N = I("N"), group = I("group"), chunk = I("chunk");
  Value sAd = I("s_A_d"), sAn = I("s_A_n"), sCg = I("s_C_g"), sCn = I("s_C_n"), sCt = I("s_C_t"), sCd = I("s_C_d"),
        sZd = I("s_z_d"), sZt = I("s_z_t"), sGd = I("s_dout_d"), sGt = I("s_dout_t"), sSk = I("s_sums_k"),
        sSd = I("s_sums_d"), sPk = I("s_part_k"), sPd = I("s_part_d"), sPn = I("s_part_n");
  Value hasZ = I("has_z");
  Value zero = k.constFloat(0), negInf = k.constFloat(-INFINITY);
  IncomingShare sh = incomingShare(k, BD);
  Value d = sh.d, mD = sh.mD;
  Value dE = k.expandDims(d, 1), mDE = k.expandDims(mD, 1), gE = k.expandDims(d / group, 1);  // [BD, 1]
  const Value n0 = k.programId(1) * BN, kc = k.programId(2);
  // The program's states n0 + j: each one's A2, and whether it exists.
  std::vector<Value> a(BN), mN(BN);
  Value slowest = k.splat(negInf, {BD});
  for (int64_t j = 0; j < BN; ++j) {
    Value n = n0 + j;
    mN[j] = n < N;
    a[j] = k.load(A, d * sAd + n * sAn, mD && mN[j], zero) * kLog2e;
    slowest = k.select(mN[j], k.maximum(slowest, a[j]), slowest);
  }
  setDecay(k, sh, slowest, k.constBool(true));
  // The program's chunk, from the sum of dt' over the chunks before it.
  Value lo = kc * chunk, hi = k.minimum(lo + chunk, sh.len);
  std::vector<Value> inits(BN + 1, k.splat(zero, {BD}));
  inits[0] =
      k.forLoop(k.constInt(0), kc, k.constInt(1), {k.splat(zero, {BD})}, [&](Value i, const std::vector<Value>& acc) {
        return std::vector<Value>{acc[0] + k.load(sums, i * sSk + d * sSd, mD, zero)};
      })[0];
  const std::vector<Value> total = walkShares(k, sh, BT, lo, hi, inits, [&](Value t0, const std::vector<Value>& carry) {
    Value tE = k.expandDims(t0 + k.range(BT), 0);  // [1, BT]
    Value m = mDE && (tE < hi);                    // [BD, BT]
    const std::vector<Value> scanned = cumulativeDt(k, sh, tE, m, carry[0]);
    Value g = k.load(dout, dE * sGd + tE * sGt, m, zero);
    g = k.ifElse(
        hasZ, [&] { return std::vector<Value>{g * silu(k.load(z, dE * sZd + tE * sZt, m, zero))}; },
        [&] { return std::vector<Value>{g}; })[0];
    std::vector<Value> next = {scanned[1]};
    for (int64_t j = 0; j < BN; ++j) {
      Value c = k.load(C, gE * sCg + (n0 + j) * sCn + tE * sCt + dE * sCd, m && mN[j], zero);
      next.push_back(carry[j + 1] + k.reduce(g * c * k.exp2(k.expandDims(a[j], 1) * scanned[0]), 1, "sum"));
    }
    return next;
  });
  for (int64_t j = 0; j < BN; ++j) k.store(part, kc * sPk + d * sPd + (n0 + j) * sPn, total[j + 1], mD && mN[j]);
}

void chooseMeta(Specialization& s) {
  setDefaults(s, {{"meta:num_warps", 4}, {"meta:BLOCK_D", 16}, {"meta:BLOCK_N", 16}, {"meta:BLOCK_T", 64},
                  {"meta:index_bits", 32}});
}

}  // namespace

const KernelRegistration kScanCpStateGradKernel(__FILE__,
                                                {kScanCpStateGrad.kernel, build, chooseMeta, &kScanCpStateGrad});

}  // namespace ssmjit::kernels
