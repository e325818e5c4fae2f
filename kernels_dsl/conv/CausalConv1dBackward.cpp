// Causal depthwise conv1d backward, written once in the DSL for both memory orders, dense rows
// and packed rows (cu_seqlens or positions), with initial and final states. Three kernels (see
// CausalConv1d.h for the contract):
//
// causal_conv1d_bwd streams a block of channels along a chunk of time like the forward: per tile
// it rebuilds the taps x[t - s] (shifts of the tile with the previous one's tail, initial states
// before sequence starts), the pre-activation (for SiLU's derivative) and g = dout * act'(pre),
// accumulates g * tap and g per element for dweight / dbias, and writes dx of the tile *before*
// it: dx[t] = sum_s w[W-1-s] g[t + s] needs the next tile's first W - 1 values of g (a shift the
// other way). The chunk's last tile takes the next chunk's first W - 1 tokens for that. Places
// t + s in another sequence are masked (a token at position p is reached by the p tokens before
// it only), so no gradient crosses a boundary. At the end each program reduces its sums along
// time and writes them to its own row of the workspace.
//
// x and dout arrive through shared-memory rings a few tiles ahead (dense channel-first rows run at
// 94% of copy bandwidth); a packed row's cost over a dense one is the instructions of its boundary
// tiles. Running a packed row as
// one dense row and mending each sequence's edges in the per-sequence kernel costs more (that
// kernel re-reads a few tokens of every channel row per sequence, scattered sectors), and so does
// finding a chunk's first sequence by 128-wide loads instead of the binary search.
//
// causal_conv1d_bwd_reduce sums the workspace rows in a fixed order (deterministic dweight and
// dbias whatever the scheduling), and causal_conv1d_bwd_states handles what belongs to whole
// sequences: the gradient of the initial states (the first W - 1 tokens' g, recomputed) and of the
// final states (added to dx of the last W - 1 tokens, or to the initial state of a short one).
#include <algorithm>
#include <string>
#include <utility>

#include "compiler/IntMath.h"
#include "kernels_dsl/Dsl.h"
#include "kernels_dsl/MetaDefaults.h"
#include "kernels_dsl/Registry.h"
#include "kernels_dsl/conv/CausalConv1d.h"
#include "kernels_dsl/conv/ConvTiles.h"
#include "ssmjit/error.h"

namespace ssmjit::kernels {
using namespace dsl;

namespace {

// silu'(v) = s (1 + v (1 - s)), s = sigmoid(v).
Value siluGrad(Value v) {
  Value s = sigmoid(v);
  return s * (1.0 + v * (1.0 - s));
}

void buildBackward(KernelBuilder& k, const Specialization& spec) {
  const int64_t BD = spec.get("meta:BLOCK_D"), BT = spec.get("meta:BLOCK_T"), W = spec.get("meta:width");
  const bool cl = spec.get("meta:channel_last") != 0;
  const int ta = cl ? 0 : 1;  // the time axis of 2-D tiles
  applyConvTileLayout(k, spec);
  Value x = k.arg("x"), w = k.arg("weight"), bias = k.arg("bias"), dy = k.arg("dout"), dx = k.arg("dx"),
        init = k.arg("init"), ws = k.arg("ws");
  Value cu = k.arg("cu"), pos = k.arg("pos"), initIdx = k.arg("init_idx");
  Value err = k.arg("err");
  Value D = k.arg("D"), L = k.arg("L"), nseq = k.arg("nseq"), nslots = k.arg("nslots"), steps = k.arg("search_steps"),
        tiles = k.arg("tiles"), nchunks = k.arg("nchunks");
  auto I = [&](const char* n) { return k.arg(n); };
  Value sXb = I("s_x_b"), sXt = I("s_x_t"), sXd = I("s_x_d"), sWd = I("s_w_d"), sWk = I("s_w_k"), sBias = I("s_bias_d"),
        sYb = I("s_dy_b"), sYt = I("s_dy_t"), sYd = I("s_dy_d"), sDb = I("s_dx_b"), sDt = I("s_dx_t"),
        sDd = I("s_dx_d"), sIs = I("s_init_slot"), sId = I("s_init_d"), sIk = I("s_init_k"), sCu = I("s_cu"),
        sPos = I("s_pos_t"), sIidx = I("s_init_idx");
  Value hasBias = k.arg("has_bias"), siluOn = k.arg("silu"), hasCu = k.arg("has_cu"), hasPos = k.arg("has_pos"),
        hasInit = k.arg("has_init"), hasInitIdx = k.arg("has_init_idx");

  const auto [pidD, pidC, row, offsD, maskD, dOffs, mD, rT, zero, zeroI, wk, biasT] =
      convProgram(k, BD, BT, W, cl, D, w, sWd, sWk, bias, sBias, hasBias);
  auto tE = [&](Value v) { return k.expandDims(v, cl ? 1 : 0); };
  const std::vector<int64_t> tileShape = cl ? std::vector<int64_t>{BT, BD} : std::vector<int64_t>{BD, BT};

  Value t0 = pidC * (BT * tiles);
  Value nTiles = k.minimum(tiles, cdiv(L - t0, k.constInt(BT)));
  const ConvPacking pk{cu, pos, sCu, sPos, hasCu, hasPos, nseq, L, row, err, pidD == 0, BT, W};
  Value seq0 = sequenceOf(k, pk, t0, steps);
  std::vector<Value> b0 = sequenceBounds(k, pk, seq0);
  const ConvInitialStates st{init, initIdx, sIs, sId, sIk, sIidx, hasInit, hasInitIdx, nslots};

  // Tile i of the chunk (i < nTiles), then the first W - 1 tokens of the next chunk (i = nTiles:
  // their g completes the last tile's dx; their own sums belong to the next chunk). Channel-first,
  // that look-ahead is rounded up to whole runs of a thread's tokens, so its mask is constant
  // along a run and every tile's copies stay 16-byte vectors (per-token masks made them scalar).
  const int64_t run = cl ? 1 : 16 / smallestElement(spec, {"x", "dout"});
  const int64_t ahead = std::min(BT, (W - 1 + run - 1) / run * run);
  auto tileAt = [&](Value i) {  // tile i's tokens, and where it reads
    Value tv = t0 + i * BT + rT;
    return std::pair{tv, tE((tv < L) && ((i < nTiles) || ((i == nTiles) && (rT < ahead)))) && mD};
  };
  Value xRow = row * sXb, yRow = row * sYb, dxRow = row * sDb;
  Value tPrev = t0 - BT + rT;  // the previous tile: only its last W - 1 tokens are shifted in
  Value prev = k.load(x, xRow + tE(tPrev) * sXt + dOffs * sXd, tE((tPrev >= 0) && (rT >= BT - (W - 1))) && mD, zero);

  // x's and dout's tiles reach shared memory through rings of S (meta:stages) stages, copied
  // (cp.async) S - 1 tiles ahead of their use, each thread the elements it reads itself (so no
  // barrier): the bytes in flight take no registers, so 4 blocks an SM keep enough of them in
  // flight to near the copy bandwidth, where tiles loaded into registers one ahead do not.
  const int64_t S = spec.get("meta:stages");
  const int64_t tileElems = BD * BT;
  Value xs = k.sharedBuffer(S * tileElems, static_cast<DType>(spec.get("dtype:x")));
  Value dys = k.sharedBuffer(S * tileElems, static_cast<DType>(spec.get("dtype:dout")));
  Value sOff = tE(rT) * (cl ? BD : 1) + k.expandDims(k.range(BD), cl ? 0 : 1) * (cl ? 1 : BT);
  auto copyTile = [&](Value i) {  // tile i into stage i % S
    auto [tv, need] = tileAt(i);
    Value st = (i % S) * tileElems + sOff;
    k.copyAsync(xs, st, x, xRow + tE(tv) * sXt + dOffs * sXd, need);
    k.copyAsync(dys, st, dy, yRow + tE(tv) * sYt + dOffs * sYd, need);
  };
  for (int64_t s = 0; s + 1 < S; ++s) {
    k.ifThen(k.constInt(s) <= nTiles, [&] { copyTile(k.constInt(s)); });
    k.commitGroup();
  }

  Value zeroTile = k.splat(zero, tileShape);
  // Carried: x of the previous tile, g and the first sequence of the previous tile (and whether
  // its dx needs masks), the running sequence, the W + 1 sums.
  std::vector<Value> init0 = {prev, zeroTile, seq0, k.constBool(true), seq0, b0[0], b0[1]};
  const size_t kAcc = 7;
  for (int64_t j = 0; j <= W; ++j) init0.push_back(zeroTile);
  std::vector<Value> fin =
      k.forLoop(zeroI, nTiles + 1, k.constInt(1), init0, [&](Value i, const std::vector<Value>& c) {
        Value prevX = c[0], gPrev = c[1], firstPrev = c[2], fastPrev = c[3], seq = c[4], start = c[5], next = c[6];
        k.ifThen(i + (S - 1) <= nTiles, [&] { copyTile(i + (S - 1)); });
        k.commitGroup();
        k.waitGroup(static_cast<int>(S - 1));  // this thread's copies of tile i have landed
        Value cur = k.load(xs, (i % S) * tileElems + sOff), dyT = k.load(dys, (i % S) * tileElems + sOff);
        Value tt = t0 + i * BT;

        // g of this tile from its taps, and the sums (not for the look-ahead tile i = nTiles).
        std::vector<Value> acc(c.begin() + kAcc, c.end());
        auto gradients = [&](const std::vector<Value>& taps) {
          Value pre = biasT + wk[W - 1] * taps[0];
          for (int s = 1; s < W; ++s) pre = pre + wk[W - 1 - s] * taps[s];
          Value g = k.ifElse(
              siluOn, [&] { return std::vector<Value>{dyT * siluGrad(pre)}; },
              [&] { return std::vector<Value>{dyT}; })[0];
          std::vector<Value> out = k.ifElse(
              i < nTiles,
              [&] {
                std::vector<Value> a = acc;
                for (int s = 0; s < W; ++s) a[W - 1 - s] = a[W - 1 - s] + g * taps[s];
                a[W] = a[W] + g;
                return a;
              },
              [&] { return acc; });
          out.push_back(g);
          return out;
        };
        // Fast when this tile's windows and the W - 1 tokens after it lie in one sequence (then the
        // dx of this tile, written next iteration, needs no mask either). Each branch goes on to g and
        // the sums: joined after the taps, the branches' W x BLOCK_T tap values cost register copies.
        Value fast = !hasPos && (tt - start >= W - 1) && (tt + BT + W - 1 <= next);
        std::vector<Value> r = k.ifElse(
            fast,
            [&] {
              std::vector<Value> out = gradients(convTaps(k, cur, prevX, ta, W, nullptr, st, dOffs, mD));
              out.insert(out.end(), {seq, start, next});
              return out;
            },
            [&] {
              TileTokens tk = tileTokens(k, pk, tt, tt + rT, seq, start, next);
              std::vector<Value> out = gradients(convTaps(k, cur, prevX, ta, W, &tk, st, dOffs, mD));
              out.insert(out.end(), {tk.seq, tk.start, tk.next});
              return out;
            });
        acc.assign(r.begin(), r.begin() + W + 1);
        Value g = r[W + 1];
        const size_t kSeq = W + 2;  // r[kSeq..]: the sequence of the tile's last token, its bounds

        // dx of the previous tile: g of its tokens and of the W - 1 after them, same sequence only.
        k.ifThen(i >= 1, [&] {
          Value tvP = tt - BT + rT;
          Value dxv = k.ifElse(
              fastPrev,
              [&] {
                Value a = wk[W - 1] * gPrev;
                for (int s = 1; s < W; ++s) a = a + wk[W - 1 - s] * k.shift(gPrev, g, ta, -s);
                return std::vector<Value>{a};
              },
              [&] {
                // Token t + s counts only in t's sequence: with positions, when it sits at least s into
                // its sequence; otherwise when no sequence starts in (t, t + s]. The starts that can lie
                // there are those of the sequences after the previous tile's first, up to this tile's last.
                std::vector<Value> sh;
                for (int s = 1; s < W; ++s) sh.push_back(k.shift(gPrev, g, ta, -s));
                sh = k.ifElse(
                    hasPos,
                    [&] {
                      std::vector<Value> out;
                      for (int s = 1; s < W; ++s) {
                        Value same = k.load(pos, (tvP + s) * sPos, tvP + s < L, zeroI) >= s;
                        out.push_back(k.select(tE(same), sh[s - 1], zero));
                      }
                      return out;
                    },
                    [&] {
                      return k.ifElse(
                          hasCu,
                          [&] {
                            return foldStarts(k, pk, firstPrev + 1, r[kSeq], sh,
                                              [&](Value, Value b, const std::vector<Value>& v) {
                                                Value d = b - tvP;  // t + s crosses start b when 0 < d <= s
                                                std::vector<Value> out;
                                                for (int s = 1; s < W; ++s)
                                                  out.push_back(k.select(tE((d > 0) && (d <= s)), zero, v[s - 1]));
                                                return out;
                                              });
                          },
                          [&] { return sh; });  // a dense row has no start after 0
                    });
                Value a = wk[W - 1] * gPrev;
                for (int s = 1; s < W; ++s) a = a + wk[W - 1 - s] * sh[s - 1];
                return std::vector<Value>{a};
              })[0];
          k.store(dx, dxRow + tE(tvP) * sDt + dOffs * sDd, dxv, tE(tvP < L) && mD);
        });

        std::vector<Value> nx = {cur, g, seq, fast, r[kSeq], r[kSeq + 1], r[kSeq + 2]};
        nx.insert(nx.end(), acc.begin(), acc.end());
        return nx;
      });

  // This program's sums, reduced along time, to its workspace row ws[p, j, :].
  Value p = row * nchunks + pidC;
  for (int64_t j = 0; j <= W; ++j)
    k.store(ws, (p * (W + 1) + j) * D + offsD, k.reduce(fin[kAcc + j], ta, "sum"), maskD);
}

// dweight[d, j] = sum_p ws[p, j, d] (j < W), dbias[d] = sum_p ws[p, W, d]: program (channel block,
// j) sums [partials x channels] tiles element-wise, then along the partials (a fixed order for a
// given call). A column a program and BLOCK_P partials a step: its latency, not bytes, bounds the
// sum.
void buildReduce(KernelBuilder& k, const Specialization& spec) {
  const int64_t BD = spec.get("meta:BLOCK_D"), BP = spec.get("meta:BLOCK_P"), W = spec.get("meta:width");
  Value ws = k.arg("ws"), dw = k.arg("dweight"), db = k.arg("dbias");
  Value D = k.arg("D"), P = k.arg("partials");
  Value sDwd = k.arg("s_dw_d"), sDwk = k.arg("s_dw_k"), sDb = k.arg("s_db_d");
  Value hasDb = k.arg("has_dbias");
  Value offsD = k.programId(0) * BD + k.range(BD), maskD = offsD < D, j = k.programId(1);
  Value zero = k.constFloat(0), zeroI = k.constInt(0), rP = k.expandDims(k.range(BP), 1);
  Value dOffs = k.expandDims(offsD, 0), mD = k.expandDims(maskD, 0);
  Value sum =
      k.forLoop(zeroI, P, k.constInt(BP), {k.splat(zero, {BP, BD})}, [&](Value p0, const std::vector<Value>& c) {
        Value pv = p0 + rP;
        return std::vector<Value>{c[0] + k.load(ws, (pv * (W + 1) + j) * D + dOffs, (pv < P) && mD, zero)};
      })[0];
  Value total = k.reduce(sum, 0, "sum");
  k.ifThen(j < W, [&] { k.store(dw, offsD * sDwd + j * sDwk, total, maskD); });
  k.ifThen(hasDb && (j == W), [&] { k.store(db, offsD * sDb, total, maskD); });
}

// Per sequence (and block of channels; 1-D tiles): check cu_seqlens and the slots; the gradient
// of its initial state from its first W - 1 tokens (g recomputed), and of its final state.
void buildStates(KernelBuilder& k, const Specialization& spec) {
  const int64_t BD = spec.get("meta:BLOCK_D"), W = spec.get("meta:width");
  Value x = k.arg("x"), w = k.arg("weight"), bias = k.arg("bias"), dy = k.arg("dout"), dx = k.arg("dx"),
        init = k.arg("init"), dinit = k.arg("dinit"), dfinal = k.arg("dfinal");
  Value cu = k.arg("cu"), initIdx = k.arg("init_idx"), finalIdx = k.arg("final_idx"), err = k.arg("err");
  Value D = k.arg("D"), L = k.arg("L"), nseq = k.arg("nseq"), nInit = k.arg("nslots_init"),
        nFinal = k.arg("nslots_final");
  auto I = [&](const char* n) { return k.arg(n); };
  Value sXb = I("s_x_b"), sXt = I("s_x_t"), sXd = I("s_x_d"), sWd = I("s_w_d"), sWk = I("s_w_k"), sBias = I("s_bias_d"),
        sYb = I("s_dy_b"), sYt = I("s_dy_t"), sYd = I("s_dy_d"), sDb = I("s_dx_b"), sDt = I("s_dx_t"),
        sDd = I("s_dx_d"), sIs = I("s_init_slot"), sId = I("s_init_d"), sIk = I("s_init_k"), sGs = I("s_dinit_slot"),
        sGd = I("s_dinit_d"), sGk = I("s_dinit_k"), sFs = I("s_dfinal_slot"), sFd = I("s_dfinal_d"),
        sFk = I("s_dfinal_k"), sCu = I("s_cu"), sIidx = I("s_init_idx"), sFidx = I("s_final_idx");
  Value hasBias = k.arg("has_bias"), siluOn = k.arg("silu"), hasCu = k.arg("has_cu"), hasInit = k.arg("has_init"),
        hasInitIdx = k.arg("has_init_idx"), hasDinit = k.arg("has_dinit"), hasDfinal = k.arg("has_dfinal"),
        hasFinalIdx = k.arg("has_final_idx");

  Value pidD = k.programId(0), i = k.programId(1);
  Value zero = k.constFloat(0), noSlot = k.constInt(-1);
  const ConvPacking pk{cu, {}, sCu, {}, hasCu, k.constBool(false), nseq, L, i, err, pidD == 0, 1, W};
  const SequenceSpan sp = checkedSequence(k, pk, i, pidD, err);
  Value start = sp.start, len = sp.end - sp.start, row = sp.row;
  Value slotIn = k.ifElse(
      hasInit,
      [&] {
        return std::vector<Value>{checkedSlot(k, hasInitIdx, initIdx, sIidx, nInit, i, pidD, err, kErrConvInitSlot)};
      },
      [&] { return std::vector<Value>{noSlot}; })[0];
  Value slotF = k.ifElse(
      hasDfinal,
      [&] {
        return std::vector<Value>{
            checkedSlot(k, hasFinalIdx, finalIdx, sFidx, nFinal, i, pidD, err, kErrConvFinalSlot)};
      },
      [&] { return std::vector<Value>{noSlot}; })[0];

  Value offsD = pidD * BD + k.range(BD), maskD = offsD < D;
  // The final state's column j is the token at position len - (W-1) + j: its gradient goes to
  // dx there, or (a sequence shorter than W - 1) to the initial state's column len + j.
  std::vector<Value> dfin;
  for (int64_t j = 0; j + 1 < W; ++j)
    dfin.push_back(k.load(dfinal, slotF * sFs + offsD * sFd + j * sFk, maskD && (slotF >= 0), zero));
  k.ifThen(slotF >= 0, [&] {
    for (int64_t j = 0; j + 1 < W; ++j) {
      Value p = len - (W - 1) + j;
      Value off = row * sDb + (start + p) * sDt + offsD * sDd;
      Value m = maskD && (p >= 0);
      k.store(dx, off, k.load(dx, off, m, zero) + dfin[j], m);
    }
  });

  k.returnIf(!hasDinit || (slotIn < 0));
  // xx(q) for positions q in [-(W-1), W-2]: x, or the initial state before the start.
  auto xx = [&](int64_t q) {
    if (q >= 0) return k.load(x, row * sXb + (start + q) * sXt + offsD * sXd, maskD && (len > q), zero);
    return k.load(init, slotIn * sIs + offsD * sId + (q + W - 1) * sIk, maskD, zero);
  };
  std::vector<Value> wk, xs;
  for (int64_t j = 0; j < W; ++j) wk.push_back(k.load(w, offsD * sWd + j * sWk, maskD, zero));
  for (int64_t q = -(W - 1); q + 1 < W; ++q) xs.push_back(xx(q));
  Value biasT = k.ifElse(
      hasBias, [&] { return std::vector<Value>{k.load(bias, offsD * sBias, maskD, zero)}; },
      [&] { return std::vector<Value>{k.splat(zero, {BD})}; })[0];
  // g of the first W - 1 tokens (0 past the sequence's end), in the main kernel's order.
  std::vector<Value> g;
  for (int64_t t = 0; t + 1 < W; ++t) {
    Value dyt = k.load(dy, row * sYb + (start + t) * sYt + offsD * sYd, maskD && (len > t), zero);
    Value pre = biasT + wk[W - 1] * xs[t + W - 1];
    for (int64_t s = 1; s < W; ++s) pre = pre + wk[W - 1 - s] * xs[t + W - 1 - s];
    g.push_back(k.ifElse(
        siluOn, [&] { return std::vector<Value>{dyt * siluGrad(pre)}; }, [&] { return std::vector<Value>{dyt}; })[0]);
  }
  // Column j (position j - (W-1)) is tap k of token j - k.
  for (int64_t j = 0; j + 1 < W; ++j) {
    Value a = k.splat(zero, {BD});
    for (int64_t kk = 0; kk <= j; ++kk) a = a + wk[kk] * g[j - kk];
    for (int64_t jf = 0; jf + 1 < W; ++jf)  // final column jf at position len - (W-1) + jf
      a = a + k.select((len + jf == j) && (slotF >= 0), dfin[jf], zero);
    k.store(dinit, slotIn * sGs + offsD * sGd + j * sGk, a, maskD);
  }
}

// Tiles: channel-first 8 channels x 128 tokens (16 lanes a channel, 16 bytes a lane); channel-last
// the time tile in each thread (4 tokens) and two channels a thread, one channel from W 5 (8-token
// tiles spill at two): the W + 1 per-element sums and the taps bound the registers.
// 16-bit rows up to W 4 without initial states are held to 4 blocks an SM (128 registers, no
// spills; 146-151 otherwise), which helps packed rows and leaves dense ones unchanged; with initial
// states or wider windows they would spill.
// A packed 16-bit channel-first row takes 16 channels x 64 tokens through rings of 4: its tiles
// near a sequence start (the masked taps) then cover half the tokens each.
void chooseBackwardMeta(Specialization& s) {
  const int64_t elem = smallestElement(s, {"x", "dout", "dx"});
  const bool packedCf = elem <= 2 && !s.get("meta:channel_last") && s.get("has_cu", 0);
  chooseConvTiles(s, elem, packedCf ? 8 : 16, s.get("meta:width") <= 4 ? 2 * elem : elem, true);
  if (elem <= 2 && s.get("meta:width") <= 4 && !s.get("has_init", 0) && !s.find("meta:min_blocks"))
    s.set("meta:min_blocks", 4);
  setDefault(s, "meta:index_bits", 32);
  setDefault(s, "meta:stages", packedCf ? 4 : 3);
  const int64_t stages = s.get("meta:stages");
  if (stages < 2 || stages > 8)
    throw Error(Error::Kind::InvalidArgument, s.kernel + ": meta stages (SSMJIT_META) is " + std::to_string(stages) +
                                                  ", expected 2..8 (the rings' stages: tiles copied stages - 1 ahead)");
}

void chooseReduceMeta(Specialization& s) {
  setDefaults(s, {{"meta:num_warps", 4}, {"meta:BLOCK_D", 32}, {"meta:BLOCK_P", 64}, {"meta:index_bits", 32}});
}

}  // namespace

ConvBwdChunks convBackwardChunks(int64_t L, int64_t D, int64_t rows, bool channelLast, int64_t bd, int64_t bt) {
  const int64_t rowTiles = std::max<int64_t>(1, cdiv(L, bt));
  const int64_t target = channelLast ? 1024 : 4096;
  const int64_t perRow = std::max<int64_t>(1, cdiv(target, cdiv(D, bd) * std::max<int64_t>(1, rows)));
  const int64_t tiles = std::max({std::max<int64_t>(4, 128 / bt), cdiv(rowTiles, perRow), cdiv(rowTiles, 65535)});
  return {tiles, cdiv(rowTiles, tiles)};
}

const KernelRegistration kBackward(__FILE__, {kConvBwd.kernel, buildBackward, chooseBackwardMeta, &kConvBwd});
const KernelRegistration kReduce(__FILE__, {kConvBwdReduce.kernel, buildReduce, chooseReduceMeta, &kConvBwdReduce});
const KernelRegistration kStates(__FILE__,
                                 {kConvBwdStates.kernel, buildStates, choosePerSequenceTiles, &kConvBwdStates});

}  // namespace ssmjit::kernels
