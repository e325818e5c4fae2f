// The context-parallel state scan (CpStateScan.h): one program per BLOCK elements of one head's
// state walks the ranks' summaries in order, s = a s + b, in fp32, a the head's or each state's.
#include "kernels_dsl/parallel/CpStateScan.h"

#include "kernels_dsl/Dsl.h"
#include "kernels_dsl/MetaDefaults.h"
#include "kernels_dsl/Registry.h"

namespace ssmjit::kernels {
using namespace dsl;

namespace {

void build(KernelBuilder& k, const Specialization& spec) {
  const int64_t BLK = spec.get("meta:BLOCK");
  const bool perElement = spec.get("meta:decay_per_element") != 0;
  Value sum = k.arg("summaries"), out = k.arg("out");
  Value H = k.arg("H"), PN = k.arg("PN"), ranks = k.arg("ranks");
  Value sQ = k.arg("s_summaries_q"), sE = k.arg("s_summaries_e"), sO = k.arg("s_out_e");
  Value pid = k.programId(0), h = k.programId(1);
  Value e = pid * BLK + k.range(BLK), m = e < PN;
  Value zero = k.constFloat(0);
  Value bAt = perElement ? H * PN : H;  // where b starts in a row
  std::vector<Value> r =
      k.forLoop(k.constInt(0), ranks, k.constInt(1), {k.splat(zero, {BLK})}, [&](Value q, const std::vector<Value>& v) {
        Value a = perElement ? k.load(sum, q * sQ + (h * PN + e) * sE, m, zero) : k.load(sum, q * sQ + h * sE);
        Value b = k.load(sum, q * sQ + (bAt + h * PN + e) * sE, m, zero);
        return std::vector<Value>{a * v[0] + b};
      });
  k.store(out, (h * PN + e) * sO, r[0], m);
}

void chooseMeta(Specialization& s) {
  setDefaults(s, {{"meta:num_warps", 4}, {"meta:BLOCK", 1024}, {"meta:decay_per_element", 0}, {"meta:index_bits", 32}});
}

}  // namespace

const KernelRegistration kCpStateScanKernel(__FILE__, {kCpStateScan.kernel, build, chooseMeta, &kCpStateScan});

}  // namespace ssmjit::kernels
