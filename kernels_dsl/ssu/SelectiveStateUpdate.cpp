// Selective state update (Mamba-1 and Mamba-2 decode), one or L tokens per sequence, written once
// in the DSL. Algorithm 1 of the speculative-decoding design: load the state tile once, run the L
// tokens with the state in registers, write y per token, store the state once (or per token, or
// not at all). See SelectiveStateUpdate.h for the signature.
#include "kernels_dsl/ssu/SelectiveStateUpdate.h"

#include <algorithm>

#include "kernels_dsl/Dsl.h"
#include "kernels_dsl/MetaDefaults.h"
#include "kernels_dsl/Registry.h"
#include "kernels_dsl/ssu/SsuChunkedTokens.h"

namespace ssmjit::kernels {
using namespace dsl;

namespace {

void build(KernelBuilder& k, const Specialization& spec) {
  const int64_t BP = spec.get("meta:BLOCK_P"), BN = spec.get("meta:BLOCK_N");
  if (spec.find("meta:inner_lanes")) k.setInnerLanes(static_cast<int>(spec.get("meta:inner_lanes")));
  Value state = k.arg("state"), x = k.arg("x"), dt = k.arg("dt"), A = k.arg("A"), Bp = k.arg("B"), Cp = k.arg("C"),
        Dp = k.arg("D"), z = k.arg("z"), dtBias = k.arg("dt_bias"), out = k.arg("out");
  Value stateIdx = k.arg("state_idx"), dstIdx = k.arg("dst_idx"), err = k.arg("err");
  Value nslots = k.arg("nslots"), H = k.arg("H"), P = k.arg("P"), N = k.arg("N"), G = k.arg("G"), L = k.arg("L");
  Value dtMin = k.arg("dt_min"), dtMax = k.arg("dt_max");
  Value sStSlot = k.arg("s_state_slot"), sStH = k.arg("s_state_h"), sStP = k.arg("s_state_p"),
        sStN = k.arg("s_state_n");
  Value sXb = k.arg("s_x_b"), sXl = k.arg("s_x_l"), sXh = k.arg("s_x_h"), sXp = k.arg("s_x_p");
  Value sDtb = k.arg("s_dt_b"), sDtl = k.arg("s_dt_l"), sDth = k.arg("s_dt_h"), sDtp = k.arg("s_dt_p");
  Value sAh = k.arg("s_A_h"), sAp = k.arg("s_A_p"), sAn = k.arg("s_A_n");
  Value sBb = k.arg("s_B_b"), sBl = k.arg("s_B_l"), sBg = k.arg("s_B_g"), sBn = k.arg("s_B_n");
  Value sCb = k.arg("s_C_b"), sCl = k.arg("s_C_l"), sCg = k.arg("s_C_g"), sCn = k.arg("s_C_n");
  Value sDh = k.arg("s_D_h"), sDp = k.arg("s_D_p");
  Value sZb = k.arg("s_z_b"), sZl = k.arg("s_z_l"), sZh = k.arg("s_z_h"), sZp = k.arg("s_z_p");
  Value sBiasH = k.arg("s_dtb_h"), sBiasP = k.arg("s_dtb_p");
  Value sOb = k.arg("s_out_b"), sOl = k.arg("s_out_l"), sOh = k.arg("s_out_h"), sOp = k.arg("s_out_p");
  Value sIdxB = k.arg("s_idx_b"), sDstB = k.arg("s_dst_b"), sDstL = k.arg("s_dst_l");
  Value hasD = k.arg("has_D"), hasBias = k.arg("has_dt_bias"), softplusOn = k.arg("dt_softplus"),
        hasClamp = k.arg("has_clamp"), hasIdx = k.arg("has_state_idx");
  // has_z and per_head are read from the specialisation below: they decide the shared-memory plan.
  Value stateWrite = k.arg("state_write");

  // Heads vary before rows: the blocks in flight then walk one slot's state (contiguous, H*P*N
  // values) instead of one head of many slots (a new page per row: TLB misses at large batch).
  Value pidP = k.programId(0), h = k.programId(1), b = k.programId(2);

  // Which slot this sequence reads; -1 is a pad row, skipped with its outputs untouched.
  Value slot = k.ifElse(
      hasIdx, [&] { return std::vector<Value>{k.load(stateIdx, b * sIdxB)}; },
      [&] { return std::vector<Value>{b}; })[0];
  k.returnIf(slot == -1);
  Value badSlot = (slot < 0) || (slot >= nslots);
  k.ifThen(badSlot, [&] { k.reportError(err, k.constInt(kErrSlotOutOfRange), b, slot, nslots); });
  k.returnIf(badSlot);

  Value offsP = pidP * BP + k.range(BP);
  Value offsN = k.range(BN);
  // Tiles that cover P and N exactly need no masks (a mask costs a predicate per access).
  const bool wholeP = spec.get("P") % BP == 0, wholeN = spec.get("N") == BN;
  Value maskP = wholeP ? k.splat(k.constBool(true), {BP}) : offsP < P;
  Value maskN = wholeN ? k.splat(k.constBool(true), {BN}) : offsN < N;
  Value mask2 = k.expandDims(maskP, 1) && k.expandDims(maskN, 0);
  Value g = h / (H / G);

  auto stateOffsets = [&](Value s) {
    return s * sStSlot + h * sStH + k.expandDims(offsP, 1) * sStP + k.expandDims(offsN, 0) * sStN;
  };
  Value st = k.load(state, stateOffsets(slot), mask2, k.constFloat(0));

  // dt' = clamp(softplus(dt + dt_bias)): on a tile (Mamba-1: per channel) or a scalar (Mamba-2:
  // one value per head and token, so it and exp(A dt') are computed once, not per state element).
  auto dtTransform = [&](Value d) { return dsl::dtTransform(d, softplusOn, hasClamp, dtMin, dtMax); };
  // Loop invariants: A, D and dt_bias.
  Value zero = k.constFloat(0);
  Value zeroP = k.splat(zero, {BP});
  Value Ahead = k.load(A, h * sAh);
  Value biasHead = k.ifElse(
      hasBias, [&] { return std::vector<Value>{k.load(dtBias, h * sBiasH)}; },
      [&] { return std::vector<Value>{zero}; })[0];
  Value Atile = k.load(A, h * sAh + k.expandDims(offsP, 1) * sAp + k.expandDims(offsN, 0) * sAn, mask2, zero);
  Value biasTile = k.ifElse(
      hasBias, [&] { return std::vector<Value>{k.load(dtBias, h * sBiasH + offsP * sBiasP, maskP, zero)}; },
      [&] { return std::vector<Value>{zeroP}; })[0];
  Value Dv = k.ifElse(
      hasD, [&] { return std::vector<Value>{k.load(Dp, h * sDh + offsP * sDp, maskP, zero)}; },
      [&] { return std::vector<Value>{zeroP}; })[0];

  // What token t's math needs (t < L), "prepared": x; the decay (Mamba-2: the scalar exp(A dt')
  // of the head; Mamba-1: dt' per channel, exp(A dt') taken per state element); dt' x; B; C; and
  // silu(z).
  const bool m2 = spec.get("per_head") != 0, withZ = spec.get("has_z") != 0;
  if (spec.get("meta:chunked")) {
    SsuChunkInputs in{state, x,   dt,  Bp,    Cp,    z,     out,    b,   h,     g,        pidP,        slot,
                      L,     P,   N,   offsN, maskN, mask2, wholeP, st,  Ahead, biasHead, Dv,          sXb,
                      sXl,   sXh, sXp, sDtb,  sDtl,  sDth,  sBb,    sBl, sBg,   sBn,      sCb,         sCl,
                      sCg,   sCn, sZb, sZl,   sZh,   sZp,   sOb,    sOl, sOh,   sOp,      dtTransform, stateOffsets};
    return buildSsuChunkedTokens(k, spec, in);
  }
  auto prepare = [&](Value xv, Value dtRaw, Value Bv, Value Cv, Value zv) {
    Value d = dtTransform(dtRaw + (m2 ? biasHead : biasTile));
    return std::vector<Value>{xv, m2 ? k.exp(Ahead * d) : d, d * xv, Bv, Cv, withZ ? silu(zv) : zeroP};
  };
  // From memory: the raw loads, prepared at their use (so a prefetch does not wait on its loads).
  auto loadGlobal = [&](Value t) {
    Value xv = k.load(x, b * sXb + t * sXl + h * sXh + offsP * sXp, maskP, zero);
    Value dtv = m2 ? k.load(dt, b * sDtb + t * sDtl + h * sDth)
                   : k.load(dt, b * sDtb + t * sDtl + h * sDth + offsP * sDtp, maskP, zero);
    Value Bv = k.load(Bp, b * sBb + t * sBl + g * sBg + offsN * sBn, maskN, zero);
    Value Cv = k.load(Cp, b * sCb + t * sCl + g * sCg + offsN * sCn, maskN, zero);
    Value zv = withZ ? k.load(z, b * sZb + t * sZl + h * sZh + offsP * sZp, maskP, zero) : zeroP;
    return std::vector<Value>{xv, dtv, Bv, Cv, zv};
  };
  // Several tokens: every token's inputs are loaded at once, beside the state, and prepared into
  // shared memory ([token, place] f32 rows), so the token loop waits on memory once, not once a
  // token (a token's math is far shorter than a load's latency), and the per-row work (dt', the
  // decay, dt' x, silu(z)) is done once for the program instead of by every thread of a row.
  // Too many tokens to fit: from memory, as one token is.
  // B and C rows hold place n at n + 4 (n / 32): a thread's run of a row is 8 values with 16-bit
  // inputs (32 bytes), and unpadded, lanes j and j + 4 of a quarter-warp would read the same banks.
  const int64_t Ls = spec.get("L"), LB = nextPow2(Ls), BNp = BN + BN / 32 * 4;
  auto padN = [&](Value n) { return n + (n / 32) * 4; };
  const int64_t oC = LB * BNp, oX = 2 * LB * BNp, oDtx = oX + LB * BP, oZ = oDtx + LB * BP;
  const int64_t oDec = oZ + (withZ ? LB * BP : 0), stageFloats = oDec + LB;
  // Mamba-2 with N >= 64: the [token, row] tiles then spread over the threads like the state's
  // rows (8 lanes along a row; fewer rows of N spread a row over fewer lanes, and Mamba-1's long
  // row blocks over all of them: those tiles would take 32-128 values a thread and spill).
  const int64_t threads = 32 * spec.get("meta:num_warps");
  const bool staged = Ls > 1 && m2 && BN >= 64 && LB * BP <= 8 * threads && stageFloats <= kMaxSharedBufferFloats;
  Value smem = staged ? k.sharedBuffer(stageFloats) : Value{};
  if (staged) {
    // Places along the lanes (coalesced, vectorised). The P places are a range of their own:
    // offsP is the state's row axis, and a 1-D tile has one layout. A row's place is its index
    // in the program's BP rows (pR); pG is the row of the head it holds.
    Value tr = k.range(LB), tC = k.expandDims(tr, 1), tV = tC < L;  // [LB, 1]
    Value nR = k.expandDims(offsN, 0);                              // [1, BN]
    Value pR = k.expandDims(k.range(BP), 0), pG = pR + pidP * BP;   // [1, BP]
    Value mPR = wholeP ? Value{} : pG < P;
    Value mN2 = tV && k.expandDims(maskN, 0), mP2 = wholeP ? k.broadcastTo(tV, {LB, BP}) : tV && mPR;
    auto rowsAt = [&](int64_t o) { return o + tC * BP + pR; };
    k.store(smem, tC * BNp + padN(nR), k.load(Bp, b * sBb + tC * sBl + g * sBg + nR * sBn, mN2, zero));
    k.store(smem, oC + tC * BNp + padN(nR), k.load(Cp, b * sCb + tC * sCl + g * sCg + nR * sCn, mN2, zero));
    Value xT = k.load(x, b * sXb + tC * sXl + h * sXh + pG * sXp, mP2, zero);
    k.store(smem, rowsAt(oX), xT);
    if (withZ) k.store(smem, rowsAt(oZ), silu(k.load(z, b * sZb + tC * sZl + h * sZh + pG * sZp, mP2, zero)));
    // dt' of each token (one per head), twice: as a row of scalars (their decays) and along the
    // tokens of x.
    Value dRow = dtTransform(k.load(dt, b * sDtb + tr * sDtl + h * sDth, tr < L, zero) + biasHead);
    k.store(smem, oDec + tr, k.exp(Ahead * dRow));
    Value dCol = dtTransform(k.load(dt, b * sDtb + tC * sDtl + h * sDth, tV, zero) + biasHead);
    k.store(smem, rowsAt(oDtx), dCol * xT);
    k.barrier();
  }
  auto loadStaged = [&](Value t) {
    Value row = t * BP + (offsP - pidP * BP);
    return std::vector<Value>{k.load(smem, oX + row),
                              k.load(smem, oDec + t),
                              k.load(smem, oDtx + row),
                              k.load(smem, t * BNp + padN(offsN)),
                              k.load(smem, oC + t * BNp + padN(offsN)),
                              withZ ? k.load(smem, oZ + row) : zeroP};
  };
  // The state stays s (3 operations an element a token: decay, + B dt' x, the y term). Keeping it
  // scaled by the product of the decays, u = s / alpha (2 operations, rebased below 2^-40), is
  // slower: the loop is bound by latency and occupancy, not by its fmas, and the form costs
  // registers.
  //
  // Token inputs from memory are loaded a token ahead (min(t + 1, L - 1): the last iteration
  // rereads its own token instead of masking every read on t), so their latency overlaps a token's
  // math. Staged ones are read at the top of their own token: a second token's B and C rows held in
  // registers cost more (occupancy; addresses recomputed in the loop) than the wait on shared
  // memory.
  std::vector<Value> init{st};
  if (!staged) {
    std::vector<Value> first = loadGlobal(k.constInt(0));
    init.insert(init.end(), first.begin(), first.end());
  }
  Value finalState = k.forLoop(k.constInt(0), L, k.constInt(1), init, [&](Value t, const std::vector<Value>& c) {
    Value s = c[0];
    std::vector<Value> in = staged ? loadStaged(t) : prepare(c[1], c[2], c[3], c[4], c[5]);
    Value xv = in[0], dec = in[1], dtx = in[2], Bv = in[3], Cv = in[4], sz = in[5];
    std::vector<Value> next;
    if (!staged) next = loadGlobal(k.minimum(t + 1, L - 1));
    Value decay = m2 ? k.splat(dec, {BP, BN}) : k.exp(Atile * k.expandDims(dec, 1));
    s = s * decay + k.expandDims(Bv, 0) * k.expandDims(dtx, 1);
    Value y = k.reduce(s * k.expandDims(Cv, 0), 1, "sum");
    y = y + xv * Dv;
    if (withZ) y = y * sz;
    k.store(out, b * sOb + t * sOl + h * sOh + offsP * sOp, y, maskP);
    // Per-token snapshots: the state after token t into slot dst_idx[b, t] (-1: none).
    k.ifThen(stateWrite == 2, [&] {
      Value dslot = k.load(dstIdx, b * sDstB + t * sDstL);
      Value bad = (dslot != -1) && ((dslot < 0) || (dslot >= nslots));
      k.ifThen(bad, [&] { k.reportError(err, k.constInt(kErrDstSlotOutOfRange), b, dslot, nslots); });
      k.ifThen((dslot != -1) && !bad, [&] { k.store(state, stateOffsets(dslot), s, mask2); });
    });
    next.insert(next.begin(), s);
    return next;
  })[0];

  k.ifThen(stateWrite == 0, [&] { k.store(state, stateOffsets(slot), finalState, mask2); });
}

// Block sizes: the whole state row (N) in one tile, and rows of P so that each thread keeps its
// share of the state in registers across all L tokens (64 bytes for one token, 64 values for several).
void chooseMeta(Specialization& s) {
  const int64_t P = s.get("P"), N = s.get("N");
  setDefault(s, "meta:BLOCK_N", std::max<int64_t>(4, nextPow2(N)));
  const int64_t BN = s.get("meta:BLOCK_N");
  const int64_t stateBytes = dtypeBytes(static_cast<DType>(s.get("dtype:state", 0)));
  // (Heads big enough for a full tile of them: a smaller tile has fewer values than 8 warps.)
  const bool oneTokenF32Heads =
      s.get("L") == 1 && s.get("per_head") && stateBytes == 4 && nextPow2(P) * BN >= 16 * 32 * 8;
  // One token, Mamba-2 heads, fp32 state: 8 warps of 16 values (64 B) a thread, ahead of 4 warps of
  // 8 at every batch (97% of copy bandwidth at batch 256).
  setDefault(s, "meta:num_warps", oneTokenF32Heads ? 8 : 4);
  // Mamba-2 heads over several tokens take the chunked form (SsuChunkedTokens.cpp) from the L where
  // it is faster than the token loop: 6 with bf16 state, 8 with fp16, 12 with fp32 (whose loop
  // moves twice the bytes a token, so the math weighs less). A program takes 64 rows (ssuChunkRows:
  // two a thread in the mma layout; 32 for N over 128). Up to N 128, bf16 state with 16-bit inputs
  // and whole tiles runs 4 programs an SM, the rest of fp32 and bf16 state 3; fp16 state (its
  // two-term state fragments) and N over 128 take what their registers allow: they spill under
  // those caps (masks, three-term fp32 inputs and two-term fp16 state cost registers). fp32 state
  // with fp16 inputs spills at L 16 under 3 (40 B) and is still faster than at 2.
  //
  // The form is bound by latency, not by a unit (ncu, batch 16: issue slots 39% busy, stalls spread
  // over shared-memory, barrier and global waits). The state's product's b reads (B's [token, n]
  // rows, k along the tokens) are 4-way bank conflicts; a conflict-free transposed copy of B gains
  // nothing consistent across devices, so it is not built.
  // meta:chunked = 1 set by a caller (SSMJIT_META) asks for the form wherever it serves: one
  // setting then covers every call of a program, one-token calls included.
  const auto stateT = static_cast<DType>(s.get("dtype:state", 0));
  const int64_t chunkedFrom = stateT == DType::BF16 ? 6 : stateT == DType::F16 ? 8 : 12;
  const bool chunkable = ssuChunkable(s);
  if (!s.find("meta:chunked"))
    s.set("meta:chunked", chunkable && s.get("L") >= chunkedFrom ? 1 : 0);
  else if (!chunkable)
    s.set("meta:chunked", 0);
  if (s.get("meta:chunked")) {
    setDefault(s, "meta:BLOCK_P", ssuChunkRows(P, BN, s.get("meta:num_warps")));
    const bool wideInputs = dtypeBytes(static_cast<DType>(s.get("dtype:B", 0))) == 4;
    const bool unmasked = P % s.get("meta:BLOCK_P") == 0 && N == BN;
    if (!s.find("meta:min_blocks") && stateT != DType::F16 && BN <= 128)
      s.set("meta:min_blocks", stateT == DType::BF16 && !wideInputs && unmasked ? 4 : 3);
  }
  if (!s.find("meta:BLOCK_P")) {
    // One token is bandwidth-bound: many small programs. L tokens are bound by their math (the
    // inputs are staged once), so each thread keeps more state and fewer threads repeat the
    // per-token loads and row work.
    // One token: 16-bit state is best at 32 values (64 B) a thread (81-94% of copy bandwidth at
    // Mamba-2 2.7B heads, batch 16..256). At batch 16 the state's size itself (21 MB) keeps even a
    // bare in-place pass below copy bandwidth.
    // Mamba-1 keeps 8 fp32 values (32 B).
    // Several tokens: Mamba-1 also keeps A per state element in registers, so half as many.
    // Mamba-2 with few tokens (L 2, or up to 4 with fp32 state), still mostly the state's traffic,
    // takes 32 too.
    const int64_t L = s.get("L");
    const bool fewTokens = L == 2 || (L <= 4 && stateBytes == 4);
    const int64_t perThread = L > 1 ? (s.get("per_head") && !fewTokens ? 64 : 32)
                                    : (oneTokenF32Heads  ? 16
                                       : stateBytes == 4 ? 8
                                                         : 32);
    int64_t bp = std::max<int64_t>(1, perThread * 32 * s.get("meta:num_warps") / BN);
    bp = std::min(bp, std::max<int64_t>(1, nextPow2(P)));
    s.set("meta:BLOCK_P", bp);
  }
  setDefault(s, "meta:index_bits", 32);
}

}  // namespace

const KernelRegistration kUpdate(__FILE__, {kSsu.kernel, build, chooseMeta, &kSsu});

}  // namespace ssmjit::kernels
