// Sequence bookkeeping of the causal-conv1d kernels (see ConvTiles.h).
#include "kernels_dsl/conv/ConvTiles.h"

#include "kernels_dsl/MetaDefaults.h"
#include "kernels_dsl/conv/CausalConv1d.h"

#include <algorithm>

namespace ssmjit::kernels {
using namespace dsl;

int64_t smallestElement(const Specialization& s, std::initializer_list<const char*> tensors) {
  int64_t bytes = 8;
  for (const char* t : tensors)
    bytes = std::min<int64_t>(bytes, dtypeBytes(static_cast<DType>(s.get(std::string("dtype:") + t, 0))));
  return bytes;
}

void chooseConvTiles(Specialization& s, int64_t elemBytes, int64_t cfTimeLanes, int64_t clVecBytes, bool timeInThread) {
  const int64_t W = s.get("meta:width");
  setDefault(s, "meta:num_warps", 4);
  const int64_t warps = s.get("meta:num_warps");
  if (s.get("meta:channel_last")) {
    setDefault(s, "meta:BLOCK_T", std::max<int64_t>(4, nextPow2(W)));
    if (timeInThread && !s.find("meta:shift_lanes")) s.set("meta:shift_lanes", 1);
    const int64_t lanesT = s.find("meta:shift_lanes") ? s.get("meta:shift_lanes") : s.get("meta:BLOCK_T");
    if (!s.find("meta:BLOCK_D"))
      s.set("meta:BLOCK_D", std::max<int64_t>(1, clVecBytes / elemBytes) * (32 / lanesT) * warps);
  } else {
    setDefault(s, "meta:BLOCK_T", std::max<int64_t>(16 / elemBytes * cfTimeLanes, nextPow2(W)));
    setDefault(s, "meta:BLOCK_D", 32 / cfTimeLanes * warps);
  }
}

void choosePerSequenceTiles(Specialization& s) {
  setDefaults(s, {{"meta:num_warps", 2}, {"meta:BLOCK_D", 256}, {"meta:index_bits", 32}});
}

ConvProgram convProgram(KernelBuilder& k, int64_t BD, int64_t BT, int64_t W, bool channelLast, Value D, Value w,
                        Value sWd, Value sWk, Value bias, Value sBias, Value hasBias) {
  ConvProgram p;
  p.pidD = k.programId(0), p.pidC = k.programId(1), p.row = k.programId(2);
  p.offsD = p.pidD * BD + k.range(BD), p.maskD = p.offsD < D;
  auto dE = [&](Value v) { return k.expandDims(v, channelLast ? 0 : 1); };
  p.dOffs = dE(p.offsD), p.mD = dE(p.maskD), p.rT = k.range(BT);
  p.zero = k.constFloat(0), p.zeroI = k.constInt(0);
  for (int64_t j = 0; j < W; ++j) p.wk.push_back(dE(k.load(w, p.offsD * sWd + j * sWk, p.maskD, p.zero)));
  p.biasT = k.ifElse(
      hasBias, [&] { return std::vector<Value>{dE(k.load(bias, p.offsD * sBias, p.maskD, p.zero))}; },
      [&] { return std::vector<Value>{dE(k.splat(p.zero, {BD}))}; })[0];
  return p;
}

void applyConvTileLayout(KernelBuilder& k, const Specialization& s) {
  if (s.find("meta:shift_lanes")) k.setShiftLanes(static_cast<int>(s.get("meta:shift_lanes")));
}

Value sequenceOf(KernelBuilder& k, const ConvPacking& p, Value t, Value steps) {
  return k.ifElse(
      p.hasCu,
      [&] {
        // cu[0] = 0 <= t < cu[nseq] = L: keep cu[lo] <= t < cu[hi].
        Value zeroI = k.constInt(0);
        auto lohi = k.forLoop(zeroI, steps, k.constInt(1), {zeroI, p.nseq}, [&](Value, const std::vector<Value>& c) {
          Value mid = (c[0] + c[1]) / 2;
          Value le = k.load(p.cu, mid * p.sCu) <= t;
          return std::vector<Value>{k.select(le, mid, c[0]), k.select(le, c[1], mid)};
        });
        return std::vector<Value>{lohi[0]};
      },
      [&] { return std::vector<Value>{p.row}; })[0];
}

std::vector<Value> sequenceBounds(KernelBuilder& k, const ConvPacking& p, Value s) {
  return k.ifElse(
      p.hasCu,
      [&] {
        return std::vector<Value>{k.load(p.cu, s * p.sCu), k.load(p.cu, (s + 1) * p.sCu)};
      },
      [&] {
        return std::vector<Value>{k.constInt(0), p.L + (2 * p.BT + p.W)};
      });
}

TileTokens tileTokens(KernelBuilder& k, const ConvPacking& p, Value tt, Value tv, Value seq, Value start, Value next) {
  const int64_t BT = p.BT;
  Value zeroI = k.constInt(0);
  std::vector<Value> r = k.ifElse(
      p.hasPos,
      [&] {
        Value lp = k.load(p.pos, tv * p.sPos, tv < p.L, zeroI);
        k.ifThen(p.reports, [&] {  // one program a tile checks
          Value before = k.load(p.pos, (tv - 1) * p.sPos, (tv >= 1) && (tv < p.L), k.constInt(-1));
          Value bad = (tv < p.L) && (lp != 0) && (lp != before + 1);
          Value first = k.reduce(k.select(bad, tv, p.L), 0, "min");
          k.ifThen(first < p.L, [&] {
            Value at = k.load(p.pos, first * p.sPos);
            Value prior = k.select(first >= 1, k.load(p.pos, k.maximum(first - 1, zeroI) * p.sPos), k.constInt(-1));
            k.reportError(p.err, k.constInt(kErrConvSeqPos), first, at, prior);
          });
        });
        return std::vector<Value>{lp, k.splat(zeroI, {BT}), seq, start, next};
      },
      [&] {
        return k.ifElse(
            p.hasCu,
            [&] {
              // The sequence of the tile's last token: seq plus the starts in (seq's start, lastT],
              // counted among the next kNearStarts (loads issued together); past those, a binary search
              // (at most BT starts lie in the tile, so it is in [seq, seq + BT]: cu strictly increases).
              Value lastT = k.minimum(tt + BT, p.L) - 1;
              std::vector<Value> near = nearStarts(k, p, seq + 1);
              Value count = zeroI;
              for (const Value& b : near) count = count + k.select(b <= lastT, k.constInt(1), zeroI);
              std::vector<Value> last = k.ifElse(
                  count < kNearStarts,
                  [&] {
                    // Its bounds are among the starts at hand.
                    Value s0 = start, s1 = near[0];
                    for (int j = 1; j < kNearStarts; ++j) {
                      s0 = k.select(count == j, near[j - 1], s0);
                      s1 = k.select(count == j, near[j], s1);
                    }
                    return std::vector<Value>{seq + count, s0, s1};
                  },
                  [&] {
                    std::vector<Value> lh = {seq + kNearStarts, k.minimum(seq + (BT + 1), p.nseq)};
                    for (int64_t step = 0; step <= log2Ceil(BT + 1); ++step) {
                      Value mid = (lh[0] + lh[1]) / 2;
                      Value le = k.load(p.cu, mid * p.sCu) <= lastT;
                      lh = {k.select(le, mid, lh[0]), k.select(le, lh[1], mid)};
                    }
                    std::vector<Value> nb = sequenceBounds(k, p, lh[0]);
                    return std::vector<Value>{lh[0], nb[0], nb[1]};
                  });
              Value seqLast = last[0];
              // Each token takes the last start at or before it.
              std::vector<Value> se = foldStarts(
                  k, p, seq + 1, seqLast, {k.splat(start, {BT}), k.splat(seq, {BT})},
                  [&](Value q, Value b, const std::vector<Value>& e) {
                    Value after = tv >= b;
                    return std::vector<Value>{k.select(after, b, e[0]), k.select(after, q, e[1])};
                  },
                  &near);
              return std::vector<Value>{tv - se[0], se[1], seqLast, last[1], last[2]};
            },
            [&] {  // a dense row: one sequence from token 0
              return std::vector<Value>{tv, k.splat(p.row, {BT}), seq, start, next};
            });
      });
  return {r[0], r[1], r[2], r[3], r[4]};
}

std::vector<Value> convTaps(KernelBuilder& k, Value cur, Value prev, int timeAxis, int64_t W, const TileTokens* tk,
                            const ConvInitialStates& st, Value dOffs, Value mD) {
  std::vector<Value> taps{cur};
  auto tE = [&](Value v) { return k.expandDims(v, 1 - timeAxis); };
  if (!tk) {
    for (int s = 1; s < W; ++s) taps.push_back(k.shift(cur, prev, timeAxis, s));
    return taps;
  }
  Value zero = k.constFloat(0), lp = tE(tk->lp);
  Value slotE = k.ifElse(
      st.hasIdx, [&] { return std::vector<Value>{k.load(st.idx, tk->seqE * st.sIdx)}; },
      [&] { return std::vector<Value>{tk->seqE}; })[0];
  Value slotOk = tE((slotE >= 0) && (slotE < st.nslots));
  Value slotOffs = tE(slotE) * st.sSlot + dOffs * st.sD;
  for (int s = 1; s < W; ++s) {
    Value before = lp < s;
    Value fromInit = k.ifElse(
        st.has,
        [&] {
          return std::vector<Value>{
              k.load(st.init, slotOffs + (lp + (W - 1 - s)) * st.sK, before && (lp >= 0) && slotOk && mD, zero)};
        },
        [&] { return std::vector<Value>{k.splat(zero, cur.shape())}; })[0];
    taps.push_back(k.select(before, fromInit, k.shift(cur, prev, timeAxis, s)));
  }
  return taps;
}

std::vector<Value> nearStarts(KernelBuilder& k, const ConvPacking& p, Value q0) {
  std::vector<Value> bs;
  for (int j = 0; j < kNearStarts; ++j) bs.push_back(k.load(p.cu, k.minimum(q0 + j, p.nseq) * p.sCu));
  return bs;
}

std::vector<Value> foldStarts(KernelBuilder& k, const ConvPacking& p, Value q0, Value q1,
                              const std::vector<Value>& inits,
                              const std::function<std::vector<Value>(Value, Value, const std::vector<Value>&)>& fn,
                              const std::vector<Value>* near) {
  const std::vector<Value> bs = near ? *near : nearStarts(k, p, q0);
  std::vector<Value> c = inits;
  for (int j = 0; j < kNearStarts; ++j)
    c = k.ifElse(
        q0 + j <= q1, [&] { return fn(q0 + j, bs[j], c); }, [&] { return c; });
  return k.forLoop(q0 + kNearStarts, q1 + 1, k.constInt(1), c,
                   [&](Value q, const std::vector<Value>& v) { return fn(q, k.load(p.cu, q * p.sCu), v); });
}

Value badCuSeqlensEntry(Value i, Value a, Value b, Value nseq, Value L) {
  return ((i == 0) && (a != 0)) || ((i == nseq - 1) && (b != L)) || (a < 0) || (b <= a) || (b > L);
}

SequenceSpan checkedSequence(KernelBuilder& k, const ConvPacking& p, Value i, Value pidD, Value err) {
  Value zeroI = k.constInt(0);
  std::vector<Value> se = k.ifElse(
      p.hasCu,
      [&] {
        return std::vector<Value>{k.load(p.cu, i * p.sCu), k.load(p.cu, (i + 1) * p.sCu), zeroI};
      },
      [&] {
        return std::vector<Value>{zeroI, p.L, i};
      });
  Value start = se[0], end = se[1];
  Value bad = p.hasCu && badCuSeqlensEntry(i, start, end, p.nseq, p.L);
  k.ifThen(bad && (pidD == 0), [&] { k.reportError(err, k.constInt(kErrConvCuSeqlens), i, start, end); });
  k.returnIf(bad);
  return {start, end, se[2]};
}

Value checkedSlot(KernelBuilder& k, Value hasIdx, Value idx, Value stride, Value n, Value i, Value pidD, Value err,
                  long long errCode) {
  Value s = k.ifElse(
      hasIdx, [&] { return std::vector<Value>{k.load(idx, i * stride)}; }, [&] { return std::vector<Value>{i}; })[0];
  Value bad = (s != -1) && ((s < 0) || (s >= n));
  k.ifThen(bad && (pidD == 0), [&] { k.reportError(err, k.constInt(errCode), i, s, n); });
  return k.select(bad, k.constInt(-1), s);
}

}  // namespace ssmjit::kernels
