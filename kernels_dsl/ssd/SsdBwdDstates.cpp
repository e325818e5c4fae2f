// ssd_bwd_dstates (SsdBackward.h): the gradient a chunk's own outputs give the state entering it,
//   local[p, n] = sum_i exp(cum_i) dy_i[p] C_i[n],
// per (slot, head, block of p x n), on the tensor cores as ssd_chunk_state: the scaled dy^T
// [BLOCK_P, 32 tokens] in registers (fp32: meta:pieces terms), C [32 tokens, BLOCK_N] staged through
// shared memory (zeros past the chunk's tokens). In fp32, then passed back along the chain of the
// sequence's chunks (passGradient), so the local gradients never reach memory.
// With 16-bit C, dout and z whose rows the bindings prove aligned, their tiles arrive through
// cp.async rings two steps ahead of their use, C read by ldmatrix.
#include <algorithm>
#include <vector>

#include "compiler/IntMath.h"
#include "kernels_dsl/Dsl.h"
#include "kernels_dsl/Registry.h"
#include "kernels_dsl/conv/ConvTiles.h"
#include "kernels_dsl/scan/ScanSequences.h"
#include "kernels_dsl/ssd/SsdBackward.h"
#include "kernels_dsl/ssd/SsdChunks.h"
#include "kernels_dsl/ssd/SsdDecayRing.h"

namespace ssmjit::kernels {
using namespace dsl;

namespace {

constexpr int64_t kTokens = 32;  // tokens a step of the product
constexpr int kStages = 3;       // the rings' (16-bit C, dout and z)

// The states' gradients passed back along the chain (SsdBackward.h): chunk c's program takes
// g_{c+1} (d(final state) in the sequence's last chunk, else what chunk c + 1's program wrote to
// this slot of the g plane once it set its flag), writes its share of the pass plane, and hands
// g_c = local + exp(cum_last) g_{c+1} to chunk c - 1's slot, or to d(initial state).
void passGradient(KernelBuilder& k, const SsdBwdValues& a, int64_t Q, const SsdChunk& ch, const SsdSlotHeadBlock& at,
                  Value blocks, Value p, Value n, Value m, Value local) {
  auto v = [&](const char* name) { return k.arg(name); };
  Value zero = k.constFloat(0), err = v("err");
  const ScanSequence seq = scanSequence(k, v("has_cu"), v("cu"), v("s_cu"), a.L, v("nseq"), ch.seq);
  Value i = ch.seq, c = (ch.t0 - seq.start) / Q, last = ch.t0 + ch.n >= seq.end;
  Value reporter = at.h + at.blk;  // 0 in exactly one program of the chunk
  auto flagAt = [&](Value slot) { return ssdChainFlag(k, v("o_flags"), a.P, a.N, a.H, slot, at.h, at.blk); };
  auto gAt = [&](Value slot) { return a.oG + ((slot * a.H + at.h) * a.P + p) * a.N + n; };
  Value gNext = k.ifElse(
      last,
      [&] {
        Value slotOut = k.ifElse(
            v("has_dfinal"),
            [&] {
              return std::vector<Value>{checkedSlot(k, v("has_final_idx"), v("final_idx"), v("s_final_idx"),
                                                    v("nslots_final"), i, reporter, err, kErrSsdFinalSlot)};
            },
            [&] { return std::vector<Value>{k.constInt(-1)}; })[0];
        Value g0 =
            k.load(v("dfinal"),
                   slotOut * v("s_dfinal_slot") + at.h * v("s_dfinal_h") + p * v("s_dfinal_p") + n * v("s_dfinal_n"),
                   m && (slotOut >= 0), zero);
        k.store(a.ws, gAt(at.slot), g0, m);
        return std::vector<Value>{g0};
      },
      [&] {
        // The next slot holds the next chunk unless cu_seqlens is bad (reported by the forward's
        // chunk_cumsum): then nothing is awaited, so a bad call cannot hang.
        const SsdChunk next = ssdChunkOfSlot(k, a, at.slot + 1);
        k.ifThen((next.seq == ch.seq) && (next.n > 0) && (next.t0 == ch.t0 + Q),
                 [&] { k.waitFlag(a.ws, flagAt(at.slot + 1)); });
        return std::vector<Value>{k.load(a.ws, gAt(at.slot), m, zero)};
      })[0];
  Value decay = k.exp(k.load(a.ws, ssdChunkLogDecayAt(a.oCum, at.slot, a.H, at.h, Q)));
  Value sIn = k.load(a.ws, a.oSt + ((at.slot * a.H + at.h) * a.P + p) * a.N + n, m, zero);
  k.store(a.ws, a.oPn + (at.slot * a.H + at.h) * blocks + at.blk,
          k.reduce(k.reduce(decay * sIn * gNext, 1, "sum"), 0, "sum"));
  Value g = local + decay * gNext;
  k.ifElse(
      c > 0,
      [&] {
        k.store(a.ws, gAt(at.slot - 1), g, m);
        k.setFlag(a.ws, flagAt(at.slot));
        return std::vector<Value>{};
      },
      [&] {
        k.ifThen(v("has_dinit"), [&] {
          Value slotIn = checkedSlot(k, v("has_init_idx"), v("init_idx"), v("s_init_idx"), v("nslots_init"), i,
                                     reporter, err, kErrSsdInitSlot);
          k.store(v("dinit"),
                  slotIn * v("s_dinit_slot") + at.h * v("s_dinit_h") + p * v("s_dinit_p") + n * v("s_dinit_n"), g,
                  m && (slotIn >= 0));
        });
        return std::vector<Value>{};
      });
}

void buildDstates(KernelBuilder& k, const Specialization& spec) {
  const int64_t Q = spec.get("meta:chunk"), BP = spec.get("meta:BLOCK_P"), BN = spec.get("meta:BLOCK_N");
  const SsdBwdValues a = ssdBwdValues(k);
  Value nBlocks = cdiv(a.N, k.constInt(BN)), blocks = cdiv(a.P, k.constInt(BP)) * nBlocks;
  // Programs take their (slot, head, block) by ticket, last slot first: the program of a
  // sequence's next chunk then took a lower ticket and is running or done.
  SsdSlotHeadBlock at = ssdSlotHeadBlockAt(k.ticket(a.ws, k.arg("o_flags")), a.H, blocks);
  at.slot = a.slots - 1 - at.slot;
  Value slot = at.slot, h = at.h, blk = at.blk;
  Value p0 = (blk / nBlocks) * BP, n0 = (blk % nBlocks) * BN;
  const SsdChunk ch = ssdChunkOfSlot(k, a, slot);
  k.returnIf(ch.n == 0);
  Value zero = k.constFloat(0), zeroI = k.constInt(0), one = k.constInt(1);
  Value g = h / a.hpg;
  Value tR = k.expandDims(k.range(kTokens), 1), tC = k.expandDims(k.range(kTokens), 0);  // [32, 1], [1, 32]
  Value p = p0 + k.expandDims(k.range(BP), 1), n = n0 + k.expandDims(k.range(BN), 0);    // [BP, 1], [1, BN]
  Value wsRow = (slot * a.H + h) * Q;
  const int pc = dotPieces(spec, "C"), pf = ssdBwdPieces(spec);
  const bool rings = ssdIs16Bit(spec, "C") && ssdBwdDyRings(spec);
  const int64_t cVec = rings ? ssdTileVector(spec, "C", "s_C_n", {"s_C_b", "s_C_l", "s_C_g"}) : 0;
  const SsdDyVectors dyVec = rings ? ssdBwdDyVectors(spec) : SsdDyVectors{};
  Value acc;
  if (cVec && dyVec.dout && dyVec.z) {
    // C's [32 tokens, BN] and dout's and z's [32 tokens, BP] tiles through three-stage rings, C read
    // by ldmatrix, dy^T from the stages into registers.
    const int64_t cPitch = BN + 8, yPitch = BP + 8, cStage = kTokens * cPitch, yStage = kTokens * yPitch;
    Value cs = k.sharedBuffer(kStages * cStage, ssdDtype(spec, "C"));
    Value os = k.sharedBuffer(kStages * yStage, ssdDtype(spec, "dout")), zs = ssdBwdZRing(k, spec, kStages * yStage);
    Value tiles = cdiv(ch.n, k.constInt(kTokens));
    const SsdDecayRing decays(k, spec, a, wsRow, kStages, kTokens);  // the cumsums, with C's and dy's tiles
    auto copy = [&](Value u) {
      decays.copy(u);
      Value t0 = u * kTokens, st = u % kStages, rows = ch.n - t0;
      k.copyTileAsync(cs, st * cStage, cPitch, a.C, ch.row * a.sCb + (ch.t0 + t0) * a.sCl + g * a.sCg + n0, a.sCl,
                      kTokens, BN, rows, a.N - n0, cVec);
      ssdCopyDyTiles(k, a, os, zs, st * yStage, yPitch, ch.row, ch.t0 + t0, h, p0, kTokens, BP, rows, a.P - p0, dyVec);
    };
    for (int64_t u = 0; u < kStages - 1; ++u) {
      k.ifThen(k.constInt(u) < tiles, [&] { copy(k.constInt(u)); });
      k.commitGroup();
    }
    Value yOff = tC * yPitch + k.expandDims(k.range(BP), 1);  // [BP, 32]: dy^T in a stage
    acc = k.forLoop(zeroI, tiles, one, {k.splat(zero, {BP, BN})}, [&](Value u, const std::vector<Value>& c) {
      Value next = u + (kStages - 1);
      k.ifThen(next < tiles, [&] { copy(next); });
      k.commitGroup();
      Value tx = u * kTokens + tC;
      Value w =
          decays.staged() ? Value{} : k.exp(k.load(a.ws, a.oCum + wsRow + tx, tx < ch.n, zero));  // overlaps the wait
      k.waitGroup(kStages - 1);
      k.barrier();
      if (decays.staged()) w = k.exp(k.select(tx < ch.n, decays.cum(u), zero));
      Value st = u % kStages;
      Value dy = ssdGateDy(k, a, k.load(os, st * yStage + yOff), [&] { return k.load(zs, st * yStage + yOff); });
      Value r = k.dot(dy * w, cs, st * cStage, k.constInt(cPitch), one, c[0], pf, 1);
      k.barrier();  // stage u is read before step u + 1 copies into it
      return std::vector<Value>{r};
    })[0];
  } else {
    const int64_t LDs = BN + 4;
    Value smem = k.sharedBuffer(kTokens * LDs);
    acc = k.forLoop(
        zeroI, ch.n, k.constInt(kTokens), {k.splat(zero, {BP, BN})}, [&](Value j0, const std::vector<Value>& c) {
          Value t = j0 + tR, mt = t < ch.n;
          Value Ct = k.load(a.C, ch.row * a.sCb + (ch.t0 + t) * a.sCl + g * a.sCg + n * a.sCn, mt && (n < a.N),
                            zero);  // [32, BN]
          k.barrier();              // the previous step's dot has read the buffer
          k.store(smem, tR * LDs + k.expandDims(k.range(BN), 0), Ct);
          k.barrier();
          Value tx = j0 + tC, mx = (tx < ch.n) && (p < a.P);
          Value dy = ssdBwdDy(k, a, ch.row, ch.t0 + tx, h, p, mx);  // [BP, 32]
          Value w = k.exp(k.load(a.ws, a.oCum + wsRow + tx, tx < ch.n, zero));
          return std::vector<Value>{k.dot(dy * w, smem, zeroI, k.constInt(LDs), k.constInt(1), c[0], pf, pc)};
        })[0];
  }
  passGradient(k, a, Q, ch, at, blocks, p, n, (p < a.P) && (n < a.N), acc);
}

void chooseDstatesMeta(Specialization& s) {
  // bf16 dout: a block takes up to 128 states, so that the scaled dy tile is loaded and split once
  // for all of them (3% off the backward at Mamba-2 heads: docs/performance.md). fp16 and fp32
  // dout keep 64 (unmeasured at 128).
  if (static_cast<DType>(s.get("dtype:dout")) == DType::BF16 && !s.find("meta:BLOCK_N"))
    s.set("meta:BLOCK_N", std::clamp<int64_t>(nextPow2(s.get("N")), 16, 128));
  ssdStateBlockMeta(s);
  ssdSlotHeadMeta(s);
  ssdCheckChainMeta(s);
}

}  // namespace

const KernelRegistration kBwdDstates(__FILE__,
                                     {kSsdBwdDstates.kernel, buildDstates, chooseDstatesMeta, &kSsdBwdDstates});

}  // namespace ssmjit::kernels
