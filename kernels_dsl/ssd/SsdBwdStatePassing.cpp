// ssd_bwd_state_passing (SsdBackward.h): per (block of p x n, head, sequence), the sequence's
// chunks in reverse from d(final state) (slot by index; -1 or none: zeros), in fp32:
//   g = local_c + exp(cum_last,c) g,
// where the g plane's local_c (ssd_bwd_dstates) is replaced in place by the g that entered the
// step (the gradient of chunk c's own state), and the pass plane takes this block's share of
// exp(cum_last,c) S_in,c . g (the gradient of the chunk's total decay). The last g goes to
// dinitial_states' slot. Reports bad d(final state) slots (the first block of head 0).
// Bound by memory, as the forward's pass: meta:PREFETCH D (1..8, default 4) chunks are read ahead
// of the one combined; the sums run in the same order for every D.
#include <vector>

#include "kernels_dsl/Dsl.h"
#include "kernels_dsl/Registry.h"
#include "kernels_dsl/conv/ConvTiles.h"
#include "kernels_dsl/scan/ScanSequences.h"
#include "kernels_dsl/ssd/Ssd.h"
#include "kernels_dsl/ssd/SsdBackward.h"
#include "kernels_dsl/ssd/SsdChunks.h"

namespace ssmjit::kernels {
using namespace dsl;

namespace {

void buildBwdStatePassing(KernelBuilder& k, const Specialization& spec) {
  const int64_t Q = spec.get("meta:chunk"), BLK = kSsdBwdPassBlock, D = spec.get("meta:PREFETCH");
  auto v = [&](const char* n) { return k.arg(n); };
  Value H = v("H"), P = v("P"), N = v("N"), L = v("L"), nseq = v("nseq"), ws = v("ws"), err = v("err");
  Value oCum = v("o_cum"), oSt = v("o_st"), oG = v("o_g"), oPn = v("o_pn"), hasCu = v("has_cu");
  Value pid = k.programId(0), h = k.programId(1), i = k.programId(2);
  Value zero = k.constFloat(0), zeroI = k.constInt(0), oneI = k.constInt(1);
  Value reporter = pid + h;  // 0 in exactly one program of the sequence
  const ScanSequence seq = scanSequence(k, hasCu, v("cu"), v("s_cu"), L, nseq, i);
  k.returnIf(seq.bad);  // the forward's chunk_cumsum reported it
  Value len = seq.end - seq.start;
  Value first = seq.row * cdiv(L, k.constInt(Q)) + seq.start / Q + k.select(hasCu, i, zeroI);
  Value nch = cdiv(len, k.constInt(Q));
  Value PN = P * N, nPn = cdiv(PN, k.constInt(BLK));
  Value e = pid * BLK + k.range(BLK), m = e < PN;
  Value p = e / N, n = e % N;
  Value slotOut = k.ifElse(
      v("has_dfinal"),
      [&] {
        return std::vector<Value>{checkedSlot(k, v("has_final_idx"), v("final_idx"), v("s_final_idx"),
                                              v("nslots_final"), i, reporter, err, kErrSsdFinalSlot)};
      },
      [&] { return std::vector<Value>{k.constInt(-1)}; })[0];
  Value g0 = k.load(v("dfinal"),
                    slotOut * v("s_dfinal_slot") + h * v("s_dfinal_h") + p * v("s_dfinal_p") + n * v("s_dfinal_n"),
                    m && (slotOut >= 0), zero);
  // Reverse step r takes chunk nch - 1 - r: its local gradient, entering state and decay, read D
  // steps ahead (carried as {g, then D of (local, S_in, decay)}), so D + 1 chunks' reads are in
  // flight while one combines. Step r stores the g that entered it over the local it read.
  auto slotOf = [&](Value r) { return first + (nch - 1 - r); };
  auto at = [&](Value r) { return (slotOf(r) * H + h) * PN + e; };
  auto decayOf = [&](Value r) { return k.exp(k.load(ws, oCum + (slotOf(r) * H + h) * Q + (Q - 1))); };
  std::vector<Value> carry{g0};
  for (int64_t d = 0; d < D; ++d) {
    Value rd = k.constInt(d), have = nch > rd;
    carry.push_back(k.load(ws, oG + at(rd), m && have, zero));
    carry.push_back(k.load(ws, oSt + at(rd), m && have, zero));
    carry.push_back(k.ifElse(
        have, [&] { return std::vector<Value>{decayOf(rd)}; }, [&] { return std::vector<Value>{zero}; })[0]);
  }
  Value g = k.forLoop(zeroI, nch, oneI, carry, [&](Value r, const std::vector<Value>& c) {
    Value rD = r + D, ahead = rD < nch;
    Value local = k.load(ws, oG + at(rD), m && ahead, zero), sIn = k.load(ws, oSt + at(rD), m && ahead, zero);
    Value decay = decayOf(k.minimum(rD, nch - 1));
    k.store(ws, oG + at(r), c[0], m);
    k.store(ws, oPn + (slotOf(r) * H + h) * nPn + pid, k.reduce(c[3] * c[2] * c[0], 0, "sum"));
    std::vector<Value> next{c[1] + c[3] * c[0]};
    next.insert(next.end(), c.begin() + 4, c.end());
    next.insert(next.end(), {local, sIn, decay});
    return next;
  })[0];
  k.ifThen(v("has_dinit"), [&] {
    Value slotIn = checkedSlot(k, v("has_init_idx"), v("init_idx"), v("s_init_idx"), v("nslots_init"), i, reporter, err,
                               kErrSsdInitSlot);
    k.store(v("dinit"), slotIn * v("s_dinit_slot") + h * v("s_dinit_h") + p * v("s_dinit_p") + n * v("s_dinit_n"), g,
            m && (slotIn >= 0));
  });
}

void chooseBwdStatePassingMeta(Specialization& s) {
  ssdDefaultMeta(s);
  ssdPrefetchMeta(s, 1);
}

}  // namespace

const KernelRegistration kBwdStatePassing(__FILE__, {kSsdBwdStatePassing.kernel, buildBwdStatePassing,
                                                     chooseBwdStatePassingMeta, &kSsdBwdStatePassing});

}  // namespace ssmjit::kernels
