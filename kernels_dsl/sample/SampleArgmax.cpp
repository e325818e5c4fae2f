// Greedy sampling: the arg max of each row in one pass. Each thread keeps, per position of the
// tile, the largest value it has seen there and its index (strictly larger only, so the earliest
// of equal values: tiles come in index order); the row's maximum and its lowest index are reduced
// once, after the loop. NaN is never taken (x == x fails); a row of NaN only gives 0. See
// Sample.h for the argument contract.
#include <cmath>

#include "kernels_dsl/Dsl.h"
#include "kernels_dsl/MetaDefaults.h"
#include "kernels_dsl/Registry.h"
#include "kernels_dsl/sample/Sample.h"
#include "kernels_dsl/sample/SampleRows.h"

namespace ssmjit::kernels {
using namespace dsl;

namespace {

void build(KernelBuilder& k, const Specialization& spec) {
  const int64_t BV = spec.get("meta:BLOCK_V");
  Value logits = k.arg("logits"), ids = k.arg("ids");
  Value V = k.arg("V"), sB = k.arg("s_logits_b"), sV = k.arg("s_logits_v"), sIds = k.arg("s_ids_b");
  Value b = k.programId(0);
  k.returnIf(sampleRowKey(k, b) == -1);

  Value r = k.range(BV), none = k.splat(V, {BV});  // index V: nothing taken at this position yet
  Value negInf = k.constFloat(-INFINITY);
  std::vector<Value> best = k.forLoop(
      k.constInt(0), V, k.constInt(BV), {k.splat(negInf, {BV}), none}, [&](Value v0, const std::vector<Value>& c) {
        Value offs = v0 + r;
        Value x = k.load(logits, b * sB + offs * sV, offs < V, negInf);
        Value take = (offs < V) && (x == x) && ((x > c[0]) || (c[1] == V));
        return std::vector<Value>{k.select(take, x, c[0]), k.select(take, offs, c[1])};
      });
  Value seen = best[1] < V;
  Value m = k.reduce(k.select(seen, best[0], negInf), 0, "max");
  Value at = k.reduce(k.select(seen && (best[0] == m), best[1], none), 0, "min");
  k.store(ids, b * sIds, k.select(at < V, at, k.constInt(0)));
}

// 16 warps, 16 values a thread: one program has a row to itself on an SM (a decode batch is
// about as many rows as SMs), so it needs many loads in flight; fewer warps leave the SM waiting.
void chooseMeta(Specialization& s) {
  setDefaults(s, {{"meta:num_warps", 16}, {"meta:BLOCK_V", 8192}, {"meta:index_bits", 32}});
}

}  // namespace

const KernelRegistration kArgmax(__FILE__, {kSampleArgmax.kernel, build, chooseMeta, &kSampleArgmax});

}  // namespace ssmjit::kernels
