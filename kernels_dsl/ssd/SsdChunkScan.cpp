// ssd_chunk_scan (Ssd.h): a chunk's output rows i (a block of 64) for a head and a block of p,
//   y_i = exp(cum_i) C_i . S_in + sum_{j <= i} CB_ij exp(cum_i - cum_j) dt'_j x_j + D x_i,
//   out_i = y_i (* silu(z_i)), and y_i itself where the call keeps it,
// on the tensor cores: C [64, 32 states] (staged with the state's tiles where it is 16-bit, else
// from memory into registers) times the entering state [32 states, BLOCK_P] staged through shared
// memory; then, over the causal 32-token blocks, the decayed, masked scores [64, 32] times x
// [32 tokens, BLOCK_P] staged (zeros past the chunk), accumulated on the first product. Stored in
// out's dtype.
// With 16-bit x, C and out, the staged operands are 16-bit and read by ldmatrix: x in its own
// dtype (exact), the state as bf16 hi + lo (16 bits, an error of 2^-17 relative), the scores as
// two terms of x's dtype (2^-17 or less a product), all below out's rounding (three terms each,
// f32 accuracy, where the call keeps y); the state's f32 tiles, then C.B's and x's (and each
// step's dt' and cumsums: SsdDecayRing.h), arrive through cp.async rings, a tile or two ahead of
// their use. On sm_90a (meta:wgmma, SsdChunks.h) the state's terms and x's tiles lie in swizzled
// buffers and both products run on wgmma, which reads them once for the warpgroup.
// Otherwise the staged operands are f32, split into three bf16 terms (f32 accuracy).
// meta:one_term 1 (16-bit x, C and out; SsdChunks.h): the state in C's dtype and the scores in
// x's, one term each, as mamba_ssm's Triton kernel casts them (no lo buffer, half the mma).
#include <algorithm>

#include "compiler/IntMath.h"
#include "kernels_dsl/Dsl.h"
#include "kernels_dsl/MetaDefaults.h"
#include "kernels_dsl/Registry.h"
#include "kernels_dsl/scan/ScanSequences.h"
#include "kernels_dsl/ssd/Ssd.h"
#include "kernels_dsl/ssd/SsdChunks.h"
#include "kernels_dsl/ssd/SsdDecayRing.h"

namespace ssmjit::kernels {
using namespace dsl;

namespace {

constexpr int64_t kStep = 32;    // states, then tokens, a step of the products
constexpr int kStages = 3;       // x's ring (16-bit x)
constexpr int kStateStages = 2;  // the entering state's ring (16-bit x)
// Row pitches of the state's [p, 32 states] and C.B's [rows, 32 tokens] tiles: f32 (16-byte rows
// for the copies; 8 words past 32, so that the four rows of a half-warp's 8-byte reads fall in
// distinct banks), and the state's bf16 hi and lo (an odd number of 16-byte units, for ldmatrix).
constexpr int64_t kStagePitchF32 = kStep + 8, kStagePitch16 = kStep + 8;

// 16-bit x, C and out: the staged operands are 16-bit and read by ldmatrix.
bool stagesHalves(const Specialization& s) { return ssdIs16Bit(s, "x") && ssdIs16Bit(s, "C") && ssdIs16Bit(s, "out"); }

void buildChunkScan(KernelBuilder& k, const Specialization& spec) {
  const int64_t Q = spec.get("meta:chunk"), T = kSsdTokenBlock, BP = spec.get("meta:BLOCK_P");
  const DType xT = ssdDtype(spec, "x");
  const bool halves = stagesHalves(spec);
  // A kept y (has_y) is the backward's input: its staged operands take three terms (f32
  // accuracy), since 16-bit staging's 2^-17 grows some tenfold in the sums of dA and ddt_bias.
  const bool keptY = spec.get("has_y") != 0;
  const bool oneTerm = ssdOneTerm(spec) && halves && !keptY;
  const int terms = oneTerm ? 1 : keptY ? 3 : 2;  // the 16-bit path's: the state's, the scores
  // 16-bit x: x's, z's, C.B's and the state's tiles copied whole, in 16-byte vectors spread over the
  // block (copyTileAsync), where the bindings prove them aligned; meta:tile_copy 0 copies them
  // in the layout's runs of a pair instead (4- and 8-byte copies, which made the L1 the bound).
  const bool tileCopy = halves && ssdTileCopy(spec);
  const int64_t xVec = tileCopy ? ssdTileVector(spec, "x", "s_x_p", {"s_x_b", "s_x_l", "s_x_h"}) : 0;
  const int64_t zVec = tileCopy ? ssdTileVector(spec, "z", "s_z_p", {"s_z_b", "s_z_l", "s_z_h"}) : 0;
  const int64_t cbVec = tileCopy ? ssdTileVector(spec, "ws", "", {"o_cb"}) : 0;
  const int64_t stVec = tileCopy ? ssdTileVector(spec, "ws", "", {"o_st", "N"}) : 0;
  // C staged with the state's tiles where it holds the state terms' dtype and its rows align.
  const DType cT = ssdDtype(spec, "C");
  // out stored whole from x's ring where it holds out's dtype (storeTile).
  const int64_t outVec =
      tileCopy && ssdDtype(spec, "out") == xT ? ssdTileVector(spec, "out", "s_o_p", {"s_o_b", "s_o_l", "s_o_h"}) : 0;
  const DType stT = oneTerm ? ssdDtype(spec, "C") : DType::BF16;  // the staged state's
  // Not with a kept y: its three terms' dots from shared memory spill 20 bytes.
  const int64_t cVec =
      stVec && cT == stT && !keptY ? ssdTileVector(spec, "C", "s_C_n", {"s_C_b", "s_C_l", "s_C_g"}) : 0;
  // On sm_90a (ssdWgmma) the products' staged b operands lie in swizzled buffers that wgmma reads
  // once a warpgroup: the state's terms and x's tiles (rows of BP, one pattern wide).
  const bool wgmma = halves && ssdWgmmaRows(spec, 2 * BP);
  // Row pitches: f32 rows padded by 4; 16-bit rows staged for the dots (ssdStagedRows).
  const SsdStagedRows xRows = ssdStagedRows(wgmma, BP), termRows = ssdStagedRows(wgmma, kStep);
  const int64_t LDs = halves ? xRows.pitch : BP + 4;
  const SsdValues a = ssdValues(k);
  Value nPb = cdiv(a.P, k.constInt(BP));
  const SsdSlotHeadBlock at = ssdSlotHeadBlock(k, spec, a.H, nPb * (Q / T));
  Value slot = at.slot, h = at.h, blk = at.blk;
  Value bm = blk / nPb, p0 = (blk % nPb) * BP;
  const SsdChunk ch = ssdChunkOfSlot(k, a, slot);
  k.returnIf(bm * T >= ch.n);
  Value zero = k.constFloat(0), zeroI = k.constInt(0), pitch = k.constInt(LDs), one = k.constInt(1);
  Value g = h / a.hpg;
  // f32: one buffer for both products. 16-bit: an f32 ring (the state's tiles, then C.B's), the
  // state's terms (one term: the state alone, in C's dtype), and x's ring.
  Value smem = halves ? Value{} : k.sharedBuffer(kStep * LDs);
  Value ring =
      halves ? k.sharedBuffer(std::max<int64_t>(kStateStages * BP, kStages * T) * kStagePitchF32, DType::F32) : Value{};
  // The state's terms, the state product's b: rows of 32 states.
  const int64_t termPitch = termRows.pitch, termStride = BP * termPitch;
  Value sTerms = halves ? k.sharedBuffer(terms * termStride, stT, termRows.swizzle) : Value{};
  Value xs = halves ? k.sharedBuffer(kStages * kStep * LDs, xT, xRows.swizzle) : smem;
  Value iR = bm * T + k.expandDims(k.range(T), 1);                                   // [T, 1]: rows of the chunk
  Value sC = k.expandDims(k.range(kStep), 0), sR = k.expandDims(k.range(kStep), 1);  // [1, 32], [32, 1]
  Value pC = p0 + k.expandDims(k.range(BP), 0), mP = pC < a.P;                       // [1, BP]
  Value sOff = sR * LDs + k.expandDims(k.range(BP), 0);                              // [32, BP] in a buffer
  Value mI = iR < ch.n;
  Value wsRow = (slot * a.H + h) * Q;
  Value cumI = k.load(a.ws, a.oCum + wsRow + iR);  // [T, 1]
  const int pc = oneTerm ? 1 : dotPieces(spec, "C"), px = dotPieces(spec, "x");

  // 16-bit x: its 32-token tiles (up to the block's last row) through a ring of kStages buffers,
  // copied asynchronously, the first ones while the state's product runs. Tile t + 2 goes into
  // the stage tile t - 1 left (every warp passed the barrier after reading it).
  Value jEnd = k.minimum(ch.n, (bm + 1) * T), tiles = halves ? cdiv(jEnd, k.constInt(kStep)) : Value{};
  auto xOffsets = [&](Value jR) { return ch.row * a.sXb + (ch.t0 + jR) * a.sXl + h * a.sXh + pC * a.sXp; };
  auto copyX = [&](Value t) {
    if (xVec) {
      Value j0 = t * kStep;
      k.copyTileAsync(xs, (t % kStages) * (kStep * LDs), LDs, a.x,
                      ch.row * a.sXb + (ch.t0 + j0) * a.sXl + h * a.sXh + p0, a.sXl, kStep, BP, ch.n - j0, a.P - p0,
                      xVec);
      return;
    }
    Value jR = t * kStep + sR;
    k.copyAsync(xs, (t % kStages) * (kStep * LDs) + sOff, a.x, xOffsets(jR), (jR < ch.n) && mP);
  };
  if (halves)
    k.forLoop(zeroI, k.constInt(kStages - 1), one, {}, [&](Value t, const std::vector<Value>&) {
      k.ifThen(t < tiles, [&] { copyX(t); });
      k.commitGroup();
      return std::vector<Value>{};
    });

  // exp(cum_i) C_i . S_in.
  Value stBase = a.oSt + (slot * a.H + h) * a.P * a.N;
  Value cBase = ch.row * a.sCb + (ch.t0 + iR) * a.sCl + g * a.sCg;
  auto cTile = [&](Value n0) {  // [T, 32]: C of the rows, states n0 ..
    Value nC = n0 + sC;
    return k.load(a.C, cBase + nC * a.sCn, mI && (nC < a.N), zero);
  };
  auto stateProduct = [&] {
    Value acc;
    if (!halves) {
      // S_in[p, n] staged as [n, p], f32.
      acc = k.forLoop(zeroI, a.N, k.constInt(kStep), {k.splat(zero, {T, BP})},
                      [&](Value n0, const std::vector<Value>& c) {
                        Value nR = n0 + sR;                                                       // [32, 1]
                        Value st = k.load(a.ws, stBase + pC * a.N + nR, (nR < a.N) && mP, zero);  // [32, BP]
                        k.barrier();
                        k.store(smem, sOff, st);
                        k.barrier();
                        return std::vector<Value>{k.dot(cTile(n0), smem, zeroI, pitch, one, c[0], pc, 3)};
                      })[0];
    } else {
      // S_in[p, n0 .. n0 + 32) copied asynchronously as it lies ([p, n], f32) through a ring of
      // two stages, the next tile in flight while one is split into its bf16 terms ([p, n]
      // buffers, read by ldmatrix with the states along k). The copies are committed after x's
      // first tiles, so waiting for all but the newest group finds tile s in place.
      const int64_t nSteps = cdiv(spec.get("N"), kStep);
      Value pR = k.expandDims(k.range(BP), 1), nCc = k.expandDims(k.range(kStep), 0);  // [BP, 1], [1, 32]
      Value fOff = pR * kStagePitchF32 + nCc, hOff = pR * termPitch + nCc;             // [BP, 32]
      // C's [T, 32] tiles (16-bit, the state terms' dtype) copied whole and read by ldmatrix
      // (loaded in the mma operand's layout they take 4-byte loads): two stages in the f32 ring's
      // rows that the state's two leave (C.B's third stage, not yet in use), a tile ahead. Tile s + 1
      // goes into the stage tile s - 1 left once every warp has passed step s's first barrier,
      // in a group of its own after the state tile s + 1's, so that step s + 1's wait finds it.
      const int64_t cStage = T * kStagePitch16;
      Value cs = cVec ? k.sharedView(ring, kStateStages * BP * kStagePitchF32, kStateStages * cStage, cT) : Value{};
      auto copyC = [&](Value s) {
        k.copyTileAsync(cs, (s % kStateStages) * cStage, kStagePitch16, a.C,
                        ch.row * a.sCb + (ch.t0 + bm * T) * a.sCl + g * a.sCg + s * kStep, a.sCl, T, kStep,
                        ch.n - bm * T, a.N - s * kStep, cVec);
      };
      auto copyS = [&](Value s) {
        if (stVec) {
          k.copyTileAsync(ring, (s % kStateStages) * (BP * kStagePitchF32), kStagePitchF32, a.ws,
                          stBase + p0 * a.N + s * kStep, a.N, BP, kStep, a.P - p0, a.N - s * kStep, stVec);
          return;
        }
        Value n = s * kStep + nCc, pG = p0 + pR;
        k.copyAsync(ring, (s % kStateStages) * (BP * kStagePitchF32) + fOff, a.ws, stBase + pG * a.N + n,
                    (n < a.N) && (pG < a.P));
      };
      for (int64_t s = 0; s < kStateStages; ++s) {
        if (s < nSteps) copyS(k.constInt(s));
        if (s == 0 && cVec) copyC(k.constInt(0));
        k.commitGroup();
      }
      Value pitch16 = k.constInt(kStagePitch16), tPitch = k.constInt(termPitch);
      acc = k.forLoop(
          zeroI, k.constInt(nSteps), one, {k.splat(zero, {T, BP})}, [&](Value s, const std::vector<Value>& c) {
            Value Ct = cVec ? Value{} : cTile(s * kStep);  // its loads overlap the wait
            k.waitGroup(1);
            k.barrier();
            if (cVec) {
              k.ifThen(s + 1 < nSteps, [&] { copyC(s + 1); });
              k.commitGroup();
            }
            Value st = k.load(ring, (s % kStateStages) * (BP * kStagePitchF32) + fOff);
            ssdStoreTerms(k, sTerms, hOff, termStride, terms, st);
            k.barrier(wgmma);  // stage s is read, the terms are written
            k.ifThen(s + kStateStages < nSteps, [&] { copyS(s + kStateStages); });
            k.commitGroup();
            if (!cVec) return std::vector<Value>{ssdDotTerms(k, Ct, sTerms, termStride, one, tPitch, c[0], terms, pc)};
            Value r = c[0];
            for (int q = 0; q < terms; ++q)
              r = k.dot(cs, (s % kStateStages) * cStage, pitch16, one, kStep, sTerms, k.constInt(q * termStride), one,
                        tPitch, r);
            return std::vector<Value>{r};
          })[0];
      // C's stages become C.B's third, which the first causal step copies into.
      if (cVec) k.barrier();
    }
    return acc;
  };
  // A sequence's first chunk enters from zeros where the call has no initial states: its rows
  // skip the product (a uniform branch; the state's copy groups it leaves out are older than
  // every group the token steps wait for).
  Value fromZero = !a.hasInit && (ch.t0 == scanSequence(k, a.hasCu, a.cu, a.sCu, a.L, a.nseq, ch.seq).start);
  Value acc = k.ifElse(
      fromZero,
      [&] {
        return std::vector<Value>{k.splat(zero, {T, BP})};
      },
      [&] { return std::vector<Value>{stateProduct()}; })[0];
  acc = acc * k.exp(cumI);

  // The chunk's own tokens j <= i: CB_ij exp(cum_i - cum_j) dt'_j times x_j.
  Value cbRow = a.oCb + ((slot * (a.H / a.hpg) + g) * Q + iR) * Q;
  // z of the rows (16-bit, as x): copied in the last step into the two stages of x's ring that
  // step leaves free (those of tiles t - 1 and t - 2, read before the barriers that ended their
  // steps; no tile t + 1 or t + 2 is copied), so that its read overlaps the last product.
  const bool zStaged = halves && spec.get("dtype:z") == static_cast<int64_t>(xT);
  Value rT = k.expandDims(k.range(T), 1);  // [T, 1]
  // [T, BP]: row r of a block in x's ring, its tile (rowTile [T, 1]) at stage rowTile % 3.
  auto ringRows = [&](Value rowTile) {
    return (rowTile % kStages) * (kStep * LDs) + (rT % kStep) * LDs + k.expandDims(k.range(BP), 0);
  };
  auto zOff = [&] { return ringRows(tiles + rT / kStep); };  // z's rows in the stages after the last tile
  auto zG = [&] { return ch.row * a.sZb + (ch.t0 + iR) * a.sZl + h * a.sZh + pC * a.sZp; };
  auto copyZ = [&] {
    if (!zVec) return k.copyAsync(xs, zOff(), a.z, zG(), mI && mP);
    for (int64_t q = 0; q < T / kStep; ++q) {  // rows q 32 .. of the block into stage (tiles + q) % 3
      Value r0 = bm * T + q * kStep;
      k.copyTileAsync(xs, ((tiles + q) % kStages) * (kStep * LDs), LDs, a.z,
                      ch.row * a.sZb + (ch.t0 + r0) * a.sZl + h * a.sZh + p0, a.sZl, kStep, BP, ch.n - r0, a.P - p0,
                      zVec);
    }
  };
  auto decay = [&](Value j0) {  // [1, 32]: dt'_j of tokens j0 .. and their cumsums
    Value jC = j0 + sC;
    return std::vector<Value>{k.load(a.ws, a.oDt + wsRow + jC), k.load(a.ws, a.oCum + wsRow + jC)};
  };
  // [T, 32], decayed and masked. The mask only where a tile reaches the block's first row or the
  // chunk's end (a uniform branch): the tiles below the diagonal skip its compares and selects.
  // A head's D (D of shape (H,)) joins the scores' diagonal, D x_i as the product's term j = i:
  // no pass over x's rows after the loop (with z they are no longer in x's ring).
  const bool dOnDiagonal = spec.get("has_D") != 0 && spec.find("s_D_p") && spec.get("s_D_p") == 0;
  Value dHead = dOnDiagonal ? k.load(a.Dv, h * a.sDh) : Value{};
  auto scores = [&](Value j0, Value cb, const std::vector<Value>& d) {
    Value w = cb * ssdDecay(k, cumI, d[1]) * d[0];
    return k.ifElse((j0 + kStep <= bm * T) && (j0 + kStep <= ch.n), [&] { return std::vector<Value>{w}; },
                    [&] {
                      Value jC = j0 + sC;
                      Value keep = (jC <= iR) && (jC < ch.n);  // blocks above the diagonal are never written
                      Value s = k.select(keep, w, zero);
                      if (dOnDiagonal) s = k.select(jC == iR, s + dHead, s);
                      return std::vector<Value>{s};
                    })[0];
  };
  if (!halves) {
    acc = k.forLoop(zeroI, jEnd, k.constInt(kStep), {acc}, [&](Value j0, const std::vector<Value>& c) {
      Value jR = j0 + sR;                                             // [32, 1]
      Value xt = k.load(a.x, xOffsets(jR), (jR < ch.n) && mP, zero);  // [32, BP]
      k.barrier();
      k.store(xs, sOff, xt);
      k.barrier();
      Value cb = k.load(a.ws, cbRow + j0 + sC);
      Value w = scores(j0, cb, decay(j0));
      return std::vector<Value>{k.dot(w, xs, zeroI, pitch, one, c[0], 3, px)};
    })[0];
  } else {
    // C.B's [T, 32] tiles join x's through the f32 ring, which the state's product has left
    // (every warp passed the barrier after its last read): tiles 0 and 1 now, tile t + 2 with
    // x's. Waiting for all but the newest two groups finds tile t's x and C.B in place.
    const SsdDecayRing decays(k, spec, a, wsRow, kStages, kStep);  // dt' and the cumsums, with C.B's tiles
    auto copyCB = [&](Value t) {
      decays.copy(t);
      if (cbVec)
        return k.copyTileAsync(ring, (t % kStages) * (T * kStagePitchF32), kStagePitchF32, a.ws,
                               a.oCb + ((slot * (a.H / a.hpg) + g) * Q + bm * T) * Q + t * kStep, k.constInt(Q), T,
                               kStep, k.constInt(T), k.constInt(kStep), cbVec);
      k.copyAsync(ring, (t % kStages) * (T * kStagePitchF32) + rT * kStagePitchF32 + sC, a.ws, cbRow + t * kStep + sC);
    };
    for (int64_t t = 0; t < kStages - 1; ++t) {
      k.ifThen(k.constInt(t) < tiles, [&] { copyCB(k.constInt(t)); });
      k.commitGroup();
    }
    // One step of the product; the last one (peeled, so that z's offsets are not live across
    // the loop) copies z instead of a next tile.
    auto step = [&](Value t, Value c, bool last) {
      if (!last) {
        Value next = t + (kStages - 1);
        k.ifThen(next < tiles, [&] {
          copyX(next);
          copyCB(next);
        });
      } else if (zStaged) {
        k.ifThen(a.hasZ, [&] { copyZ(); });
      }
      k.commitGroup();
      std::vector<Value> d = decays.staged() ? std::vector<Value>{} : decay(t * kStep);  // its loads overlap the wait
      k.waitGroup(kStages - 1);
      k.barrier(wgmma);
      if (decays.staged()) d = {decays.dt(t), decays.cum(t)};
      Value cb = k.load(ring, (t % kStages) * (T * kStagePitchF32) + rT * kStagePitchF32 + sC);
      Value r = k.dot(scores(t * kStep, cb, d), xs, (t % kStages) * (kStep * LDs), pitch, one, c, terms, 1);
      k.barrier();
      return r;
    };
    Value lastT = tiles - 1;
    acc = k.forLoop(zeroI, lastT, one, {acc},
                    [&](Value t, const std::vector<Value>& c) { return std::vector<Value>{step(t, c[0], false)}; })[0];
    acc = step(lastT, acc, true);
  }

  Value xOff = xOffsets(iR);
  Value mOut = mI && mP;
  // x of the rows for D: 16-bit x's last two tiles are the block's own rows, still in the ring
  // unless z was staged over one of them; else from memory (in the accumulator's layout, whose
  // 4-byte accesses use half of each sector).
  auto xOfRows = [&] {
    auto fromMemory = [&] { return std::vector<Value>{k.load(a.x, xOff, mOut, zero)}; };
    if (!halves) return fromMemory()[0];
    Value inRing = k.load(xs, ringRows((bm * T + rT) / kStep));
    if (!zStaged) return inRing;
    return k.ifElse(a.hasZ, fromMemory, [&] { return std::vector<Value>{inRing}; })[0];
  };
  Value y =
      dOnDiagonal
          ? acc
          : k.ifElse(
                a.hasD,
                [&] { return std::vector<Value>{acc + k.load(a.Dv, h * a.sDh + pC * a.sDp, mP, zero) * xOfRows()}; },
                [&] { return std::vector<Value>{acc}; })[0];
  k.ifThen(a.hasY, [&] { k.store(a.y, ch.row * a.sYb + (ch.t0 + iR) * a.sYl + h * a.sYh + pC * a.sYp, y, mOut); });
  y = k.ifElse(
      a.hasZ,
      [&] {
        if (!zStaged) return std::vector<Value>{y * silu(k.load(a.z, zG(), mOut, zero))};
        k.waitGroup(0);
        k.barrier();
        return std::vector<Value>{y * silu(k.load(xs, zOff()))};
      },
      [&] { return std::vector<Value>{y}; })[0];
  if (!outVec) {
    k.store(a.out, ch.row * a.sOb + (ch.t0 + iR) * a.sOl + h * a.sOh + pC * a.sOp, y, mOut);
    return;
  }
  // Through x's ring, whose reads (D x, z) every warp has passed: the accumulators' layout writes
  // 4-byte pairs, half a sector each, where storeTile writes 16-byte vectors of whole rows.
  k.barrier();
  k.store(xs, rT * LDs + k.expandDims(k.range(BP), 0), y);
  k.barrier();
  k.storeTile(xs, zeroI, LDs, a.out, ch.row * a.sOb + (ch.t0 + bm * T) * a.sOl + h * a.sOh + p0, a.sOl, T, BP,
              ch.n - bm * T, a.P - p0, outVec);
}

// 16-bit inputs: 4 blocks an SM (128 registers) where ptxas would take more and fit 3; though it
// may spill a word, the forward runs faster so (docs/performance.md).
void chooseChunkScanMeta(Specialization& s) {
  ssdDefaultMeta(s);
  ssdSlotHeadMeta(s);
  setDefault(s, "meta:BLOCK_P", std::clamp<int64_t>(nextPow2(s.get("P")), 32, 64));
  if (stagesHalves(s)) setDefault(s, "meta:min_blocks", 4);
}

}  // namespace

const KernelRegistration kChunkScan(__FILE__,
                                    {kSsdChunkScan.kernel, buildChunkScan, chooseChunkScanMeta, &kSsdChunkScan});

}  // namespace ssmjit::kernels
