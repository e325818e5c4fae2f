// The gradient of a context-parallel scan part's incoming state, the chunks' sums joined
// (ScanCpStateGrad.h): a [BLOCK_D, BLOCK_N] tile of (channel, state) sums its chunks in order and
// adds the final state's gradient times the sequence's decay.
#include "kernels_dsl/Dsl.h"
#include "kernels_dsl/MetaDefaults.h"
#include "kernels_dsl/Registry.h"
#include "kernels_dsl/parallel/IncomingShare.h"
#include "kernels_dsl/parallel/ScanCpStateGrad.h"

namespace ssmjit::kernels {
using namespace dsl;

namespace {

void build(KernelBuilder& k, const Specialization& spec) {
  const int64_t BD = spec.get("meta:BLOCK_D"), BN = spec.get("meta:BLOCK_N");
  auto I = [&](const char* n) { return k.arg(n); };
  Value A = I("A"), sums = I("sums"), part = I("part"), dfinal = I("dfinal"), out = I("out");
  Value D = I("D"), N = I("N"), K = I("K"), S = I("S");
  Value zero = k.constFloat(0);
  Value d = k.expandDims(k.programId(0) * BD + k.range(BD), 1), n = k.expandDims(k.programId(1) * BN + k.range(BN), 0);
  Value m = (d < D) && (n < N);  // [BD, BN]
  const std::vector<Value> acc =
      k.forLoop(k.constInt(0), K, k.constInt(1), {k.splat(zero, {BD, BN}), k.splat(zero, {BD, 1})},
                [&](Value i, const std::vector<Value>& a) {
                  return std::vector<Value>{
                      a[0] + k.load(part, i * I("s_part_k") + d * I("s_part_d") + n * I("s_part_n"), m, zero),
                      a[1] + k.load(sums, i * I("s_sums_k") + d * I("s_sums_d"), d < D, zero)};
                });
  // The final state's gradient (slot fidx[0], or 0; -1 or out of range: none).
  Value slot = firstFinalSlot(k);
  Value withFinal = I("has_dfinal") && (slot >= 0) && (slot < S);
  Value fin = k.load(dfinal, slot * I("s_dfinal_s") + d * I("s_dfinal_d") + n * I("s_dfinal_n"), m && withFinal, zero);
  Value a2 = k.load(A, d * I("s_A_d") + n * I("s_A_n"), m, zero) * kLog2e;
  k.store(out, d * I("s_out_d") + n * I("s_out_n"), acc[0] + fin * k.exp2(a2 * acc[1]), m);
}

void chooseMeta(Specialization& s) {
  setDefaults(s, {{"meta:num_warps", 4}, {"meta:BLOCK_D", 32}, {"meta:BLOCK_N", 16}, {"meta:index_bits", 32}});
}

}  // namespace

const KernelRegistration kScanCpStateGradSumKernel(__FILE__, {kScanCpStateGradSum.kernel, build, chooseMeta,
                                                              &kScanCpStateGradSum});

}  // namespace ssmjit::kernels
