// Token embedding: one program copies BLOCK_D channels of one token's row of the table. A copy,
// so the heuristic only sizes the tile: 8 channels a thread, in two runs of 4 (vector accesses
// where the strides allow). See Embedding.h for the argument contract.
#include "kernels_dsl/embed/Embedding.h"

#include "kernels_dsl/Dsl.h"
#include "kernels_dsl/MetaDefaults.h"
#include "kernels_dsl/Registry.h"

namespace ssmjit::kernels {
using namespace dsl;

namespace {

void build(KernelBuilder& k, const Specialization& spec) {
  const int64_t BD = spec.get("meta:BLOCK_D");
  Value ids = k.arg("ids"), table = k.arg("table"), out = k.arg("out"), err = k.arg("err");
  Value D = k.arg("D"), V = k.arg("V");
  Value sIds = k.arg("s_ids_t"), sTv = k.arg("s_table_v"), sTd = k.arg("s_table_d"), sOt = k.arg("s_out_t"),
        sOd = k.arg("s_out_d");

  Value t = k.programId(0), pidD = k.programId(1);
  Value id = k.load(ids, t * sIds);
  Value bad = (id < 0) || (id >= V);
  k.ifThen(bad && (pidD == 0), [&] { k.reportError(err, k.constInt(kErrEmbedId), t, id, V); });

  Value offsD = pidD * BD + k.range(BD), maskD = offsD < D;
  Value zero = k.constFloat(0);
  Value row = k.ifElse(
      bad, [&] { return std::vector<Value>{k.splat(zero, {BD})}; },
      [&] { return std::vector<Value>{k.load(table, id * sTv + offsD * sTd, maskD, zero)}; })[0];
  k.store(out, t * sOt + offsD * sOd, row, maskD);
}

void chooseMeta(Specialization& s) {
  setDefaults(s, {{"meta:num_warps", 4}, {"meta:BLOCK_D", 1024}, {"meta:index_bits", 32}});
}

}  // namespace

const KernelRegistration kEmbeddingKernel(__FILE__, {kEmbedding.kernel, build, chooseMeta, &kEmbedding});

}  // namespace ssmjit::kernels
