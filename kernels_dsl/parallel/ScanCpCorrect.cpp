// The Mamba-1 scan's correction of a context-parallel part (ScanCpCorrect.h): one program a block
// of channels and a chunk of the first sequence walks its chunk (IncomingShare.h) from the sum of
// dt' before it and adds the incoming state's share of y, state by state, to out.
#include "kernels_dsl/parallel/ScanCpCorrect.h"

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
  Value A = I("A"), C = I("C"), z = I("z"), out = I("out"), incoming = I("incoming");
  Value N = I("N"), group = I("group");
  Value sAd = I("s_A_d"), sAn = I("s_A_n"), sCg = I("s_C_g"), sCn = I("s_C_n"), sCt = I("s_C_t"), sCd = I("s_C_d"),
        sZd = I("s_z_d"), sZt = I("s_z_t"), sOd = I("s_out_d"), sOt = I("s_out_t"), sId = I("s_incoming_d"),
        sIn = I("s_incoming_n");
  Value hasZ = I("has_z");
  Value zero = k.constFloat(0), one = k.constFloat(1);
  IncomingShare sh = incomingShare(k, BD);
  Value d = sh.d, mD = sh.mD;
  Value dE = k.expandDims(d, 1), mDE = k.expandDims(mD, 1), gE = k.expandDims(d / group, 1);  // [BD, 1]
  // Each channel's largest A, and whether the incoming state is finite (0 times inf is NaN).
  Value negInf = k.constFloat(-INFINITY), posInf = k.constFloat(INFINITY);
  const std::vector<Value> perChannel = k.forLoop(
      k.constInt(0), N, k.constInt(1), {k.splat(negInf, {BD}), k.splat(zero, {BD})},
      [&](Value n, const std::vector<Value>& acc) {
        Value a = k.load(A, d * sAd + n * sAn, mD, zero) * kLog2e, s = k.load(incoming, d * sId + n * sIn, mD, zero);
        Value finite = (s < posInf) && (s > negInf);
        return std::vector<Value>{k.maximum(acc[0], a), k.maximum(acc[1], k.select(finite, zero, one))};
      });
  setDecay(k, sh, perChannel[0], k.reduce(perChannel[1], 0, "max") == zero);
  // The program's chunk of the sequence, from the sum of dt' over the chunks before it.
  Value chunk = I("chunk"), kc = k.programId(1), sums = I("sums"), sSk = I("s_sums_k"), sSd = I("s_sums_d");
  Value lo = kc * chunk, hi = k.minimum(lo + chunk, sh.len);
  const Value start =
      k.forLoop(k.constInt(0), kc, k.constInt(1), {k.splat(zero, {BD})}, [&](Value j, const std::vector<Value>& acc) {
        return std::vector<Value>{acc[0] + k.load(sums, j * sSk + d * sSd, mD, zero)};
      })[0];
  const Value cum = walkShares(k, sh, BT, lo, hi, {start}, [&](Value t0, const std::vector<Value>& carry) {
    Value tE = k.expandDims(t0 + k.range(BT), 0);  // [1, BT]
    Value m = mDE && (tE < hi);                    // [BD, BT]
    const std::vector<Value> scanned = cumulativeDt(k, sh, tE, m, carry[0]);
    Value cum = scanned[0];
    // BLOCK_N states at a time, unrolled, so that their loads are in flight together.
    Value y = k.forLoop(k.constInt(0), N, k.constInt(BN), {k.splat(zero, {BD, BT})},
                        [&](Value n0, const std::vector<Value>& acc) {
                          Value sum = acc[0];
                          for (int64_t j = 0; j < BN; ++j) {
                            Value n = n0 + j, mn = n < N;
                            Value a = k.expandDims(k.load(A, d * sAd + n * sAn, mD && mn, zero) * kLog2e, 1);
                            Value s = k.expandDims(k.load(incoming, d * sId + n * sIn, mD && mn, zero), 1);
                            Value c = k.load(C, gE * sCg + n * sCn + tE * sCt + dE * sCd, m && mn, zero);
                            sum = sum + c * k.exp2(a * cum) * s;
                          }
                          return std::vector<Value>{sum};
                        })[0];
    Value gate = k.ifElse(
        hasZ, [&] { return std::vector<Value>{silu(k.load(z, dE * sZd + tE * sZt, m, zero))}; },
        [&] {
          return std::vector<Value>{k.splat(one, {BD, BT})};
        })[0];
    Value at = dE * sOd + tE * sOt;
    k.store(out, at, k.load(out, at, m, zero) + y * gate, m);
    return std::vector<Value>{scanned[1]};
  })[0];
  // The end state (slot fidx[0], or 0; -1 or out of range: none), by the last chunk's program.
  // Past the shares' underflow `cum` stopped growing, but exp2(A2 cum) is 0 either way.
  Value slot = firstFinalSlot(k);
  k.ifThen(I("has_final") && (slot >= 0) && (slot < I("S")) && (lo < sh.len) && (hi == sh.len), [&] {
    Value final = I("final"), sFs = I("s_final_s"), sFd = I("s_final_d"), sFn = I("s_final_n");
    k.forLoop(k.constInt(0), N, k.constInt(1), {}, [&](Value n, const std::vector<Value>&) {
      Value a = k.load(A, d * sAd + n * sAn, mD, zero) * kLog2e, s = k.load(incoming, d * sId + n * sIn, mD, zero);
      Value at = slot * sFs + d * sFd + n * sFn;
      k.store(final, at, k.load(final, at, mD, zero) + k.exp2(a * cum) * s, mD);
      return std::vector<Value>{};
    });
  });
}

void chooseMeta(Specialization& s) {
  setDefaults(s, {{"meta:num_warps", 4},
                  {"meta:BLOCK_D", 16},
                  {"meta:BLOCK_N", 2},
                  {"meta:BLOCK_T", 64},
                  {"meta:index_bits", 32}});
}

}  // namespace

const KernelRegistration kScanCpCorrectKernel(__FILE__, {kScanCpCorrect.kernel, build, chooseMeta, &kScanCpCorrect});

}  // namespace ssmjit::kernels
