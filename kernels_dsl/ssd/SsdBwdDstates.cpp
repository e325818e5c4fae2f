// ssd_bwd_dstates (SsdBackward.h): the gradient a chunk's own outputs give the state entering it,
//   local[p, n] = sum_i exp(cum_i) dy_i[p] C_i[n],
// per (slot, head, block of p x n), on the tensor cores as ssd_chunk_state: the scaled dy^T
// [BLOCK_P, 32 tokens] in registers (fp32: meta:pieces terms), C [32 tokens, BLOCK_N] staged through
// shared memory (zeros past the chunk's tokens). fp32 to the g plane.
#include <algorithm>

#include "compiler/IntMath.h"
#include "kernels_dsl/Dsl.h"
#include "kernels_dsl/Registry.h"
#include "kernels_dsl/ssd/SsdBackward.h"
#include "kernels_dsl/ssd/SsdChunks.h"

namespace ssmjit::kernels {
using namespace dsl;

namespace {

constexpr int64_t kTokens = 32;  // tokens a step of the product

void buildDstates(KernelBuilder& k, const Specialization& spec) {
  const int64_t Q = spec.get("meta:chunk"), BP = spec.get("meta:BLOCK_P"), BN = spec.get("meta:BLOCK_N");
  const int64_t LDs = BN + 4;
  const SsdBwdValues a = ssdBwdValues(k);
  Value slot = k.programId(0), h = k.programId(1), blk = k.programId(2);
  Value nBlocks = cdiv(a.N, k.constInt(BN));
  Value p0 = (blk / nBlocks) * BP, n0 = (blk % nBlocks) * BN;
  const SsdChunk ch = ssdChunkOfSlot(k, a, slot);
  k.returnIf(ch.n == 0);
  Value zero = k.constFloat(0), zeroI = k.constInt(0);
  Value g = h / a.hpg;
  Value smem = k.sharedBuffer(kTokens * LDs);
  Value tR = k.expandDims(k.range(kTokens), 1), tC = k.expandDims(k.range(kTokens), 0);  // [32, 1], [1, 32]
  Value p = p0 + k.expandDims(k.range(BP), 1), n = n0 + k.expandDims(k.range(BN), 0);    // [BP, 1], [1, BN]
  Value wsRow = (slot * a.H + h) * Q;
  const int pc = dotPieces(spec, "C"), pf = ssdBwdPieces(spec);
  Value acc = k.forLoop(
      zeroI, ch.n, k.constInt(kTokens), {k.splat(zero, {BP, BN})}, [&](Value j0, const std::vector<Value>& c) {
        Value t = j0 + tR, mt = t < ch.n;
        Value Ct = k.load(a.C, ch.row * a.sCb + (ch.t0 + t) * a.sCl + g * a.sCg + n * a.sCn, mt && (n < a.N),
                          zero);  // [32, BN]
        k.barrier();              // the previous step's dot has read the buffer
        k.store(smem, tR * LDs + k.expandDims(k.range(BN), 0), Ct);
        k.barrier();
        Value tx = j0 + tC, mx = (tx < ch.n) && (p < a.P);
        Value dy = ssdBwdDy(k, a, ch.row, ch.t0 + tx, h, p, mx);  // [BP, 32]
        Value w = k.exp(k.load(a.ws, a.oCum + wsRow + tx, tx < ch.n, zero));
        return std::vector<Value>{k.dot(dy * w, smem, zeroI, k.constInt(LDs), k.constInt(1), c[0], pf, pc)};
      })[0];
  k.store(a.ws, a.oG + ((slot * a.H + h) * a.P + p) * a.N + n, acc, (p < a.P) && (n < a.N));
}

void chooseDstatesMeta(Specialization& s) {
  // bf16 dout: a block takes up to 128 states, so that the scaled dy tile is loaded and split once
  // for all of them (3% off the backward at Mamba-2 heads: docs/performance.md). fp16 and fp32
  // dout keep 64 (unmeasured at 128).
  if (static_cast<DType>(s.get("dtype:dout")) == DType::BF16 && !s.find("meta:BLOCK_N"))
    s.set("meta:BLOCK_N", std::clamp<int64_t>(nextPow2(s.get("N")), 16, 128));
  ssdStateBlockMeta(s);
}

}  // namespace

const KernelRegistration kBwdDstates(__FILE__,
                                     {kSsdBwdDstates.kernel, buildDstates, chooseDstatesMeta, &kSsdBwdDstates});

}  // namespace ssmjit::kernels
