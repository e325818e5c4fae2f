// What the SSD kernels share (Ssd.h): their arguments as DSL values, where a slot's chunk lies,
// dt' from raw dt, and the mma terms an operand's storage dtype takes. Builds DSL code only.
#pragma once
#include <cstdint>

#include "compiler/Specialization.h"
#include "kernels_dsl/Dsl.h"

namespace ssmjit::kernels {

// The arguments of the SSD kernels (Ssd.h), by the names the kernels use.
struct SsdValues {
  dsl::Value x, dt, A, B, C, Dv, z, dtb, out, init, fin, blk, decay, ws, chunks, cu, initIdx, finalIdx, blkIdx, err;
  dsl::Value H, P, N, hpg, L, nseq, searchSteps, nInit, nFinal, nBlk, blkTokens, kmax, oDt, oCum, oSt, oCb;
  dsl::Value dtMin, dtMax;
  dsl::Value hasCu, hasD, hasZ, hasDtb, softplusOn, hasClamp, hasInit, hasInitIdx, hasFinal, hasFinalIdx, hasBlk,
      hasDecay;
  // Strides: s<tensor><axis>.
  dsl::Value sXb, sXl, sXh, sXp, sDtb, sDtl, sDth, sAh, sBb, sBl, sBg, sBn, sCb, sCl, sCg, sCn, sDh, sDp, sZb, sZl, sZh,
      sZp, sDbh, sOb, sOl, sOh, sOp, sIs, sIh, sIp, sIn, sFs, sFh, sFp, sFn, sKs, sKh, sKp, sKn, sYs, sYh, sCu, sIidx,
      sFidx, sKi, sKk;
};
SsdValues ssdValues(dsl::KernelBuilder& k);

// A slot's chunk, from the table ssd_chunk_cumsum writes: tokens [t0, t0 + n) of row `row`
// (n 0: an empty slot), of sequence `seq`.
struct SsdChunk {
  dsl::Value seq, row, t0, n;
};
SsdChunk ssdChunkOfSlot(dsl::KernelBuilder& k, const SsdValues& a, dsl::Value slot);
SsdChunk ssdChunkAt(dsl::KernelBuilder& k, dsl::Value chunks, dsl::Value slot);

// The arguments of the backward's token kernels (SsdBackward.h), by the names the kernels use.
struct SsdBwdValues {
  dsl::Value x, dt, A, B, C, Dv, z, dtb, dout, dx, ddt, dA, dB, dC, dD, dz, ddtb, ws, chunks;
  dsl::Value H, P, N, hpg, L, slots, oDt, oCum, oSt, oCb, oY, oG, oTok, oDd, oPn, oSl, oDcb;
  dsl::Value dtMin, dtMax;
  dsl::Value hasD, dPerChannel, hasZ, hasDtb, softplusOn, hasClamp;
  dsl::Value sXb, sXl, sXh, sXp, sDtb, sDtl, sDth, sAh, sBb, sBl, sBg, sBn, sCb, sCl, sCg, sCn, sDh, sDp, sZb, sZl, sZh,
      sZp, sDbh, sOb, sOl, sOh, sOp, sDxb, sDxl, sDxh, sDxp, sDdtb, sDdtl, sDdth, sDAh, sDBb, sDBl, sDBg, sDBn, sDCb,
      sDCl, sDCg, sDCn, sDDh, sDDp, sDzb, sDzl, sDzh, sDzp, sDdbh;
};
SsdBwdValues ssdBwdValues(dsl::KernelBuilder& k);

// dy, the gradient of y before the gate: dout (* silu(z)), at the given offsets of
// (row, token, head, channel) (0 where `mask` is false).
dsl::Value ssdBwdDy(dsl::KernelBuilder& k, const SsdBwdValues& a, dsl::Value row, dsl::Value token, dsl::Value h,
                    dsl::Value p, dsl::Value mask);

// The first slot of sequence i (Ssd.h): row * cdiv(L, Q) + start / Q (+ i packed).
dsl::Value ssdFirstSlot(dsl::KernelBuilder& k, const SsdValues& a, dsl::Value i, dsl::Value row, dsl::Value start,
                        int64_t Q);

// dt' of raw dt (+ dt_bias of the head), softplus and the clamp, as the flags say.
dsl::Value ssdDtTransform(dsl::KernelBuilder& k, const SsdValues& a, dsl::Value dt, dsl::Value bias);

// bf16 terms that hold a value of the tensor's storage dtype exactly (1 bf16, 2 fp16, 3 fp32).
int ssdPieces(const Specialization& s, const char* tensor);

// Every SSD kernel's defaults: 4 warps, 32-bit offsets.
void ssdDefaultMeta(Specialization& s);

}  // namespace ssmjit::kernels
