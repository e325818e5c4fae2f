#include "kernels_dsl/ssd/SsdStateOutputs.h"

#include "kernels_dsl/conv/ConvTiles.h"
#include "kernels_dsl/ssd/Ssd.h"

namespace ssmjit::kernels {
using namespace dsl;

Value ssdInitialState(KernelBuilder& k, const SsdValues& a, const SsdStateElems& e, Value i, Value reporter) {
  Value slotIn = k.ifElse(
      a.hasInit,
      [&] {
        return std::vector<Value>{
            checkedSlot(k, a.hasInitIdx, a.initIdx, a.sIidx, a.nInit, i, reporter, a.err, kErrSsdInitSlot)};
      },
      [&] { return std::vector<Value>{k.constInt(-1)}; })[0];
  return k.load(a.init, slotIn * a.sIs + e.h * a.sIh + e.p * a.sIp + e.n * a.sIn, e.m && (slotIn >= 0),
                k.constFloat(0));
}

void ssdCheckBlockCount(KernelBuilder& k, const SsdValues& a, Value i, Value len, Value reporter) {
  Value K = k.select(a.hasBlk, a.blkTokens, k.constInt(1));
  Value blocks = k.select(a.hasBlk, len / K, k.constInt(0));
  k.ifThen((blocks > a.kmax) && (reporter == 0),
           [&] { k.reportError(a.err, k.constInt(kErrSsdBlockCount), i, blocks, a.kmax); });
}

void ssdStoreBlockState(KernelBuilder& k, const SsdValues& a, const SsdStateElems& e, Value i, Value c, Value len,
                        int64_t Q, Value reporter, Value state) {
  Value K = k.select(a.hasBlk, a.blkTokens, k.constInt(1));
  Value done = (c + 1) * Q;  // tokens of the sequence through chunk c (if it is whole)
  Value blkK = done / K - 1;
  k.ifThen(a.hasBlk && (done <= len) && (done % K == 0) && (blkK < a.kmax), [&] {
    Value bs = k.load(a.blkIdx, i * a.sKi + blkK * a.sKk);
    Value bad = (bs != -1) && ((bs < 0) || (bs >= a.nBlk));
    k.ifThen(bad && (reporter == 0), [&] { k.reportError(a.err, k.constInt(kErrSsdBlockSlot), i, bs, a.nBlk); });
    k.store(a.blk, bs * a.sKs + e.h * a.sKh + e.p * a.sKp + e.n * a.sKn, state, e.m && !bad && (bs >= 0));
  });
}

void ssdStoreFinalState(KernelBuilder& k, const SsdValues& a, const SsdStateElems& e, Value i, Value reporter,
                        Value state) {
  k.ifThen(a.hasFinal, [&] {
    Value slotOut = checkedSlot(k, a.hasFinalIdx, a.finalIdx, a.sFidx, a.nFinal, i, reporter, a.err, kErrSsdFinalSlot);
    k.store(a.fin, slotOut * a.sFs + e.h * a.sFh + e.p * a.sFp + e.n * a.sFn, state, e.m && (slotOut >= 0));
  });
}

}  // namespace ssmjit::kernels
