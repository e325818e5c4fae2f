// Selective state update (Mamba-1 and Mamba-2 decode), one or L tokens per sequence, written once
// in the DSL. Algorithm 1 of the speculative-decoding design: load the state tile once, run the L
// tokens with the state in registers, write y per token, store the state once (or per token, or
// not at all). See SelectiveStateUpdate.h for the argument contract.
#include "kernels_dsl/SelectiveStateUpdate.h"

#include <algorithm>

#include "kernels_dsl/Dsl.h"
#include "kernels_dsl/Registry.h"

namespace ssmjit::kernels {
using namespace dsl;

namespace {

void build(KernelBuilder& k, const Specialization& spec) {
  const int64_t BP = spec.get("meta:BLOCK_P"), BN = spec.get("meta:BLOCK_N");
  auto F = PtrClass::Float;
  Value state = k.ptrArg("state", F), x = k.ptrArg("x", F), dt = k.ptrArg("dt", F),
        A = k.ptrArg("A", F), Bp = k.ptrArg("B", F), Cp = k.ptrArg("C", F),
        Dp = k.ptrArg("D", F), z = k.ptrArg("z", F), dtBias = k.ptrArg("dt_bias", F),
        out = k.ptrArg("out", F);
  Value stateIdx = k.ptrArg("state_idx", PtrClass::Int, PtrRole::Metadata);
  Value dstIdx = k.ptrArg("dst_idx", PtrClass::Int, PtrRole::Metadata);
  Value err = k.ptrArg("err", PtrClass::Int, PtrRole::Metadata);
  Value batch = k.intArg("batch"), nslots = k.intArg("nslots"), H = k.intArg("H"),
        P = k.intArg("P"), N = k.intArg("N"), G = k.intArg("G"), L = k.intArg("L");
  (void)batch;
  Value dtMin = k.floatArg("dt_min"), dtMax = k.floatArg("dt_max");
  auto I = [&](const char* n) { return k.intArg(n); };
  Value sStSlot = I("s_state_slot"), sStH = I("s_state_h"), sStP = I("s_state_p"),
        sStN = I("s_state_n");
  Value sXb = I("s_x_b"), sXl = I("s_x_l"), sXh = I("s_x_h"), sXp = I("s_x_p");
  Value sDtb = I("s_dt_b"), sDtl = I("s_dt_l"), sDth = I("s_dt_h"), sDtp = I("s_dt_p");
  Value sAh = I("s_A_h"), sAp = I("s_A_p"), sAn = I("s_A_n");
  Value sBb = I("s_B_b"), sBl = I("s_B_l"), sBg = I("s_B_g"), sBn = I("s_B_n");
  Value sCb = I("s_C_b"), sCl = I("s_C_l"), sCg = I("s_C_g"), sCn = I("s_C_n");
  Value sDh = I("s_D_h"), sDp = I("s_D_p");
  Value sZb = I("s_z_b"), sZl = I("s_z_l"), sZh = I("s_z_h"), sZp = I("s_z_p");
  Value sBiasH = I("s_dtb_h"), sBiasP = I("s_dtb_p");
  Value sOb = I("s_out_b"), sOl = I("s_out_l"), sOh = I("s_out_h"), sOp = I("s_out_p");
  Value sIdxB = I("s_idx_b"), sDstB = I("s_dst_b"), sDstL = I("s_dst_l");
  Value hasD = k.flagArg("has_D"), hasZ = k.flagArg("has_z"), hasBias = k.flagArg("has_dt_bias"),
        softplusOn = k.flagArg("dt_softplus"), hasClamp = k.flagArg("has_clamp"),
        hasIdx = k.flagArg("has_state_idx"), perHead = k.flagArg("per_head");
  Value stateWrite = k.intArg("state_write");

  // Heads vary before rows: the blocks in flight then walk one slot's state (contiguous, H*P*N
  // values) instead of one head of many slots (a new page per row: TLB misses at large batch).
  Value pidP = k.programId(0), h = k.programId(1), b = k.programId(2);

  // Which slot this sequence reads; -1 is a pad row, skipped with its outputs untouched.
  Value slot = k.ifElse(hasIdx, [&] { return std::vector<Value>{k.load(stateIdx, b * sIdxB)}; },
                        [&] { return std::vector<Value>{b}; })[0];
  k.returnIf(slot == -1);
  Value badSlot = (slot < 0) || (slot >= nslots);
  k.ifThen(badSlot, [&] {
    k.reportError(err, k.constInt(kErrSlotOutOfRange), b, slot, nslots);
  });
  k.returnIf(badSlot);

  Value offsP = pidP * BP + k.range(BP);
  Value offsN = k.range(BN);
  Value maskP = offsP < P, maskN = offsN < N;
  Value mask2 = k.expandDims(maskP, 1) && k.expandDims(maskN, 0);
  Value g = h / (H / G);

  auto stateOffsets = [&](Value s) {
    return s * sStSlot + h * sStH + k.expandDims(offsP, 1) * sStP + k.expandDims(offsN, 0) * sStN;
  };
  Value st = k.load(state, stateOffsets(slot), mask2, k.constFloat(0));

  // dt' = clamp(softplus(dt + dt_bias)): on a tile (Mamba-1: per channel) or a scalar (Mamba-2:
  // one value per head and token, so it and exp(A dt') are computed once, not per state element).
  auto dtTransform = [&](Value d) {
    d = k.ifElse(softplusOn, [&] { return std::vector<Value>{softplus(d)}; },
                 [&] { return std::vector<Value>{d}; })[0];
    return k.ifElse(hasClamp, [&] { return std::vector<Value>{k.minimum(k.maximum(d, dtMin), dtMax)}; },
                    [&] { return std::vector<Value>{d}; })[0];
  };
  // Loop invariants: A, D and dt_bias.
  Value zero = k.constFloat(0);
  Value zeroP = k.splat(zero, {BP});
  Value Ahead = k.load(A, h * sAh);
  Value biasHead = k.ifElse(hasBias, [&] { return std::vector<Value>{k.load(dtBias, h * sBiasH)}; },
                            [&] { return std::vector<Value>{zero}; })[0];
  Value Atile = k.load(A, h * sAh + k.expandDims(offsP, 1) * sAp + k.expandDims(offsN, 0) * sAn,
                       mask2, zero);
  Value biasTile = k.ifElse(hasBias,
                            [&] { return std::vector<Value>{k.load(dtBias, h * sBiasH + offsP * sBiasP, maskP, zero)}; },
                            [&] { return std::vector<Value>{zeroP}; })[0];
  Value Dv = k.ifElse(hasD,
                      [&] { return std::vector<Value>{k.load(Dp, h * sDh + offsP * sDp, maskP, zero)}; },
                      [&] { return std::vector<Value>{zeroP}; })[0];

  // Token t's inputs: x, raw dt (a scalar per head, or a tile per channel), B, C, z. Loads past
  // the last token are masked off, so the loop can prefetch token t + 1 unconditionally.
  auto loadToken = [&](Value t) {
    Value valid = t < L;
    Value mP = maskP && valid, mN = maskN && valid;
    Value xv = k.load(x, b * sXb + t * sXl + h * sXh + offsP * sXp, mP, zero);
    Value dtS = k.ifElse(perHead, [&] { return std::vector<Value>{k.load(dt, b * sDtb + t * sDtl + h * sDth, valid, zero)}; },
                         [&] { return std::vector<Value>{zero}; })[0];
    Value dtT = k.ifElse(perHead, [&] { return std::vector<Value>{zeroP}; },
                         [&] { return std::vector<Value>{k.load(dt, b * sDtb + t * sDtl + h * sDth + offsP * sDtp, mP, zero)}; })[0];
    Value Bv = k.load(Bp, b * sBb + t * sBl + g * sBg + offsN * sBn, mN, zero);
    Value Cv = k.load(Cp, b * sCb + t * sCl + g * sCg + offsN * sCn, mN, zero);
    Value zv = k.ifElse(hasZ, [&] { return std::vector<Value>{k.load(z, b * sZb + t * sZl + h * sZh + offsP * sZp, mP, zero)}; },
                        [&] { return std::vector<Value>{zeroP}; })[0];
    return std::vector<Value>{xv, dtS, dtT, Bv, Cv, zv};
  };

  std::vector<Value> init = loadToken(k.constInt(0));
  init.insert(init.begin(), st);
  Value finalState = k.forLoop(k.constInt(0), L, k.constInt(1), init, [&](Value t, const std::vector<Value>& c) {
    Value s = c[0], xv = c[1], dtS = c[2], dtT = c[3], Bv = c[4], Cv = c[5], zv = c[6];
    // Issue token t + 1's loads before token t's math, so their latency overlaps it.
    std::vector<Value> next = loadToken(t + 1);
    // (dt' per row of P, decay exp(A dt') per state element)
    std::vector<Value> dtDecay = k.ifElse(
        perHead,
        [&] {
          Value d = dtTransform(dtS + biasHead);
          return std::vector<Value>{k.splat(d, {BP}), k.splat(k.exp(Ahead * d), {BP, BN})};
        },
        [&] {
          Value d = dtTransform(dtT + biasTile);
          return std::vector<Value>{d, k.exp(Atile * k.expandDims(d, 1))};
        });
    Value dtv = dtDecay[0];
    s = s * dtDecay[1] + k.expandDims(Bv, 0) * k.expandDims(dtv * xv, 1);
    Value y = k.reduce(s * k.expandDims(Cv, 0), 1, "sum");
    y = y + xv * Dv;
    y = k.ifElse(hasZ, [&] { return std::vector<Value>{y * silu(zv)}; },
                 [&] { return std::vector<Value>{y}; })[0];
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
  if (!s.find("meta:BLOCK_N")) s.set("meta:BLOCK_N", std::max<int64_t>(4, nextPow2(N)));
  const int64_t BN = s.get("meta:BLOCK_N");
  if (!s.find("meta:num_warps")) s.set("meta:num_warps", 4);
  if (!s.find("meta:BLOCK_P")) {
    // One token is bandwidth-bound: many small programs. L tokens are latency-bound (each token
    // waits on the previous state), so each thread keeps 4x more state and the grid runs in
    // fewer waves, each paying the per-token latency once.
    // One token, measured on an H100 (Mamba-2 2.7B heads, batch 16..256, % of copy bandwidth):
    // fp32 state is best at 8 values (32 B) a thread (90-97%; 4 values 84-91%, 16 values 88-96%),
    // 16-bit state at 32 values (64 B) (81-94%; 16 values 66-79%, 64 values 74-92%).
    const int64_t stateBytes = scalarTypeBytes(static_cast<ScalarType>(s.get("dtype:state", 0)));
    const int64_t perThread = s.get("L") > 1 ? 64 : (stateBytes == 4 ? 8 : 32);
    int64_t bp = std::max<int64_t>(1, perThread * 32 * s.get("meta:num_warps") / BN);
    bp = std::min(bp, std::max<int64_t>(1, nextPow2(P)));
    s.set("meta:BLOCK_P", bp);
  }
  if (!s.find("meta:index_bits")) s.set("meta:index_bits", 32);
}

}  // namespace

KernelDef selectiveStateUpdateKernel() { return {kSsuKernel, build, chooseMeta}; }

}  // namespace ssmjit::kernels
