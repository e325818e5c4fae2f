// ssd_chunk_cumsum (Ssd.h): the first SSD kernel. Per slot, finds its chunk (packed rows: the
// sequence by a binary search over cu_seqlens), writes the chunk table, then for a block of
// heads dt' (0 past the chunk's tokens) and its inclusive cumsum of dt' A along the chunk
// (the associative scan), in fp32.
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

// Slot k's chunk: {sequence, row, first token, tokens (0: empty)}.
SsdChunk findChunk(KernelBuilder& k, const SsdValues& a, Value slot, int64_t Q) {
  Value zeroI = k.constInt(0), oneI = k.constInt(1);
  std::vector<Value> r = k.ifElse(
      a.hasCu,
      [&] {
        // The largest i with firstSlot(i) = i + cu[i] / Q <= slot (increasing in i).
        std::vector<Value> lh =
            k.forLoop(zeroI, a.searchSteps, oneI, {zeroI, a.nseq}, [&](Value, const std::vector<Value>& c) {
              Value mid = (c[0] + c[1]) / 2;
              Value f = mid + k.load(a.cu, mid * a.sCu) / Q;
              Value up = (c[1] - c[0] > 1) && (f <= slot);
              Value down = (c[1] - c[0] > 1) && (f > slot);
              return std::vector<Value>{k.select(up, mid, c[0]), k.select(down, mid, c[1])};
            });
        Value i = lh[0];
        Value start = k.load(a.cu, i * a.sCu), end = k.load(a.cu, (i + 1) * a.sCu);
        Value c = slot - (i + start / Q);
        Value ok = !badCuSeqlensEntry(i, start, end, a.nseq, a.L) && (c >= 0) && (c * Q < end - start);
        Value t0 = start + c * Q;
        return std::vector<Value>{i, zeroI, t0, k.select(ok, k.minimum(k.constInt(Q), end - t0), zeroI)};
      },
      [&] {
        Value cpr = cdiv(a.L, k.constInt(Q));
        Value i = slot / cpr, t0 = (slot % cpr) * Q;
        return std::vector<Value>{i, i, t0, k.minimum(k.constInt(Q), a.L - t0)};
      });
  return {r[0], r[1], r[2], r[3]};
}

void buildChunkCumsum(KernelBuilder& k, const Specialization& spec) {
  const int64_t Q = spec.get("meta:chunk"), BH = spec.get("meta:BLOCK_H");
  const SsdValues a = ssdValues(k);
  Value slot = k.programId(0), pidH = k.programId(1);
  const SsdChunk ch = findChunk(k, a, slot, Q);
  // Slot i checks sequence i's cu_seqlens entries (a packed row has more slots than sequences),
  // so that a call whose chunk_state passes the states itself reports them too.
  k.ifThen(a.hasCu && (pidH == 0) && (slot < a.nseq), [&] {
    const ScanSequence seq = scanSequence(k, a.hasCu, a.cu, a.sCu, a.L, a.nseq, slot);
    k.ifThen(seq.bad, [&] { k.reportError(a.err, k.constInt(kErrSsdCuSeqlens), slot, seq.start, seq.end); });
  });
  k.ifThen(pidH == 0, [&] {
    Value at = slot * 4;
    k.store(a.chunks, at, ch.seq);
    k.store(a.chunks, at + 1, ch.row);
    k.store(a.chunks, at + 2, ch.t0);
    k.store(a.chunks, at + 3, ch.n);
  });
  Value zero = k.constFloat(0);
  Value h = k.expandDims(pidH * BH + k.range(BH), 1);  // [BH, 1]
  Value t = k.expandDims(k.range(Q), 0);               // [1, Q]
  Value mH = h < a.H, m = mH && (t < ch.n);
  Value dt = k.load(a.dt, ch.row * a.sDtb + (ch.t0 + t) * a.sDtl + h * a.sDth, m, zero);
  Value bias = k.ifElse(
      a.hasDtb, [&] { return std::vector<Value>{k.load(a.dtb, h * a.sDbh, mH, zero)}; },
      [&] {
        return std::vector<Value>{k.splat(zero, {BH, 1})};
      })[0];
  Value dtp = k.select(m, ssdDtTransform(k, a, dt, bias), zero);
  Value dA = dtp * k.load(a.A, h * a.sAh, mH, zero);
  Value cum = k.cumulativeSum(dA, 1)[0];
  Value at = (slot * a.H + h) * Q + t;
  Value mStore = k.broadcastTo(mH, {BH, Q});
  k.store(a.ws, a.oDt + at, dtp, mStore);
  k.store(a.ws, a.oCum + at, cum, mStore);
}

void chooseChunkCumsumMeta(Specialization& s) {
  ssdDefaultMeta(s);
  setDefault(s, "meta:BLOCK_H", 4);
}

}  // namespace

const KernelRegistration kChunkCumsum(__FILE__, {kSsdChunkCumsum.kernel, buildChunkCumsum, chooseChunkCumsumMeta,
                                                 &kSsdChunkCumsum});

}  // namespace ssmjit::kernels
