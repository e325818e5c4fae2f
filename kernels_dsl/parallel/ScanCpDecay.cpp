// The Mamba-1 scan's decay over a part (ScanCpDecay.h): one program a channel sums its dt' over
// the part in BLOCK_T tiles, then writes exp(A s) for its states in BLOCK_N tiles.
#include "kernels_dsl/parallel/ScanCpDecay.h"

#include "kernels_dsl/Dsl.h"
#include "kernels_dsl/MetaDefaults.h"
#include "kernels_dsl/Registry.h"

namespace ssmjit::kernels {
using namespace dsl;

namespace {

void build(KernelBuilder& k, const Specialization& spec) {
  const int64_t BT = spec.get("meta:BLOCK_T"), BN = spec.get("meta:BLOCK_N");
  Value delta = k.arg("delta"), dbias = k.arg("dbias"), A = k.arg("A"), out = k.arg("out");
  Value L = k.arg("L"), N = k.arg("N");
  Value sDd = k.arg("s_delta_d"), sDt = k.arg("s_delta_t"), sBd = k.arg("s_dbias_d"), sAd = k.arg("s_A_d"),
        sAn = k.arg("s_A_n"), sOd = k.arg("s_out_d"), sOn = k.arg("s_out_n");
  Value hasDbias = k.arg("has_dbias"), softplusOn = k.arg("softplus");
  Value d = k.programId(0), zero = k.constFloat(0);
  Value bias = k.ifElse(
      hasDbias, [&] { return std::vector<Value>{k.load(dbias, d * sBd)}; },
      [&] { return std::vector<Value>{zero}; })[0];
  std::vector<Value> acc =
      k.forLoop(k.constInt(0), L, k.constInt(BT), {k.splat(zero, {BT})}, [&](Value t0, const std::vector<Value>& v) {
        Value t = t0 + k.range(BT), m = t < L;
        Value dt = k.load(delta, d * sDd + t * sDt, m, zero) + bias;
        dt = k.ifElse(
            softplusOn, [&] { return std::vector<Value>{softplus(dt)}; }, [&] { return std::vector<Value>{dt}; })[0];
        return std::vector<Value>{v[0] + k.select(m, dt, zero)};
      });
  Value s = k.reduce(acc[0], 0, "sum");
  k.forLoop(k.constInt(0), N, k.constInt(BN), {}, [&](Value n0, const std::vector<Value>&) {
    Value n = n0 + k.range(BN), m = n < N;
    k.store(out, d * sOd + n * sOn, k.exp(k.load(A, d * sAd + n * sAn, m, zero) * s), m);
    return std::vector<Value>{};
  });
}

void chooseMeta(Specialization& s) {
  setDefaults(s, {{"meta:num_warps", 4}, {"meta:BLOCK_T", 512}, {"meta:BLOCK_N", 64}, {"meta:index_bits", 32}});
}

}  // namespace

const KernelRegistration kScanCpDecayKernel(__FILE__, {kScanCpDecay.kernel, build, chooseMeta, &kScanCpDecay});

}  // namespace ssmjit::kernels
