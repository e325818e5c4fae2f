// Causal depthwise conv1d forward, written once in the DSL for both memory orders, dense rows and
// packed rows (cu_seqlens or per-token positions), with initial and final conv states. See
// CausalConv1d.h for the argument contract.
//
// A program streams one block of channels along a chunk of time, one [channels x time] tile at a
// time (oriented so that the memory-contiguous axis is the vector axis). Each x element is loaded
// once: the taps x[t - s] are the current tile shifted along time with the previous tile's tail
// shifted in (sj.shift: register moves and warp shuffles), not W re-reads of memory. Tiles whose
// windows stay inside one sequence (all but those near a sequence start) take a path with no
// per-element test; the others compute each token's position in its sequence and read the taps
// before the start from the initial state (or zeros).
#include "kernels_dsl/conv/CausalConv1d.h"

#include <algorithm>

#include "kernels_dsl/Dsl.h"
#include "kernels_dsl/MetaDefaults.h"
#include "kernels_dsl/Registry.h"
#include "kernels_dsl/conv/ConvTiles.h"

namespace ssmjit::kernels {
using namespace dsl;

namespace {

void buildForward(KernelBuilder& k, const Specialization& spec) {
  const int64_t BD = spec.get("meta:BLOCK_D"), BT = spec.get("meta:BLOCK_T"), tiles = spec.get("meta:tiles"),
                W = spec.get("meta:width");
  const bool cl = spec.get("meta:channel_last") != 0;
  const int ta = cl ? 0 : 1;  // the time axis of 2-D tiles
  applyConvTileLayout(k, spec);
  Value x = k.arg("x"), w = k.arg("weight"), bias = k.arg("bias"), out = k.arg("out"), init = k.arg("init");
  Value cu = k.arg("cu"), pos = k.arg("pos"), initIdx = k.arg("init_idx");
  Value err = k.arg("err");
  Value D = k.arg("D"), L = k.arg("L"), nseq = k.arg("nseq"), nslots = k.arg("nslots"), steps = k.arg("search_steps");
  auto I = [&](const char* n) { return k.arg(n); };
  Value sXb = I("s_x_b"), sXt = I("s_x_t"), sXd = I("s_x_d"), sWd = I("s_w_d"), sWk = I("s_w_k"), sBias = I("s_bias_d"),
        sOb = I("s_out_b"), sOt = I("s_out_t"), sOd = I("s_out_d"), sIs = I("s_init_slot"), sId = I("s_init_d"),
        sIk = I("s_init_k"), sCu = I("s_cu"), sPos = I("s_pos_t"), sIidx = I("s_init_idx");
  Value hasBias = k.arg("has_bias"), siluOn = k.arg("silu"), hasCu = k.arg("has_cu"), hasPos = k.arg("has_pos"),
        hasInit = k.arg("has_init"), hasInitIdx = k.arg("has_init_idx");

  const auto [pidD, pidC, row, offsD, maskD, dOffs, mD, rT, zero, zeroI, wk, biasT] =
      convProgram(k, BD, BT, W, cl, D, w, sWd, sWk, bias, sBias, hasBias);
  // 1-D tiles along time, made 2-D in the kernel's orientation.
  auto tE = [&](Value v) { return k.expandDims(v, cl ? 1 : 0); };

  Value t0 = pidC * (BT * tiles);
  Value xRow = row * sXb, oRow = row * sOb;
  auto xAt = [&](Value tv) { return xRow + tE(tv) * sXt + dOffs * sXd; };

  const ConvPacking pk{cu, pos, sCu, sPos, hasCu, hasPos, nseq, L, row, err, pidD == 0, BT, W};
  Value seq0 = sequenceOf(k, pk, t0, steps);
  std::vector<Value> b0 = sequenceBounds(k, pk, seq0);
  const ConvInitialStates st{init, initIdx, sIs, sId, sIk, sIidx, hasInit, hasInitIdx, nslots};

  // cu_seqlens is checked here, so that a packed row needs no second launch unless it has final
  // states to write or slots to check: channel block 0's programs share the entries out along
  // the row's chunks and report the first bad one each (0 first, increasing, T last).
  k.ifThen(hasCu && (pidD == 0), [&] {
    Value chunks = cdiv(L, k.constInt(BT * tiles)), per = cdiv(nseq, chunks);
    Value i0 = pidC * per, i1 = k.minimum(i0 + per, nseq);
    const int64_t threads = 32 * spec.get("meta:num_warps");  // an entry a thread
    k.forLoop(i0, i1, k.constInt(threads), {}, [&](Value ib, const std::vector<Value>&) {
      Value i = ib + k.range(threads), in = i < i1;
      Value a = k.load(cu, i * sCu, in, zeroI), b = k.load(cu, (i + 1) * sCu, in, zeroI);
      Value bad = in && badCuSeqlensEntry(i, a, b, nseq, L);
      Value first = k.reduce(k.select(bad, i, nseq), 0, "min");
      k.ifThen(first < nseq, [&] {
        k.reportError(err, k.constInt(kErrConvCuSeqlens), first, k.load(cu, first * sCu),
                      k.load(cu, (first + 1) * sCu));
      });
      return std::vector<Value>{};
    });
  });

  // The previous tile: only its last W - 1 tokens are ever shifted in.
  Value tPrev = t0 - BT + rT;
  Value prev = k.load(x, xAt(tPrev), tE((tPrev >= 0) && (rT >= BT - (W - 1))) && mD, zero);

  Value nTiles = k.minimum(k.constInt(tiles), cdiv(L - t0, k.constInt(BT)));
  // One masked load a tile (vectorised when L's divisibility class allows), issued a tile ahead:
  // the next tile's load is in flight while this one is computed and stored.
  auto loadTile = [&](Value i) {
    Value tv = t0 + i * BT + rT;
    return k.load(x, xAt(tv), tE((tv < L) && (i < nTiles)) && mD, zero);
  };
  k.forLoop(
      zeroI, nTiles, k.constInt(1), {prev, loadTile(zeroI), seq0, b0[0], b0[1]},
      [&](Value i, const std::vector<Value>& c) {
        Value prevT = c[0], cur = c[1], seq = c[2], start = c[3], next = c[4];
        Value ahead = loadTile(i + 1);
        Value tt = t0 + i * BT, tv = tt + rT;
        auto conv = [&](const std::vector<Value>& taps) {
          Value acc = biasT + wk[W - 1] * taps[0];
          for (int s = 1; s < W; ++s) acc = acc + wk[W - 1 - s] * taps[s];
          return acc;
        };
        // Every window of this tile inside one sequence: no per-element test.
        Value inside = !hasPos && (tt - start >= W - 1) && (tt + BT <= next);
        std::vector<Value> r = k.ifElse(
            inside,
            [&] {
              return std::vector<Value>{conv(convTaps(k, cur, prevT, ta, W, nullptr, st, dOffs, mD)), seq, start, next};
            },
            [&] {
              // Each token's position in its sequence and its sequence (for the initial states).
              TileTokens tk = tileTokens(k, pk, tt, tv, seq, start, next);
              return std::vector<Value>{conv(convTaps(k, cur, prevT, ta, W, &tk, st, dOffs, mD)), tk.seq, tk.start,
                                        tk.next};
            });
        Value y = k.ifElse(
            siluOn, [&] { return std::vector<Value>{silu(r[0])}; }, [&] { return std::vector<Value>{r[0]}; })[0];
        k.store(out, oRow + tE(tv) * sOt + dOffs * sOd, y, tE(tv < L) && mD);
        return std::vector<Value>{cur, ahead, r[1], r[2], r[3]};
      });
}

// Per sequence (and block of channels): check its cu_seqlens entries and slot indices, then write
// its final state
// (the last W - 1 tokens; older columns from its initial state when it is shorter). 1-D tiles
// along channels: the thread that reads a channel's initial state writes its final state, so an
// in-place update (same tensor, same slot) needs no barrier.
void buildFinalState(KernelBuilder& k, const Specialization& spec) {
  const int64_t BD = spec.get("meta:BLOCK_D"), W = spec.get("meta:width");
  Value x = k.arg("x"), init = k.arg("init"), fin = k.arg("final");
  Value cu = k.arg("cu"), initIdx = k.arg("init_idx"), finalIdx = k.arg("final_idx"), err = k.arg("err");
  Value D = k.arg("D"), L = k.arg("L"), nseq = k.arg("nseq"), nInit = k.arg("nslots_init"),
        nFinal = k.arg("nslots_final");
  auto I = [&](const char* n) { return k.arg(n); };
  Value sXb = I("s_x_b"), sXt = I("s_x_t"), sXd = I("s_x_d"), sIs = I("s_init_slot"), sId = I("s_init_d"),
        sIk = I("s_init_k"), sFs = I("s_final_slot"), sFd = I("s_final_d"), sFk = I("s_final_k"), sCu = I("s_cu"),
        sIidx = I("s_init_idx"), sFidx = I("s_final_idx");
  Value hasCu = k.arg("has_cu"), hasInit = k.arg("has_init"), hasInitIdx = k.arg("has_init_idx"),
        hasFinal = k.arg("has_final"), hasFinalIdx = k.arg("has_final_idx");

  Value pidD = k.programId(0), i = k.programId(1);
  Value zero = k.constFloat(0);
  const ConvPacking pk{cu, {}, sCu, {}, hasCu, k.constBool(false), nseq, L, i, err, pidD == 0, 1, W};
  const SequenceSpan sp = checkedSequence(k, pk, i, pidD, err);
  Value start = sp.start, end = sp.end, row = sp.row;
  Value slotIn = k.ifElse(
      hasInit,
      [&] {
        return std::vector<Value>{checkedSlot(k, hasInitIdx, initIdx, sIidx, nInit, i, pidD, err, kErrConvInitSlot)};
      },
      [&] { return std::vector<Value>{k.constInt(-1)}; })[0];
  k.returnIf(!hasFinal);
  Value slotOut = checkedSlot(k, hasFinalIdx, finalIdx, sFidx, nFinal, i, pidD, err, kErrConvFinalSlot);

  Value offsD = pidD * BD + k.range(BD), maskD = offsD < D;
  Value len = end - start;
  std::vector<Value> cols;
  for (int64_t j = 0; j + 1 < W; ++j) {
    Value p = end - (W - 1) + j;
    Value fromX = p >= start;
    Value xv = k.load(x, row * sXb + p * sXt + offsD * sXd, maskD && fromX, zero);
    Value iv = k.load(init, slotIn * sIs + offsD * sId + (len + j) * sIk, maskD && !fromX && (slotIn >= 0), zero);
    cols.push_back(k.select(fromX, xv, iv));
  }
  k.returnIf(slotOut == -1);
  for (int64_t j = 0; j + 1 < W; ++j) k.store(fin, slotOut * sFs + offsD * sFd + j * sFk, cols[j], maskD);
}

// Forward tiles: channel-first, a warp a channel, its 32 lanes a 512-byte run of time (256 bf16
// tokens), 4 warps, 8 tiles a program; channel-last, the time tile (8 tokens) in each thread, 8
// bytes of channels a thread, 2 warps, 4 tiles a program. Short programs keep more of them
// resident: the bytes in flight, not the per-program set-up, bound it.
void chooseForwardMeta(Specialization& s) {
  const bool cl = s.get("meta:channel_last") != 0;
  if (cl && !s.find("meta:num_warps")) s.set("meta:num_warps", 2);
  if (cl && !s.find("meta:BLOCK_T")) s.set("meta:BLOCK_T", std::max<int64_t>(8, nextPow2(s.get("meta:width"))));
  // Channel-last, wider windows: 4 bytes of channels (a packed tile's per-token taps would spill at 8).
  chooseConvTiles(s, smallestElement(s, {"x", "out"}), 32, s.get("meta:width") <= 4 ? 8 : 4, true);
  if (!s.find("meta:tiles")) s.set("meta:tiles", cl ? 4 : std::max<int64_t>(1, 2048 / s.get("meta:BLOCK_T")));
  setDefault(s, "meta:index_bits", 32);
}

}  // namespace

const KernelRegistration kForward(__FILE__, {kConvFwd.kernel, buildForward, chooseForwardMeta, &kConvFwd});
const KernelRegistration kFinalState(__FILE__, {kConvFinalState.kernel, buildFinalState, choosePerSequenceTiles,
                                                &kConvFinalState});

}  // namespace ssmjit::kernels
