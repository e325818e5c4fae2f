// ssd_chunk_state (Ssd.h): the state a chunk leaves from a zero start,
//   S[p, n] = sum_t x_t[p] (B_t[n] dt'_t exp(cum_last - cum_t)),
// per (slot, head, block of p x n), on the tensor cores, 32 tokens a step, zeros past the chunk's
// tokens. bf16 B (BLOCK_P 64) is copied raw through a cp.async ring and read by ldmatrix, the
// token weights going onto a: x^T [BLOCK_P, 32], copied through a ring of its own and read
// transposed from it, scaled per token in f32 (the weights' dt' and cumsums staged too:
// SsdDecayRing.h), three bf16 terms (every product exact).
// Otherwise x^T comes from memory into registers (its dtype's exact terms) and the weighted B
// [32, BLOCK_N] is computed in f32 and staged, three terms. fp32 to the workspace.
// meta:one_term 1 (16-bit x; SsdChunks.h): the weighted operand (x w, or B w) in one bf16 term,
// as mamba_ssm's Triton kernel casts B w to x's dtype.
// pass_states (Ssd.h): the state entering the chunk is passed along a chain of programs, so the
// chunks' states from zero never reach memory and no state_passing pass reads them back. A
// sequence's last chunk past its first then runs only for final or block states.
#include <algorithm>

#include "compiler/IntMath.h"
#include "kernels_dsl/Dsl.h"
#include "kernels_dsl/Registry.h"
#include "kernels_dsl/scan/ScanSequences.h"
#include "kernels_dsl/ssd/Ssd.h"
#include "kernels_dsl/ssd/SsdChunks.h"
#include "kernels_dsl/ssd/SsdDecayRing.h"
#include "kernels_dsl/ssd/SsdStateOutputs.h"

namespace ssmjit::kernels {
using namespace dsl;

namespace {

constexpr int64_t kTokens = 32;  // tokens a step of the product
constexpr int kStages = 3;       // B's and x's rings (bf16 B)

// pass_states: the state entering this chunk (the sequence's initial state, or the one the
// program of its previous chunk wrote to this slot, once that program sets its flag), times the
// chunk's decay, plus the chunk's own state `acc`: the state entering the next chunk, written to
// its slot before this program sets its flag, or the sequence's final state. As state_passing
// computes it (the same operations in the same order), with the same block and final states.
void passState(KernelBuilder& k, const SsdValues& a, int64_t Q, const SsdChunk& ch, const SsdSlotHeadBlock& at,
               const SsdStateElems& e, Value acc) {
  const ScanSequence seq = scanSequence(k, a.hasCu, a.cu, a.sCu, a.L, a.nseq, ch.seq);
  Value len = seq.end - seq.start, c = (ch.t0 - seq.start) / Q, i = ch.seq;
  Value reporter = at.h + at.blk;  // 0 in exactly one program of the chunk
  auto flagAt = [&](Value slot) { return ssdChainFlag(k, a.oFlags, a.P, a.N, a.H, slot, at.h, at.blk); };
  auto stateAt = [&](Value slot) { return a.oSt + ((slot * a.H + at.h) * a.P + e.p) * a.N + e.n; };
  Value in = k.ifElse(
      c == 0,
      [&] {
        Value s0 = ssdInitialState(k, a, e, i, reporter);
        ssdCheckBlockCount(k, a, i, len, reporter);
        k.store(a.ws, stateAt(at.slot), s0, e.m);
        return std::vector<Value>{s0};
      },
      [&] {
        // The previous slot holds the previous chunk unless cu_seqlens is bad (reported by
        // chunk_cumsum): then nothing is awaited, so a bad call cannot hang.
        const SsdChunk prev = ssdChunkOfSlot(k, a, at.slot - 1);
        k.ifThen(ssdChunkFollows(prev, ch, Q), [&] { k.waitFlag(a.ws, flagAt(at.slot - 1)); });
        return std::vector<Value>{k.load(a.ws, stateAt(at.slot), e.m, k.constFloat(0))};
      })[0];
  Value la = k.load(a.ws, ssdChunkLogDecayAt(a.oCum, at.slot, a.H, at.h, Q));
  Value next = k.exp(la) * in + acc;
  Value last = ch.t0 + ch.n >= seq.end;
  k.ifThen(!last, [&] {
    k.store(a.ws, stateAt(at.slot + 1), next, e.m);
    k.setFlag(a.ws, flagAt(at.slot));
  });
  ssdStoreBlockState(k, a, e, i, c, len, Q, reporter, next);
  k.ifThen(last, [&] { ssdStoreFinalState(k, a, e, i, reporter, next); });
}

void buildChunkState(KernelBuilder& k, const Specialization& spec) {
  const int64_t Q = spec.get("meta:chunk"), BP = spec.get("meta:BLOCK_P"), BN = spec.get("meta:BLOCK_N");
  // bf16 B at BLOCK_P 64 (at 32 the ring's loop spills registers under ptxas).
  const bool rawB = static_cast<DType>(spec.get("dtype:B")) == DType::BF16 && BP == 64;
  // B's ring, the dot's b: on wgmma where its rows fit a swizzle (BLOCK_N up to 64, ssdWgmmaRows).
  // Row pitches: f32 rows padded by 4; bf16 rows staged for the dot (ssdStagedRows).
  const bool wgmma = rawB && ssdWgmmaRows(spec, 2 * BN);
  const SsdStagedRows bRows = ssdStagedRows(wgmma, BN);
  const int64_t LDs = rawB ? bRows.pitch : BN + 4;
  const SsdValues a = ssdValues(k);
  Value nBlocks = cdiv(a.N, k.constInt(BN)), blocks = cdiv(a.P, k.constInt(BP)) * nBlocks;
  // Passing the states itself, a program takes its (slot, head, block) by ticket: the program of
  // a sequence's previous chunk then took a lower one and is running or done.
  const bool chain = spec.get("pass_states") != 0;
  const SsdSlotHeadBlock at =
      chain ? ssdSlotHeadBlockAt(k.ticket(a.ws, a.oFlags), a.H, blocks) : ssdSlotHeadBlock(k, spec, a.H, blocks);
  Value slot = at.slot, h = at.h, blk = at.blk;
  Value p0 = (blk / nBlocks) * BP, n0 = (blk % nBlocks) * BN;
  const SsdChunk ch = ssdChunkOfSlot(k, a, slot);
  k.returnIf(ch.n == 0);
  if (chain) {
    // A sequence's last chunk, past its first, leaves only its final state: without final or
    // block states nothing reads what its program would compute (its entering state is the
    // previous program's to write).
    const ScanSequence seq = scanSequence(k, a.hasCu, a.cu, a.sCu, a.L, a.nseq, ch.seq);
    k.returnIf(!a.hasFinal && !a.hasBlk && (ch.t0 + ch.n >= seq.end) && (ch.t0 > seq.start));
  }
  Value zero = k.constFloat(0), zeroI = k.constInt(0);
  Value g = h / a.hpg;
  const DType xDt = static_cast<DType>(spec.get("dtype:x"));
  const int64_t LDx = BP + (xDt == DType::F32 ? 4 : 8);  // x's ring rows: 16-byte units, odd for 16 bits
  // The weighted operand's terms (x w on the ring's path, B w otherwise).
  const int wPieces = ssdOneTerm(spec) && xDt != DType::F32 ? 1 : 3;
  Value smem =
      rawB ? k.sharedBuffer(kStages * kTokens * LDs, DType::BF16, bRows.swizzle) : k.sharedBuffer(kTokens * LDs);
  Value xs = rawB ? k.sharedBuffer(kStages * kTokens * LDx, xDt) : Value{};
  Value tR = k.expandDims(k.range(kTokens), 1), tC = k.expandDims(k.range(kTokens), 0);  // [32, 1], [1, 32]
  Value p = p0 + k.expandDims(k.range(BP), 1), n = n0 + k.expandDims(k.range(BN), 0);    // [BP, 1], [1, BN]
  Value wsRow = (slot * a.H + h) * Q;
  Value cumLast = k.load(a.ws, a.oCum + wsRow + ch.n - 1);
  const int px = dotPieces(spec, "x");
  // dt'_t exp(cum_last - cum_t) of the tokens t (0 past the chunk).
  auto weight = [&](Value t) {
    Value mt = t < ch.n;
    Value w = k.load(a.ws, a.oDt + wsRow + t, mt, zero) * k.exp(cumLast - k.load(a.ws, a.oCum + wsRow + t, mt, zero));
    return k.select(mt, w, zero);
  };
  auto xT = [&](Value tx) {  // [BP, 32]: x^T of tokens tx (0 past the chunk)
    return k.load(a.x, ch.row * a.sXb + (ch.t0 + tx) * a.sXl + h * a.sXh + p * a.sXp, (tx < ch.n) && (p < a.P), zero);
  };
  auto bOffsets = [&](Value t) { return ch.row * a.sBb + (ch.t0 + t) * a.sBl + g * a.sBg + n * a.sBn; };
  Value sOff = tR * LDs + k.expandDims(k.range(BN), 0);  // [32, BN] in a buffer
  Value acc;
  if (!rawB) {
    acc = k.forLoop(
        zeroI, ch.n, k.constInt(kTokens), {k.splat(zero, {BP, BN})}, [&](Value j0, const std::vector<Value>& c) {
          Value t = j0 + tR;
          Value Bt = k.load(a.B, bOffsets(t), (t < ch.n) && (n < a.N), zero);  // [32, BN]
          k.barrier();  // the previous step's dot has read the buffer
          k.store(smem, sOff, Bt * weight(t));
          k.barrier();
          return std::vector<Value>{k.dot(xT(j0 + tC), smem, zeroI, k.constInt(LDs), k.constInt(1), c[0], px, wPieces)};
        })[0];
  } else {
    // B's and x's 32-token tiles through rings of kStages buffers, copied asynchronously as they
    // lie: tile t + 2 goes into the stage tile t - 1 left (every warp passed the barrier after
    // reading it). x^T is read from its stage into registers and scaled there.
    Value tiles = cdiv(ch.n, k.constInt(kTokens)), one = k.constInt(1);
    Value pRow = k.expandDims(k.range(BP), 0);                                      // [1, BP]
    Value xOff = tR * LDx + pRow, xTOff = tC * LDx + k.expandDims(k.range(BP), 1);  // [32, BP], [BP, 32]
    // Whole tiles in 16-byte vectors spread over the block where the bindings prove them aligned
    // (ssdTileCopy); otherwise in the layout's runs.
    const bool tileCopy = ssdTileCopy(spec);
    const int64_t bVec = tileCopy ? ssdTileVector(spec, "B", "s_B_n", {"s_B_b", "s_B_l", "s_B_g"}) : 0;
    const int64_t xVec = tileCopy ? ssdTileVector(spec, "x", "s_x_p", {"s_x_b", "s_x_l", "s_x_h"}) : 0;
    const SsdDecayRing decays(k, spec, a, wsRow, kStages, kTokens);  // dt' and the cumsums, with B's and x's tiles
    // The tile's weights from the ring (0 past the chunk, as weight()).
    auto ringWeight = [&](Value s) {
      Value t = s * kTokens + tC, mt = t < ch.n;
      return k.select(mt, decays.dt(s) * k.exp(cumLast - decays.cum(s)), zero);
    };
    auto copyB = [&](Value s) {
      decays.copy(s);
      Value j0 = s * kTokens;
      if (bVec && xVec) {
        k.copyTileAsync(smem, (s % kStages) * (kTokens * LDs), LDs, a.B,
                        ch.row * a.sBb + (ch.t0 + j0) * a.sBl + g * a.sBg + n0, a.sBl, kTokens, BN, ch.n - j0, a.N - n0,
                        bVec);
        k.copyTileAsync(xs, (s % kStages) * (kTokens * LDx), LDx, a.x,
                        ch.row * a.sXb + (ch.t0 + j0) * a.sXl + h * a.sXh + p0, a.sXl, kTokens, BP, ch.n - j0, a.P - p0,
                        xVec);
        return;
      }
      Value t = j0 + tR;
      k.copyAsync(smem, (s % kStages) * (kTokens * LDs) + sOff, a.B, bOffsets(t), (t < ch.n) && (n < a.N));
      Value pc = p0 + pRow;
      k.copyAsync(xs, (s % kStages) * (kTokens * LDx) + xOff, a.x,
                  ch.row * a.sXb + (ch.t0 + t) * a.sXl + h * a.sXh + pc * a.sXp, (t < ch.n) && (pc < a.P));
    };
    k.forLoop(zeroI, k.constInt(kStages - 1), one, {}, [&](Value s, const std::vector<Value>&) {
      k.ifThen(s < tiles, [&] { copyB(s); });
      k.commitGroup();
      return std::vector<Value>{};
    });
    acc = k.forLoop(zeroI, tiles, one, {k.splat(zero, {BP, BN})}, [&](Value s, const std::vector<Value>& c) {
      Value next = s + (kStages - 1);
      k.ifThen(next < tiles, [&] { copyB(next); });
      k.commitGroup();
      Value w = decays.staged() ? Value{} : weight(s * kTokens + tC);  // its loads overlap the wait
      k.waitGroup(kStages - 1);
      k.barrier(wgmma);
      if (decays.staged()) w = ringWeight(s);
      Value xw = k.load(xs, (s % kStages) * (kTokens * LDx) + xTOff) * w;
      Value r = k.dot(xw, smem, (s % kStages) * (kTokens * LDs), k.constInt(LDs), one, c[0], wPieces, 1);
      k.barrier();
      return std::vector<Value>{r};
    })[0];
  }
  if (chain)
    passState(k, a, Q, ch, at, {h, p, n, (p < a.P) && (n < a.N)}, acc);
  else
    k.store(a.ws, a.oSt + ((slot * a.H + h) * a.P + p) * a.N + n, acc, (p < a.P) && (n < a.N));
}

void chooseChunkStateMeta(Specialization& s) {
  // bf16 x: a block takes up to 128 states (126 registers, 39.9 KB of shared memory at Mamba-2
  // heads), so that x's tile is read and split once for all of them (5% off the forward at
  // Mamba-2 heads: docs/performance.md). fp16 and fp32 x weight B instead (unmeasured at 128).
  if (static_cast<DType>(s.get("dtype:x")) == DType::BF16 && !s.find("meta:BLOCK_N"))
    s.set("meta:BLOCK_N", std::clamp<int64_t>(nextPow2(s.get("N")), 16, 128));
  ssdStateBlockMeta(s);
  ssdSlotHeadMeta(s);
  if (s.get("pass_states", 0) != 0) ssdCheckChainMeta(s);
}

}  // namespace

const KernelRegistration kChunkState(__FILE__,
                                     {kSsdChunkState.kernel, buildChunkState, chooseChunkStateMeta, &kSsdChunkState});

}  // namespace ssmjit::kernels
