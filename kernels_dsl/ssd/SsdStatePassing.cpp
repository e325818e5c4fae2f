// ssd_state_passing (Ssd.h): per (block of p x n, head, sequence), serially over the sequence's
// chunks from its initial state (slot by index, -1 or none: zeros), s = exp(cum_last) s + S_c,
// in fp32. Each chunk's workspace state (from zero) is read, then replaced in place by the state
// entering the chunk; the state after every block_state_tokens tokens goes to its block slot;
// the final state to its slot; exp(sum over the sequence of dt' A) to sequence_decay. Reports
// bad cu_seqlens entries and slots (the first block of head 0).
// The pass is bound by memory: each thread owns runs of 4 state elements (16-byte accesses) and,
// with meta:PREFETCH D > 0, reads chunk c + D's state and decay before it combines chunk c, so
// D + 1 chunks' reads are in flight (D chunks' states held in registers). The entering state of
// chunk c + 1 is stored in the iteration that computes it, after that chunk's own state was read
// (same thread, same elements). The sums run in the same order for every D.
// meta:keep_states 1 (absent: 0): no entering state is stored, so the chunks' states from zero stay
// in the workspace for a later pass from another initial state (context parallelism: the final
// states and decays first, then the same call resumed; SsdSpec.h).
#include "kernels_dsl/Dsl.h"
#include "kernels_dsl/MetaDefaults.h"
#include "kernels_dsl/Registry.h"
#include "kernels_dsl/conv/ConvTiles.h"
#include "kernels_dsl/scan/ScanSequences.h"
#include "kernels_dsl/ssd/Ssd.h"
#include "kernels_dsl/ssd/SsdChunks.h"
#include "kernels_dsl/ssd/SsdStateOutputs.h"

namespace ssmjit::kernels {
using namespace dsl;

namespace {

void buildStatePassing(KernelBuilder& k, const Specialization& spec) {
  const int64_t Q = spec.get("meta:chunk"), BLK = spec.get("meta:BLOCK");
  const int64_t D = spec.get("meta:PREFETCH");
  const bool keep = spec.get("meta:keep_states", 0) != 0;
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
  const SsdStateElems el{h, p, n, m};
  Value s0 = ssdInitialState(k, a, el, i, reporter);
  ssdCheckBlockCount(k, a, i, len, reporter);
  auto stateAt = [&](Value c) { return a.oSt + ((first + c) * a.H + h) * PN + e; };
  auto decayAt = [&](Value c) { return ssdChunkLogDecayAt(a.oCum, first + c, a.H, h, Q); };
  // s' = exp(cum_last of chunk c) s + S_c: the state after chunk c, with its block state.
  auto advance = [&](Value c, Value s, Value Sc, Value la) {
    Value next = k.exp(la) * s + Sc;
    ssdStoreBlockState(k, a, el, i, c, len, Q, reporter, next);
    return next;
  };
  std::vector<Value> r;
  if (D == 0) {
    r = k.forLoop(zeroI, nch, oneI, {s0, zero}, [&](Value c, const std::vector<Value>& v) {
      Value Sc = k.load(a.ws, stateAt(c), m, zero);
      if (!keep) k.store(a.ws, stateAt(c), v[0], m);
      Value la = k.load(a.ws, decayAt(c));
      return std::vector<Value>{advance(c, v[0], Sc, la), v[1] + la};
    });
  } else {
    // Chunks 0 .. D - 1's states and decays (carried as {s, sum, S_c, la_c, .., S_c+D-1,
    // la_c+D-1}), then the entering state s0 in chunk 0's place.
    Value any = nch > 0;
    std::vector<Value> carry{s0, zero};
    for (int64_t d = 0; d < D; ++d) {
      Value cd = d == 0 ? zeroI : k.constInt(d), have = d == 0 ? any : nch > cd;
      carry.push_back(k.load(a.ws, stateAt(cd), m && have, zero));
      carry.push_back(k.ifElse(
          have, [&] { return std::vector<Value>{k.load(a.ws, decayAt(cd))}; },
          [&] { return std::vector<Value>{zero}; })[0]);
    }
    if (!keep) k.store(a.ws, stateAt(zeroI), s0, m && any);
    r = k.forLoop(zeroI, nch, oneI, carry, [&](Value c, const std::vector<Value>& v) {
      Value cD = c + D, aheadIn = cD < nch;
      Value Sn = k.load(a.ws, stateAt(cD), m && aheadIn, zero);
      Value ln = k.load(a.ws, decayAt(k.minimum(cD, nch - 1)));
      Value c1 = D == 1 ? cD : c + 1, more = D == 1 ? aheadIn : c1 < nch;
      Value s = advance(c, v[0], v[2], v[3]);
      if (!keep) k.store(a.ws, stateAt(c1), s, m && more);
      std::vector<Value> next{s, v[1] + v[3]};
      next.insert(next.end(), v.begin() + 4, v.end());
      next.push_back(Sn);
      next.push_back(ln);
      return next;
    });
  }
  ssdStoreFinalState(k, a, el, i, reporter, r[0]);
  k.ifThen(a.hasDecay && (pid == 0), [&] { k.store(a.decay, i * a.sDecS + h * a.sDecH, k.exp(r[1])); });
}

void chooseStatePassingMeta(Specialization& s) {
  ssdDefaultMeta(s);
  setDefault(s, "meta:BLOCK", 1024);
  ssdPrefetchMeta(s, 0);
  ssdMetaFlag(s, "keep_states", 0, "store the entering states", "keep the chunks'");
}

}  // namespace

SsdPassBlock ssdStatePassingBlock(int64_t PN, int64_t H, int64_t nseq) {
  constexpr int64_t kWaveWarps = 132 * 64;
  const SsdPassBlock wide{1024, 4}, narrow{512, 4};
  return (PN + wide.block - 1) / wide.block * H * nseq * wide.warps >= kWaveWarps ? wide : narrow;
}

const KernelRegistration kStatePassing(__FILE__, {kSsdStatePassing.kernel, buildStatePassing, chooseStatePassingMeta,
                                                  &kSsdStatePassing});

}  // namespace ssmjit::kernels
