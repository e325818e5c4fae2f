// selective_scan_ckpt_fold (ScanCheckpointFold.h): the entering state's share of each checkpoint
// of a span, so that one long sequence's checkpoint pass runs as many programs as dense rows do.
#include "kernels_dsl/scan/ScanCheckpointFold.h"

#include "kernels_dsl/Dsl.h"
#include "kernels_dsl/MetaDefaults.h"
#include "kernels_dsl/Registry.h"
#include "kernels_dsl/scan/CheckpointSpans.h"
#include "kernels_dsl/scan/ScanSequences.h"

namespace ssmjit::kernels {
using namespace dsl;

namespace {

void buildCkptFold(KernelBuilder& k, const Specialization& spec) {
  const int64_t BD = spec.get("meta:BLOCK_D"), BT = spec.get("meta:BLOCK_T"), N = spec.get("meta:dstate"),
                SPAN = spec.get("meta:span");
  Value A = k.arg("A"), ws = k.arg("ws"), cu = k.arg("cu");
  auto I = [&](const char* n) { return k.arg(n); };
  Value D = I("D"), L = I("L"), nseq = I("nseq"), cpr = I("ckpt_per_row"), spr = I("span_keys_per_row"),
        sAd = I("s_A_d"), sAn = I("s_A_n"), sCu = I("s_cu"), hasCu = I("has_cu");
  Value zero = k.constFloat(0), one = k.constInt(1);
  const int64_t groups = scanCkptFoldGroups(SPAN, BT);
  Value j = k.programId(1) / groups + 1, g = k.programId(1) % groups, i = k.programId(2);
  // Bad cu_seqlens were reported by the checkpoint launch.
  const ScanSequence seq = scanSequence(k, hasCu, cu, sCu, L, nseq, i);
  k.returnIf(seq.bad);
  Value len = seq.end - seq.start, t0 = j * SPAN;
  k.returnIf(t0 >= len);
  Value offsD = k.programId(0) * BD + k.range(BD), mD = offsD < D;
  std::vector<Value> A2;  // A * log2(e): exp(s A) = exp2(s A2)
  for (int64_t n = 0; n < N; ++n) A2.push_back(k.load(A, offsD * sAd + n * sAn, mD, zero) * kLog2e);
  const CheckpointSpans spans{I("aux_base"), k.select(hasCu, one, nseq) * spr, D, N};
  Value key0 = firstScanKey(k, seq, spr, SPAN, hasCu, i);
  std::vector<Value> h;  // entering span 1: span 0's end (from the sequence's initial state)
  for (int64_t n = 0; n < N; ++n) h.push_back(k.load(ws, spans.endAt(key0, n, offsD), mD, zero));
  h = k.forLoop(one, j, one, h, [&](Value jj, const std::vector<Value>& c) {
    Value sd = k.load(ws, spans.endAt(key0 + jj, N, offsD), mD, zero);
    std::vector<Value> next;
    for (int64_t n = 0; n < N; ++n)
      next.push_back(k.exp2(A2[n] * sd) * c[n] + k.load(ws, spans.endAt(key0 + jj, n, offsD), mD, zero));
    return next;
  });
  Value q0 = g * kScanCkptFoldTiles, DN = D * N;
  Value tiles = cdiv(k.minimum(k.constInt(SPAN), len - t0), k.constInt(BT));  // the span's
  Value key0c = firstScanKey(k, seq, cpr, BT, hasCu, i) + t0 / BT + q0;
  // Every tile's loads first, then the stores: the loads then wait once, not a tile at a time.
  std::vector<Value> sd, ckpt, masks;
  for (int64_t q = 0; q < kScanCkptFoldTiles; ++q) {
    Value key = key0c + q, m = mD && (q0 + q < tiles);
    masks.push_back(m);
    sd.push_back(k.load(ws, spans.tileDtAt(key, offsD), m, zero));
    for (int64_t n = 0; n < N; ++n) ckpt.push_back(k.load(ws, key * DN + n * D + offsD, m, zero));
  }
  for (int64_t q = 0; q < kScanCkptFoldTiles; ++q)
    for (int64_t n = 0; n < N; ++n)
      k.store(ws, (key0c + q) * DN + n * D + offsD, ckpt[q * N + n] + k.exp2(A2[n] * sd[q]) * h[n], masks[q]);
}

void chooseCkptFoldMeta(Specialization& s) {
  setDefaults(s, {{"meta:num_warps", 4}, {"meta:BLOCK_D", 128}, {"meta:index_bits", 32}});
}

}  // namespace

const KernelRegistration kCkptFold(__FILE__, {kScanCkptFold.kernel, buildCkptFold, chooseCkptFoldMeta, &kScanCkptFold});

}  // namespace ssmjit::kernels
