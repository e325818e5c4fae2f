// The L-token Mamba-2 state update, chunked (the SSD form of Mamba-2's paper) on the tensor cores.
// With a_t = A dt'_t and cum_t = a_0 + ... + a_t, the token loop's state and outputs are
//   s_T  = exp(cum_T) s_0 + sum_u exp(cum_T - cum_u) dt'_u x_u B_u^T
//   y_t  = exp(cum_t) s_0 C_t + sum_{u <= t} exp(cum_t - cum_u) (C_t . B_u) dt'_u x_u + D x_t
// (T the last token; cum_t - cum_u is summed as a_{u+1} + ... + a_t itself, not subtracted):
// five products of small matrices per head (s_0 C^T, (dt' x w) B, C B^T, the segment sums of a,
// and the masked G times dt' x) in place of L passes of 3 operations over every state element. Why:
// the token loop is bound by its fp32 math and its latency (H100, 2.7B heads, L 16: 1.9x the
// one-token time at batch 16 with fp32 state, 4.5x with bf16 state), the mma does the products
// at a small fraction of the instructions, and the state is read and written once as before.
// Operands that are not bf16 data are split into bf16 terms (sj.dot), so every product is exact
// and the sums are f32's; only the order of the sums differs from the token loop.
#include "kernels_dsl/ssu/SsuChunkedTokens.h"

#include <string>

#include "ssmjit/error.h"

namespace ssmjit::kernels {
using namespace dsl;

namespace {
int archMajor(const std::string& arch) {  // "sm_90a" -> 9
  int v = 0;
  return std::sscanf(arch.c_str(), "sm_%d", &v) == 1 ? v / 10 : 0;
}
}  // namespace

SsuChunkPlan ssuChunkPlan(int64_t L, int64_t BP, int64_t BN, bool withZ) {
  SsuChunkPlan p;
  p.LD = ssuChunkTokens(L), p.BNs = BN + 4, p.LDs = p.LD + 4;
  p.oB = 0, p.oC = p.LD * p.BNs, p.oX = 2 * p.LD * p.BNs, p.oDx = p.oX + p.LD * BP, p.oZ = p.oDx + p.LD * BP;
  p.oCum = p.oZ + (withZ ? p.LD * BP : 0), p.oRev = p.oCum + p.LD, p.oSeg = p.oRev + p.LD;
  p.oG = p.oSeg + p.LD * p.LDs, p.floats = p.oG + p.LD * p.LDs;
  return p;
}

int64_t ssuChunkRows(int64_t P, int64_t BN, int64_t numWarps) {
  return std::min<int64_t>(8 * numWarps * (BN <= 128 ? 2 : 1), std::max<int64_t>(16, nextPow2(P)));
}

bool ssuChunkable(const Specialization& s) {
  const int64_t L = s.get("L"), BN = s.get("meta:BLOCK_N");
  if (s.get("per_head") == 0 || L < 2 || L > 16 || s.get("state_write") == 2 || BN < 16 || BN > 256 ||
      archMajor(s.arch) < 8)
    return false;
  const int64_t BP = ssuChunkRows(s.get("P"), BN, s.get("meta:num_warps"));
  return ssuChunkPlan(L, BP, BN, s.get("has_z") != 0).floats <= kMaxSharedBufferFloats;
}

void buildSsuChunkedTokens(KernelBuilder& k, const Specialization& spec, const SsuChunkInputs& in) {
  const int64_t BP = spec.get("meta:BLOCK_P"), BN = spec.get("meta:BLOCK_N");
  const bool withZ = spec.get("has_z") != 0;
  const SsuChunkPlan plan = ssuChunkPlan(spec.get("L"), BP, BN, withZ);
  const int64_t LD = plan.LD, BNs = plan.BNs, LDs = plan.LDs, oB = plan.oB, oC = plan.oC, oX = plan.oX;
  const int64_t oDx = plan.oDx, oZ = plan.oZ, oCum = plan.oCum, oRev = plan.oRev, oSeg = plan.oSeg, oG = plan.oG;
  if (plan.floats > kMaxSharedBufferFloats)  // ssuChunkable keeps such calls on the token loop
    throw Error(Error::Kind::Internal, "chunked state update: " + std::to_string(plan.floats) +
                                           " floats of shared memory for BLOCK_P " + std::to_string(BP) + ", BLOCK_N " +
                                           std::to_string(BN) + ", over the limit");
  Value smem = k.sharedBuffer(plan.floats);
  Value zero = k.constFloat(0);
  auto C = [&](int64_t v) { return k.constInt(v); };

  // Stage the tokens' inputs: [token, place] rows. Every load is issued before the first store
  // (NVCC keeps a global load below an earlier shared-memory store, and each load-then-store
  // pair would wait out its own memory latency), and none is masked by token: a masked load
  // branches, and NVCC does not hoist loads across the branches. Tokens past L read token L - 1
  // instead: their x is zeroed (so they add nothing to the state, G or y), their a_t is 0, and
  // their rows of y are not stored. A row of W places is copied as f tile rows of W / f, so
  // that the tile has a row for every lane group of the program (8 a warp): as [LD, W], the
  // warps beyond LD / 8 would load the same rows again.
  const int64_t f = std::max<int64_t>(1, 8 * spec.get("meta:num_warps") / LD);
  Value tr = k.range(LD), tC = k.expandDims(tr, 1);  // [LD, 1]
  Value trl = k.minimum(tr, in.L - 1);
  auto rows = [&](int64_t W) {  // (token, place) of each element of an [LD f, W / f] copy tile
    Value r = k.expandDims(k.range(LD * f), 1), c = k.expandDims(k.range(W / f), 0);
    return std::pair<Value, Value>{r / f, (r % f) * (W / f) + c};
  };
  auto [tN, nN] = rows(BN);
  auto [tP, pP] = rows(BP);
  Value tNl = k.minimum(tN, in.L - 1), tPl = k.minimum(tP, in.L - 1), pG = pP + in.pidP * BP;
  Value mN = spec.get("N") == BN ? Value{} : k.broadcastTo(nN < in.N, {LD * f, BN / f});
  Value mP = in.wholeP ? Value{} : k.broadcastTo(pG < in.P, {LD * f, BP / f});
  Value Bg = k.load(in.B, in.b * in.sBb + tNl * in.sBl + in.g * in.sBg + nN * in.sBn, mN, zero);
  Value Cg = k.load(in.C, in.b * in.sCb + tNl * in.sCl + in.g * in.sCg + nN * in.sCn, mN, zero);
  Value xT = k.load(in.x, in.b * in.sXb + tPl * in.sXl + in.h * in.sXh + pG * in.sXp, mP, zero);
  Value dtP = k.load(in.dt, in.b * in.sDtb + tPl * in.sDtl + in.h * in.sDth);
  Value dtRow = k.load(in.dt, in.b * in.sDtb + trl * in.sDtl + in.h * in.sDth);
  Value zT = withZ ? k.load(in.z, in.b * in.sZb + tPl * in.sZl + in.h * in.sZh + pG * in.sZp, mP, zero) : Value{};
  xT = k.select(tP < in.L, xT, zero);
  k.store(smem, oB + tN * BNs + nN, Bg);
  k.store(smem, oC + tN * BNs + nN, Cg);
  k.store(smem, oX + tP * BP + pP, xT);
  k.store(smem, oDx + tP * BP + pP, in.dtTransform(dtP + in.biasHead) * xT);
  if (withZ) k.store(smem, oZ + tP * BP + pP, silu(zT));
  // The decays' exponents: a_t (0 past L), cum_t = a_0 + ... + a_t, rev_t = a_{t+1} + ... + a_T
  // and, for G, a_{u+1} + ... + a_t, each summed on its own: exp(cum_T - cum_u) as a difference
  // of two long sums lost |cum| ulps to cancellation (H100: the state 1.04e-6 relative L2 from the
  // token loop's product of exps, with decays that underflow in a few tokens). The segments' sums are
  // a product, [u < s <= t] (0 / 1) times a_s [s, u], staged here as a_s [s > u].
  Value la = k.select(tr < in.L, in.Ahead * in.dtTransform(dtRow + in.biasHead), zero);
  Value uR = k.expandDims(k.range(LD), 0);  // [1, LD]
  Value laR = k.broadcastTo(k.expandDims(la, 0), {LD, LD});
  k.store(smem, oCum + k.range(LD), k.reduce(k.select(uR <= tC, laR, zero), 1, "sum"));
  k.store(smem, oRev + k.range(LD), k.reduce(k.select(uR > tC, laR, zero), 1, "sum"));
  Value laCol = in.dtTransform(k.load(in.dt, in.b * in.sDtb + k.minimum(tC, in.L - 1) * in.sDtl + in.h * in.sDth) +
                               in.biasHead);  // [LD, 1]: a_s down the rows
  k.store(smem, oSeg + tC * LDs + uR, k.select((tC > uR) && (tC < in.L), in.Ahead * laCol, zero));
  k.barrier();

  // [row, token] tiles: tokens along the columns (the mma's K of the state's product, N of y's).
  Value tK = k.expandDims(k.range(LD), 0);  // [1, LD]
  Value pC = k.expandDims(k.range(BP), 1);  // [BP, 1]
  Value dx = k.load(smem, oDx + tK * BP + pC);
  Value cumK = k.load(smem, oCum + tK);  // [1, LD]
  Value revK = k.load(smem, oRev + tK);  // [1, LD]
  Value cumLast = k.load(smem, oCum + in.L - 1);
  const int sp = dotPieces(spec, "state"), bp = dotPieces(spec, "B"), cp = dotPieces(spec, "C");
  // G[t, u] = (C_t . B_u) exp(a_{u+1} + ... + a_t) for u <= t, through shared memory to every
  // warp. First, so that its tiles are dead before the state's products (registers: 4 programs
  // an SM).
  // C as [token, n] from memory again (a hit in L1 or L2): 16-bit data stays its 32-bit pairs,
  // which are the A fragments as they stand, in half the registers of the staged f32 rows.
  Value nR = k.expandDims(in.offsN, 0);  // [1, BN]
  Value mNt = spec.get("N") == BN ? Value{} : k.broadcastTo(nR < in.N, {LD, BN});
  Value Ct = k.load(in.C, in.b * in.sCb + k.minimum(tC, in.L - 1) * in.sCl + in.g * in.sCg + nR * in.sCn, mNt, zero);
  Value CB = k.dot(Ct, smem, C(oB), C(1), C(BNs), k.splat(zero, {LD, LD}), cp, bp);
  Value upTo = k.select(tK <= tC, k.splat(k.constFloat(1), {LD, LD}), zero);  // [t, s]: s <= t
  Value seg = k.dot(upTo, smem, C(oSeg), C(LDs), C(1), k.splat(zero, {LD, LD}), 1, 3);
  k.store(smem, oG + tC * LDs + tK, k.select(tK <= tC, CB * k.exp(seg), zero));
  // exp(cum_t) s_0 C_t, as [row, token].
  Value yOff = k.dot(in.st, smem, C(oC), C(1), C(BNs), k.splat(zero, {BP, LD}), sp, cp);
  // The final state: exp(cum_T) s_0 + (dt' x exp(rev_u)) B, stored at once.
  Value sT = k.dot(dx * k.exp(revK), smem, C(oB), C(BNs), C(1), in.st * k.exp(cumLast), 3, bp);
  if (spec.get("state_write") == 0) k.store(in.state, in.stateOffsets(in.slot), sT, in.mask2);
  k.barrier();
  Value y = k.dot(dx, smem, C(oG), C(1), C(LDs), yOff * k.exp(cumK), 3, 3);
  y = y + k.expandDims(in.D, 1) * k.load(smem, oX + tK * BP + pC);
  if (withZ) y = y * k.load(smem, oZ + tK * BP + pC);
  Value pRow = in.pidP * BP + pC;
  Value mOut = in.wholeP ? k.broadcastTo(tK < in.L, {BP, LD}) : (tK < in.L) && (pRow < in.P);
  k.store(in.out, in.b * in.sOb + tK * in.sOl + in.h * in.sOh + pRow * in.sOp, y, mOut);
}

}  // namespace ssmjit::kernels
