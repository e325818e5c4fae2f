// ssd_bmm (Ssd.h): CB[i, j] = C_i . B_j for a chunk's tokens, per group (shared by the group's
// heads), in 64 x 64 blocks on the tensor cores; blocks above the diagonal are skipped (the scan
// masks j > i). C rows [64, 32 states] come from memory into registers (16-bit data keeps its
// pairs: one exact term); B^T [32 states, 64 tokens] is staged through shared memory with masked
// loads (zeros past the chunk and the states), so the dot reads nothing outside its tensors.
#include "kernels_dsl/Dsl.h"
#include "kernels_dsl/Registry.h"
#include "kernels_dsl/ssd/Ssd.h"
#include "kernels_dsl/ssd/SsdChunks.h"

namespace ssmjit::kernels {
using namespace dsl;

namespace {

constexpr int64_t kStates = 32;  // states a step of the product

void buildBmm(KernelBuilder& k, const Specialization& spec) {
  const int64_t Q = spec.get("meta:chunk"), T = kSsdTokenBlock, LDs = T + 4;
  const SsdValues a = ssdValues(k);
  const auto [slot, g, bi, bj, ch] = ssdPairBlock(k, a, Q, {k.programId(0), k.programId(1), k.programId(2)});
  Value zero = k.constFloat(0), zeroI = k.constInt(0);
  Value smem = k.sharedBuffer(kStates * LDs);
  Value rI = k.expandDims(k.range(T), 1), cS = k.expandDims(k.range(kStates), 0);  // [T, 1], [1, 32]
  Value ti = bi * T + rI, tj = bj * T + rI;
  Value base = ch.row * a.sCb + g * a.sCg;
  Value baseB = ch.row * a.sBb + g * a.sBg;
  const int pc = dotPieces(spec, "C"), pb = dotPieces(spec, "B");
  Value acc =
      k.forLoop(zeroI, a.N, k.constInt(kStates), {k.splat(zero, {T, T})}, [&](Value n0, const std::vector<Value>& c) {
        Value n = n0 + cS;
        Value Bt = k.load(a.B, baseB + (ch.t0 + tj) * a.sBl + n * a.sBn, (tj < ch.n) && (n < a.N),
                          zero);  // [T tokens, 32 states]
        k.barrier();              // the previous step's dot has read the buffer
        k.store(smem, cS * LDs + rI, Bt);
        k.barrier();
        Value Ct = k.load(a.C, base + (ch.t0 + ti) * a.sCl + n * a.sCn, (ti < ch.n) && (n < a.N), zero);
        return std::vector<Value>{k.dot(Ct, smem, zeroI, k.constInt(LDs), k.constInt(1), c[0], pc, pb)};
      })[0];
  Value cj = k.expandDims(k.range(T), 0);
  k.store(a.ws, a.oCb + ((slot * (a.H / a.hpg) + g) * Q + ti) * Q + bj * T + cj, acc);
}

void chooseBmmMeta(Specialization& s) { ssdDefaultMeta(s); }

}  // namespace

const KernelRegistration kBmm(__FILE__, {kSsdBmm.kernel, buildBmm, chooseBmmMeta, &kSsdBmm});

}  // namespace ssmjit::kernels
