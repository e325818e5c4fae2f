// ssd_state_passing (Ssd.h): per (block of p x n, head, sequence), serially over the sequence's
// chunks from its initial state (slot by index, -1 or none: zeros), s = exp(cum_last) s + S_c,
// in fp32. Each chunk's workspace state (from zero) is read, then replaced in place by the state
// entering the chunk; the state after every block_state_tokens tokens goes to its block slot;
// the final state to its slot; exp(sum over the sequence of dt' A) to sequence_decay. Reports
// bad cu_seqlens entries and slots (the first block of head 0).
#include "kernels_dsl/Dsl.h"
#include "kernels_dsl/MetaDefaults.h"
#include "kernels_dsl/Registry.h"
#include "kernels_dsl/conv/ConvTiles.h"
#include "kernels_dsl/scan/ScanSequences.h"
#include "kernels_dsl/ssd/Ssd.h"
#include "kernels_dsl/ssd/SsdChunks.h"

namespace ssmjit::kernels {
using namespace dsl;

namespace {

void buildStatePassing(KernelBuilder& k, const Specialization& spec) {
  const int64_t Q = spec.get("meta:chunk"), BLK = spec.get("meta:BLOCK");
  const SsdValues a = ssdValues(k);
  Value pid = k.programId(0), h = k.programId(1), i = k.programId(2);
  Value zero = k.constFloat(0), zeroI = k.constInt(0), oneI = k.constInt(1);
  Value reporter = pid + h;  // 0 in exactly one program of the sequence
  const ScanSequence seq = scanSequence(k, a.hasCu, a.cu, a.sCu, a.L, a.nseq, i);
  k.ifThen(seq.bad && (reporter == 0),
           [&] { k.reportError(a.err, k.constInt(kErrSsdCuSeqlens), i, seq.start, seq.end); });
  k.returnIf(seq.bad);
  Value len = seq.end - seq.start;
  Value first = ssdFirstSlot(k, a, i, seq.row, seq.start, Q), nch = cdiv(len, k.constInt(Q));
  Value e = pid * BLK + k.range(BLK), PN = a.P * a.N, m = e < PN;
  Value p = e / a.N, n = e % a.N;
  Value slotIn = k.ifElse(
      a.hasInit,
      [&] {
        return std::vector<Value>{
            checkedSlot(k, a.hasInitIdx, a.initIdx, a.sIidx, a.nInit, i, reporter, a.err, kErrSsdInitSlot)};
      },
      [&] { return std::vector<Value>{k.constInt(-1)}; })[0];
  Value s0 = k.load(a.init, slotIn * a.sIs + h * a.sIh + p * a.sIp + n * a.sIn, m && (slotIn >= 0), zero);
  // Block states: sequence i's blocks k < min(len / K, kmax) (the count checked once).
  Value K = k.select(a.hasBlk, a.blkTokens, oneI);
  Value blocks = k.select(a.hasBlk, len / K, zeroI);
  k.ifThen((blocks > a.kmax) && (reporter == 0),
           [&] { k.reportError(a.err, k.constInt(kErrSsdBlockCount), i, blocks, a.kmax); });
  std::vector<Value> r = k.forLoop(zeroI, nch, oneI, {s0, zero}, [&](Value c, const std::vector<Value>& v) {
    Value slot = first + c;
    Value at = a.oSt + (slot * a.H + h) * PN + e;
    Value Sc = k.load(a.ws, at, m, zero);
    k.store(a.ws, at, v[0], m);
    Value la = k.load(a.ws, a.oCum + (slot * a.H + h) * Q + (Q - 1));
    Value s = k.exp(la) * v[0] + Sc;
    Value done = (c + 1) * Q;  // tokens of the sequence through this chunk (if it is whole)
    Value blkK = done / K - 1;
    k.ifThen(a.hasBlk && (done <= len) && (done % K == 0) && (blkK < a.kmax), [&] {
      Value bs = k.load(a.blkIdx, i * a.sKi + blkK * a.sKk);
      Value bad = (bs != -1) && ((bs < 0) || (bs >= a.nBlk));
      k.ifThen(bad && (reporter == 0), [&] { k.reportError(a.err, k.constInt(kErrSsdBlockSlot), i, bs, a.nBlk); });
      k.store(a.blk, bs * a.sKs + h * a.sKh + p * a.sKp + n * a.sKn, s, m && !bad && (bs >= 0));
    });
    return std::vector<Value>{s, v[1] + la};
  });
  k.ifThen(a.hasFinal, [&] {
    Value slotOut = checkedSlot(k, a.hasFinalIdx, a.finalIdx, a.sFidx, a.nFinal, i, reporter, a.err, kErrSsdFinalSlot);
    k.store(a.fin, slotOut * a.sFs + h * a.sFh + p * a.sFp + n * a.sFn, r[0], m && (slotOut >= 0));
  });
  k.ifThen(a.hasDecay && (pid == 0), [&] { k.store(a.decay, i * a.sYs + h * a.sYh, k.exp(r[1])); });
}

void chooseStatePassingMeta(Specialization& s) {
  ssdDefaultMeta(s);
  setDefault(s, "meta:BLOCK", 1024);
}

}  // namespace

const KernelRegistration kStatePassing(__FILE__, {kSsdStatePassing.kernel, buildStatePassing, chooseStatePassingMeta,
                                                  &kSsdStatePassing});

}  // namespace ssmjit::kernels
