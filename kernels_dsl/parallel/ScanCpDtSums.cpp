// The sums of dt' over chunks of a context-parallel part's first sequence (ScanCpDtSums.h): one
// program a block of channels and a chunk, its tiles' dt' summed in turn.
#include "kernels_dsl/parallel/ScanCpDtSums.h"

#include "kernels_dsl/Dsl.h"
#include "kernels_dsl/MetaDefaults.h"
#include "kernels_dsl/Registry.h"
#include "kernels_dsl/parallel/IncomingShare.h"

namespace ssmjit::kernels {
using namespace dsl;

namespace {

void build(KernelBuilder& k, const Specialization& spec) {
  const int64_t BD = spec.get("meta:BLOCK_D"), BT = spec.get("meta:BLOCK_T");
  IncomingShare sh = incomingShare(k, BD);
  Value chunk = k.arg("chunk"), kc = k.programId(1);
  Value lo = kc * chunk, hi = k.minimum(lo + chunk, sh.len);
  Value mDE = k.expandDims(sh.mD, 1);
  const Value sum =
      k.forLoop(lo, hi, k.constInt(BT), {k.splat(k.constFloat(0), {BD})}, [&](Value t0, const std::vector<Value>& acc) {
        Value tE = k.expandDims(t0 + k.range(BT), 0);
        return std::vector<Value>{acc[0] + k.reduce(dtPrime(k, sh, tE, mDE && (tE < hi)), 1, "sum")};
      })[0];
  k.store(k.arg("sums"), kc * k.arg("s_sums_k") + sh.d * k.arg("s_sums_d"), sum, sh.mD);
}

void chooseMeta(Specialization& s) {
  setDefaults(s, {{"meta:num_warps", 4}, {"meta:BLOCK_D", 16}, {"meta:BLOCK_T", 128}, {"meta:index_bits", 32}});
}

}  // namespace

const KernelRegistration kScanCpDtSumsKernel(__FILE__, {kScanCpDtSums.kernel, build, chooseMeta, &kScanCpDtSums});

}  // namespace ssmjit::kernels
