#include "kernels_dsl/ssd/SsdChunks.h"

#include <algorithm>
#include <string>

#include "compiler/IntMath.h"
#include "compiler/Swizzle.h"
#include "kernels_dsl/MetaDefaults.h"
#include "kernels_dsl/ssd/Ssd.h"
#include "ssmjit/error.h"

namespace ssmjit::kernels {
using namespace dsl;

namespace {
void inputValues(KernelBuilder& k, SsdInputValues& a) {
  auto v = [&](const char* n) { return k.arg(n); };
  a.x = v("x"), a.dt = v("dt"), a.A = v("A"), a.B = v("B"), a.C = v("C"), a.Dv = v("Dv"), a.z = v("z");
  a.dtb = v("dtb"), a.y = v("y"), a.ws = v("ws"), a.chunks = v("chunks");
  a.H = v("H"), a.P = v("P"), a.N = v("N"), a.hpg = v("hpg"), a.L = v("L");
  a.oDt = v("o_dt"), a.oCum = v("o_cum"), a.oSt = v("o_st"), a.oCb = v("o_cb");
  a.dtMin = v("dt_min"), a.dtMax = v("dt_max");
  a.hasD = v("has_D"), a.hasZ = v("has_z"), a.hasDtb = v("has_dtb");
  a.softplusOn = v("softplus"), a.hasClamp = v("has_clamp");
  a.sXb = v("s_x_b"), a.sXl = v("s_x_l"), a.sXh = v("s_x_h"), a.sXp = v("s_x_p");
  a.sDtb = v("s_dt_b"), a.sDtl = v("s_dt_l"), a.sDth = v("s_dt_h"), a.sAh = v("s_A_h");
  a.sBb = v("s_B_b"), a.sBl = v("s_B_l"), a.sBg = v("s_B_g"), a.sBn = v("s_B_n");
  a.sCb = v("s_C_b"), a.sCl = v("s_C_l"), a.sCg = v("s_C_g"), a.sCn = v("s_C_n");
  a.sDh = v("s_D_h"), a.sDp = v("s_D_p");
  a.sZb = v("s_z_b"), a.sZl = v("s_z_l"), a.sZh = v("s_z_h"), a.sZp = v("s_z_p"), a.sDbh = v("s_dtb_h");
  a.sYb = v("s_y_b"), a.sYl = v("s_y_l"), a.sYh = v("s_y_h"), a.sYp = v("s_y_p");
}
}  // namespace

SsdValues ssdValues(KernelBuilder& k) {
  auto v = [&](const char* n) { return k.arg(n); };
  SsdValues a;
  inputValues(k, a);
  a.out = v("out"), a.init = v("init"), a.fin = v("final"), a.blk = v("blk"), a.decay = v("decay");
  a.cu = v("cu"), a.initIdx = v("init_idx"), a.finalIdx = v("final_idx"), a.blkIdx = v("blk_idx"), a.err = v("err");
  a.nseq = v("nseq"), a.searchSteps = v("search_steps"), a.nInit = v("nslots_init"), a.nFinal = v("nslots_final");
  a.nBlk = v("nslots_blk"), a.blkTokens = v("blk_tokens"), a.kmax = v("kmax"), a.oFlags = v("o_flags");
  a.hasCu = v("has_cu"), a.hasInit = v("has_init"), a.hasInitIdx = v("has_init_idx"), a.hasFinal = v("has_final");
  a.hasFinalIdx = v("has_final_idx"), a.hasBlk = v("has_blk"), a.hasDecay = v("has_decay");
  a.hasY = v("has_y"), a.passStates = v("pass_states");
  a.sOb = v("s_o_b"), a.sOl = v("s_o_l"), a.sOh = v("s_o_h"), a.sOp = v("s_o_p");
  a.sIs = v("s_init_slot"), a.sIh = v("s_init_h"), a.sIp = v("s_init_p"), a.sIn = v("s_init_n");
  a.sFs = v("s_final_slot"), a.sFh = v("s_final_h"), a.sFp = v("s_final_p"), a.sFn = v("s_final_n");
  a.sKs = v("s_blk_slot"), a.sKh = v("s_blk_h"), a.sKp = v("s_blk_p"), a.sKn = v("s_blk_n");
  a.sDecS = v("s_decay_s"), a.sDecH = v("s_decay_h"), a.sCu = v("s_cu"), a.sIidx = v("s_init_idx");
  a.sFidx = v("s_final_idx"), a.sKi = v("s_blk_idx_i"), a.sKk = v("s_blk_idx_k");
  return a;
}

SsdChunk ssdChunkOfSlot(KernelBuilder& k, const SsdInputValues& a, Value slot) {
  Value at = slot * 4;
  return {k.load(a.chunks, at), k.load(a.chunks, at + 1), k.load(a.chunks, at + 2), k.load(a.chunks, at + 3)};
}

SsdSlotHeadBlock ssdSlotHeadBlock(KernelBuilder& k, const Specialization& spec, Value H, Value blocks) {
  if (spec.get("meta:slot_inner") != 0) return {k.programId(0), k.programId(1), k.programId(2)};
  return ssdSlotHeadBlockAt(k.programId(0), H, blocks);
}

SsdSlotHeadBlock ssdSlotHeadBlockAt(Value linear, Value H, Value blocks) {
  Value sh = linear / blocks;
  return {sh / H, sh % H, linear % blocks};
}

void ssdSlotHeadMeta(Specialization& s) {
  if (!s.find("meta:slot_inner")) s.set("meta:slot_inner", 0);
}

SsdPairBlock ssdPairBlock(KernelBuilder& k, const SsdInputValues& a, int64_t Q, const SsdSlotHeadBlock& at) {
  const int64_t T = kSsdTokenBlock, nb = Q / T;
  SsdPairBlock b;
  b.slot = at.slot, b.g = at.h;
  b.bi = at.blk / nb, b.bj = at.blk % nb;
  b.ch = ssdChunkOfSlot(k, a, b.slot);
  k.returnIf((b.bj > b.bi) || (b.bi * T >= b.ch.n));
  return b;
}

SsdBwdValues ssdBwdValues(KernelBuilder& k) {
  auto v = [&](const char* n) { return k.arg(n); };
  SsdBwdValues a;
  inputValues(k, a);
  a.dout = v("dout"), a.dx = v("dx"), a.ddt = v("ddt"), a.dA = v("dA"), a.dB = v("dB"), a.dC = v("dC");
  a.dD = v("dD"), a.dz = v("dz"), a.ddtb = v("ddtb"), a.slots = v("slots");
  a.oG = v("o_g"), a.oTok = v("o_tok"), a.oDd = v("o_dd"), a.oPn = v("o_pn"), a.oSl = v("o_sl");
  a.oDcb = v("o_dcb"), a.passParts = v("pass_parts"), a.dPerChannel = v("d_per_channel");
  a.hasInit = v("has_init"), a.hasDfinal = v("has_dfinal");
  a.sOb = v("s_do_b"), a.sOl = v("s_do_l"), a.sOh = v("s_do_h"), a.sOp = v("s_do_p");
  a.sDxb = v("s_dx_b"), a.sDxl = v("s_dx_l"), a.sDxh = v("s_dx_h"), a.sDxp = v("s_dx_p");
  a.sDdtb = v("s_ddt_b"), a.sDdtl = v("s_ddt_l"), a.sDdth = v("s_ddt_h"), a.sDAh = v("s_dA_h");
  a.sDBb = v("s_dB_b"), a.sDBl = v("s_dB_l"), a.sDBg = v("s_dB_g"), a.sDBn = v("s_dB_n");
  a.sDCb = v("s_dC_b"), a.sDCl = v("s_dC_l"), a.sDCg = v("s_dC_g"), a.sDCn = v("s_dC_n");
  a.sDDh = v("s_dD_h"), a.sDDp = v("s_dD_p");
  a.sDzb = v("s_dz_b"), a.sDzl = v("s_dz_l"), a.sDzh = v("s_dz_h"), a.sDzp = v("s_dz_p"), a.sDdbh = v("s_ddtb_h");
  return a;
}

Value ssdChunkFollows(const SsdChunk& prev, const SsdChunk& next, int64_t Q) {
  return (prev.seq == next.seq) && (prev.n > 0) && (next.n > 0) && (prev.t0 + Q == next.t0);
}

Value ssdFirstChunk(KernelBuilder& k, const SsdBwdValues& a, Value slot, const SsdChunk& ch, int64_t Q) {
  const SsdChunk prev = ssdChunkOfSlot(k, a, k.maximum(slot - 1, k.constInt(0)));
  return !((slot > 0) && ssdChunkFollows(prev, ch, Q));
}

Value ssdLastChunk(KernelBuilder& k, const SsdBwdValues& a, Value slot, const SsdChunk& ch, int64_t Q) {
  const SsdChunk next = ssdChunkOfSlot(k, a, k.minimum(slot + 1, a.slots - 1));
  return !((slot + 1 < a.slots) && ssdChunkFollows(ch, next, Q));
}

Value ssdGateDy(KernelBuilder& k, const SsdBwdValues& a, Value dout, const std::function<Value()>& z) {
  return k.ifElse(
      a.hasZ, [&] { return std::vector<Value>{dout * silu(z())}; }, [&] { return std::vector<Value>{dout}; })[0];
}

Value ssdBwdDy(KernelBuilder& k, const SsdBwdValues& a, Value row, Value token, Value h, Value p, Value mask) {
  Value zero = k.constFloat(0);
  Value dout = k.load(a.dout, row * a.sOb + token * a.sOl + h * a.sOh + p * a.sOp, mask, zero);
  return ssdGateDy(k, a, dout,
                   [&] { return k.load(a.z, row * a.sZb + token * a.sZl + h * a.sZh + p * a.sZp, mask, zero); });
}

bool ssdMetaFlag(const Specialization& s, const std::string& name, int64_t dflt, const char* off, const char* on) {
  const int64_t v = s.get("meta:" + name, dflt);
  if (v != 0 && v != 1)
    throw Error(Error::Kind::InvalidArgument, s.kernel + ": meta " + name + " (SSMJIT_META) is " + std::to_string(v) +
                                                  ", expected 0 (" + off + ") or 1 (" + on + ")");
  return v == 1;
}

bool ssdOneTerm(const Specialization& s) { return ssdMetaFlag(s, "one_term", 0, "exact terms", "one 16-bit term"); }

bool ssdWgmma(const Specialization& s) {
  const bool hopper = s.arch == "sm_90a";
  const bool on = ssdMetaFlag(s, "wgmma", hopper ? 1 : 0, "ldmatrix", "wgmma");
  if (on && !hopper)
    throw Error(Error::Kind::InvalidArgument,
                s.kernel + ": meta wgmma (SSMJIT_META) is 1, but wgmma needs sm_90a, the call's arch is " + s.arch);
  return on;
}

bool ssdWgmmaRows(const Specialization& s, int64_t rowBytes) {
  return ssdWgmma(s) && s.get("meta:num_warps") == 4 && isSwizzleBytes(rowBytes);
}

SsdStagedRows ssdStagedRows(bool wgmma, int64_t cols) {
  return wgmma ? SsdStagedRows{cols, 2 * cols} : SsdStagedRows{cols + 8, 0};
}

int ssdBwdPieces(const Specialization& s) {
  const int64_t v = s.get("meta:pieces", 3);
  if (v < 1 || v > 3)
    throw Error(Error::Kind::InvalidArgument, s.kernel + ": meta pieces (SSMJIT_META) is " + std::to_string(v) +
                                                  ", expected 1, 2 or 3 (bf16 terms an f32 operand)");
  return int(v);
}

int ssdBwdDyPieces(const Specialization& s) {
  return s.get("has_z") == 0 && ssdDtype(s, "dout") == DType::BF16 ? 1 : ssdBwdPieces(s);
}

DType ssdDtype(const Specialization& s, const char* tensor) {
  return static_cast<DType>(s.get(std::string("dtype:") + tensor));
}

bool ssdIs16Bit(const Specialization& s, const char* tensor) {
  const DType d = ssdDtype(s, tensor);
  return d == DType::BF16 || d == DType::F16;
}

bool ssdBwdDyRings(const Specialization& s) {
  return ssdIs16Bit(s, "dout") && (s.get("has_z") == 0 || ssdIs16Bit(s, "z")) && ssdTileCopy(s);
}

SsdDyVectors ssdBwdDyVectors(const Specialization& s) {
  return {ssdTileVector(s, "dout", "s_do_p", {"s_do_b", "s_do_l", "s_do_h"}),
          s.get("has_z") == 0 ? 1 : ssdTileVector(s, "z", "s_z_p", {"s_z_b", "s_z_l", "s_z_h"})};
}

Value ssdBwdZRing(KernelBuilder& k, const Specialization& s, int64_t elements) {
  return k.sharedBuffer(s.get("has_z") == 0 ? 1 : elements, ssdDtype(s, "z"));
}

void ssdCopyDyTiles(KernelBuilder& k, const SsdBwdValues& a, Value os, Value zs, Value at, int64_t pitch, Value row,
                    Value tok0, Value h, Value c0, int64_t rows, int64_t cols, Value rowsValid, Value colsValid,
                    const SsdDyVectors& v) {
  k.copyTileAsync(os, at, pitch, a.dout, row * a.sOb + tok0 * a.sOl + h * a.sOh + c0, a.sOl, rows, cols, rowsValid,
                  colsValid, v.dout);
  k.ifThen(a.hasZ, [&] {
    k.copyTileAsync(zs, at, pitch, a.z, row * a.sZb + tok0 * a.sZl + h * a.sZh + c0, a.sZl, rows, cols, rowsValid,
                    colsValid, v.z);
  });
}

void ssdStoreTerms(KernelBuilder& k, Value buf, Value off, int64_t termStride, int terms, Value v) {
  for (int q = 0; q < terms; ++q) {
    Value at = off + q * termStride;
    k.store(buf, at, v);
    if (q + 1 < terms) v = v - k.load(buf, at);
  }
}

Value ssdDotTerms(KernelBuilder& k, Value a, Value buf, int64_t termStride, Value strideK, Value strideN, Value acc,
                  int terms, int aPieces) {
  for (int q = 0; q < terms; ++q)
    acc =
        k.dot(a, buf, k.constInt(q * termStride), strideK, strideN, acc, std::max(1, std::min(aPieces, terms - q)), 1);
  return acc;
}

Value ssdFirstSlot(KernelBuilder& k, const SsdValues& a, Value i, Value row, Value start, int64_t Q) {
  return row * cdiv(a.L, k.constInt(Q)) + start / Q + k.select(a.hasCu, i, k.constInt(0));
}

Value ssdDecay(KernelBuilder& k, Value cumI, Value cumJ) {
  return k.exp2(k.minimum(cumI - cumJ, k.constFloat(0)) * kLog2e);
}

Value ssdDtTransform(KernelBuilder& k, const SsdValues& a, Value dt, Value bias) {
  Value v = dt + bias;
  v = k.select(a.softplusOn, softplus(v), v);
  return k.select(a.hasClamp, k.minimum(k.maximum(v, a.dtMin), a.dtMax), v);
}

bool ssdTileCopy(const Specialization& s) {
  return ssdMetaFlag(s, "tile_copy", 1, "copies in the layout's runs", "whole tiles");
}

int64_t ssdTileVector(const Specialization& s, const std::string& ptr, const std::string& unit,
                      const std::vector<std::string>& terms) {
  const int64_t vec = 16 / dtypeBytes(static_cast<DType>(s.get("dtype:" + ptr)));
  if (!unit.empty() && s.get(unit, 0) != 1) return 0;
  if (s.get("align:" + ptr, 1) % 16) return 0;
  for (const std::string& t : terms)
    if (!s.provesMultiple(t, vec)) return 0;
  return vec;
}

int64_t ssdPrefetchMeta(Specialization& s, int64_t least) {
  constexpr int64_t kMaxPrefetch = 8;
  setDefault(s, "meta:PREFETCH", 4);
  const int64_t d = s.get("meta:PREFETCH");
  if (d < least || d > kMaxPrefetch)
    throw Error(Error::Kind::InvalidArgument, s.kernel + ": meta PREFETCH (SSMJIT_META) is " + std::to_string(d) +
                                                  ", expected " + std::to_string(least) + ".." +
                                                  std::to_string(kMaxPrefetch) + " chunks read ahead");
  return d;
}

void ssdCheckChainMeta(const Specialization& s) {
  if (s.get("meta:BLOCK_P") >= kSsdMinStateBlockP && s.get("meta:BLOCK_N") >= kSsdMinStateBlockN &&
      s.get("meta:slot_inner") == 0)
    return;
  throw Error(Error::Kind::InvalidArgument,
              s.kernel + ": meta BLOCK_P " + std::to_string(s.get("meta:BLOCK_P")) + ", BLOCK_N " +
                  std::to_string(s.get("meta:BLOCK_N")) + ", slot_inner " + std::to_string(s.get("meta:slot_inner")) +
                  " (SSMJIT_META), expected BLOCK_P >= " + std::to_string(kSsdMinStateBlockP) + ", BLOCK_N >= " +
                  std::to_string(kSsdMinStateBlockN) + " and slot_inner 0 where its programs pass the states");
}

Value ssdChunkLogDecayAt(Value oCum, Value slot, Value H, Value h, int64_t Q) {
  return oCum + (slot * H + h) * Q + (Q - 1);
}

Value ssdChainFlag(KernelBuilder& k, Value oFlags, Value P, Value N, Value H, Value slot, Value h, Value blk) {
  Value flagBlocks = cdiv(P, k.constInt(kSsdMinStateBlockP)) * cdiv(N, k.constInt(kSsdMinStateBlockN));
  return oFlags + kSsdFlagBase + (slot * H + h) * flagBlocks + blk;
}

void ssdDefaultMeta(Specialization& s) { setDefaults(s, {{"meta:num_warps", 4}, {"meta:index_bits", 32}}); }

void ssdStateBlockMeta(Specialization& s) {
  ssdDefaultMeta(s);
  if (!s.find("meta:BLOCK_P")) s.set("meta:BLOCK_P", std::clamp<int64_t>(nextPow2(s.get("P")), 32, 64));
  if (!s.find("meta:BLOCK_N")) s.set("meta:BLOCK_N", std::clamp<int64_t>(nextPow2(s.get("N")), 16, 64));
}

}  // namespace ssmjit::kernels
