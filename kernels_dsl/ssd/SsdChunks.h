// What the SSD kernels share (Ssd.h): their arguments as DSL values, where a slot's chunk lies,
// dt' from raw dt, and the mma terms an operand's storage dtype takes. Builds DSL code only.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "compiler/Specialization.h"
#include "kernels_dsl/Dsl.h"

namespace ssmjit::kernels {

// The forward's inputs, sizes, dt options and workspace offsets, and y (before the gate: the
// forward's output where kept, the backward's input), which the forward's kernels (Ssd.h) and the
// backward's token kernels (SsdBackward.h) declare under the same names.
struct SsdInputValues {
  dsl::Value x, dt, A, B, C, Dv, z, dtb, y, ws, chunks;
  dsl::Value H, P, N, hpg, L, oDt, oCum, oSt, oCb;
  dsl::Value dtMin, dtMax;
  dsl::Value hasD, hasZ, hasDtb, softplusOn, hasClamp;
  // Strides: s<tensor><axis>.
  dsl::Value sXb, sXl, sXh, sXp, sDtb, sDtl, sDth, sAh, sBb, sBl, sBg, sBn, sCb, sCl, sCg, sCn, sDh, sDp, sZb, sZl, sZh,
      sZp, sDbh, sYb, sYl, sYh, sYp;
};

// The arguments of the SSD kernels (Ssd.h), by the names the kernels use.
struct SsdValues : SsdInputValues {
  dsl::Value out, init, fin, blk, decay, cu, initIdx, finalIdx, blkIdx, err;
  dsl::Value nseq, searchSteps, nInit, nFinal, nBlk, blkTokens, kmax, oFlags;
  dsl::Value hasCu, hasInit, hasInitIdx, hasFinal, hasFinalIdx, hasBlk, hasDecay, hasY, passStates;
  dsl::Value sOb, sOl, sOh, sOp, sIs, sIh, sIp, sIn, sFs, sFh, sFp, sFn, sKs, sKh, sKp, sKn, sDecS, sDecH, sCu, sIidx,
      sFidx, sKi, sKk;
};
SsdValues ssdValues(dsl::KernelBuilder& k);

// The vector (the elements of 16 bytes) in which copyTileAsync may copy rows of the data pointer
// `ptr` whose offsets are multiples of the integer arguments `terms` plus multiples of the vector,
// the columns contiguous (`unit`, its column stride, bound to 1): the pointer 16-byte aligned and
// every term a proven multiple of it. 0 where the bindings do not prove it.
// A 0/1 meta of the SSD kernels (absent: dflt); any other value is an InvalidArgument error naming
// the kernel, the meta and what 0 (`off`) and 1 (`on`) mean.
bool ssdMetaFlag(const Specialization& s, const std::string& name, int64_t dflt, const char* off, const char* on);
// meta:tile_copy (absent: 1): 16-bit SSD kernels copy their staged tiles whole (ssdTileVector);
// 0 copies them in the kernel layout's runs.
bool ssdTileCopy(const Specialization& s);
int64_t ssdTileVector(const Specialization& s, const std::string& ptr, const std::string& unit,
                      const std::vector<std::string>& terms);

// A slot's chunk, from the table ssd_chunk_cumsum writes: tokens [t0, t0 + n) of row `row`
// (n 0: an empty slot), of sequence `seq`.
struct SsdChunk {
  dsl::Value seq, row, t0, n;
};
SsdChunk ssdChunkOfSlot(dsl::KernelBuilder& k, const SsdInputValues& a, dsl::Value slot);

// A program of a kernel over (slot, head or group, one of `blocks` blocks) (ssd_chunk_state,
// ssd_chunk_scan and the backward's token kernels but ssd_bwd_dt; the grid: ssdSlotHeadGrid,
// Ssd.h). meta:slot_inner 0 (the default): one flat axis, blocks fastest, then heads, then
// slots, so that the programs sharing a chunk's x and states (its blocks) and its B or C and
// C.B (its heads) run together and meet in L2. 1: the grid (slots, H, blocks), slots fastest.
struct SsdSlotHeadBlock {
  dsl::Value slot, h, blk;
};
SsdSlotHeadBlock ssdSlotHeadBlock(dsl::KernelBuilder& k, const Specialization& spec, dsl::Value H, dsl::Value blocks);
// The program of the flat order (meta:slot_inner 0) at place `linear`, blocks fastest.
SsdSlotHeadBlock ssdSlotHeadBlockAt(dsl::Value linear, dsl::Value H, dsl::Value blocks);
void ssdSlotHeadMeta(Specialization& s);

// A program over (slots, G, (Q/64)^2) (ssd_bmm, ssd_bwd_dcb), given as `at` (its block the pair
// bi (Q/64) + bj): its slot, its chunk, its group and its 64 x 64 block (bi, bj) of the chunk's
// token pairs. Programs above the diagonal or past the chunk's tokens return.
struct SsdPairBlock {
  dsl::Value slot, g, bi, bj;
  SsdChunk ch;
};
SsdPairBlock ssdPairBlock(dsl::KernelBuilder& k, const SsdInputValues& a, int64_t Q, const SsdSlotHeadBlock& at);

// The arguments of the backward's token kernels (SsdBackward.h), by the names the kernels use.
struct SsdBwdValues : SsdInputValues {
  dsl::Value dout, dx, ddt, dA, dB, dC, dD, dz, ddtb;
  dsl::Value slots, oG, oTok, oDd, oPn, oSl, oDcb, passParts;
  dsl::Value dPerChannel, hasInit, hasDfinal;
  dsl::Value sOb, sOl, sOh, sOp, sDxb, sDxl, sDxh, sDxp, sDdtb, sDdtl, sDdth, sDAh, sDBb, sDBl, sDBg, sDBn, sDCb, sDCl,
      sDCg, sDCn, sDDh, sDDp, sDzb, sDzl, sDzh, sDzp, sDdbh;
};
SsdBwdValues ssdBwdValues(dsl::KernelBuilder& k);

// Whether chunk `next` continues chunk `prev`: both hold tokens, of the same sequence, `next`
// Q = meta:chunk tokens later.
dsl::Value ssdChunkFollows(const SsdChunk& prev, const SsdChunk& next, int64_t Q);
// Whether the chunk `ch` at `slot` is its sequence's first (the slot before holds no earlier chunk
// of it) or its last (the slot after holds no later one).
dsl::Value ssdFirstChunk(dsl::KernelBuilder& k, const SsdBwdValues& a, dsl::Value slot, const SsdChunk& ch, int64_t Q);
dsl::Value ssdLastChunk(dsl::KernelBuilder& k, const SsdBwdValues& a, dsl::Value slot, const SsdChunk& ch, int64_t Q);

// dy, the gradient of y before the gate: dout * silu(z) where the call has z (`z` reads it, then
// only), else dout.
dsl::Value ssdGateDy(dsl::KernelBuilder& k, const SsdBwdValues& a, dsl::Value dout,
                     const std::function<dsl::Value()>& z);
// ssdGateDy of dout and z at the given offsets of (row, token, head, channel) (0 where `mask` is
// false).
dsl::Value ssdBwdDy(dsl::KernelBuilder& k, const SsdBwdValues& a, dsl::Value row, dsl::Value token, dsl::Value h,
                    dsl::Value p, dsl::Value mask);

// meta:one_term (absent: 0). 1: the f32 operands ssd_chunk_scan and ssd_chunk_state stage for
// 16-bit inputs (the entering state, the decayed scores, the weighted x) go into the mma as one
// 16-bit term, as mamba_ssm's Triton kernels cast them, instead of their exact split: fewer mma
// and conversions, a relative error of 2^-9 (bf16) an operand. Throws on other values.
bool ssdOneTerm(const Specialization& s);

// meta:wgmma (absent: 1 on sm_90a, else 0). 1: the 16-bit operands a kernel stages as a dot's b
// (chunk_scan's state terms and x's tiles, chunk_state's B tiles, the backward's dx, dCB, dB and
// dC tiles and terms) go into swizzled buffers that wgmma reads once a warpgroup, where their rows
// fit a swizzle (ssdWgmmaRows); 0: padded buffers read by ldmatrix once a warp. Throws on other
// values and on 1 for an arch without wgmma.
bool ssdWgmma(const Specialization& s);
// Whether a kernel's staged b of rows of `rowBytes` goes to wgmma: ssdWgmma, 4 warps (one
// warpgroup over a block's 64 rows) and rows of 32, 64 or 128 bytes (a swizzle's).
bool ssdWgmmaRows(const Specialization& s, int64_t rowBytes);
// A 16-bit staged dot operand b of `cols` elements a row: its row pitch and its buffer's swizzle
// (sharedBuffer's; 0 none). For wgmma, rows of exactly `cols` in the swizzle of their 2 cols bytes;
// else rows padded by 8 halves (an odd number of 16-byte units for even cols / 8, so that
// ldmatrix reads 8 rows from distinct banks), unswizzled.
struct SsdStagedRows {
  int64_t pitch, swizzle;
};
SsdStagedRows ssdStagedRows(bool wgmma, int64_t cols);

// meta:pieces (absent: 3): the bf16 terms the backward's f32 operands (the gated dy, the decayed
// scores, dCB, the staged states and gradients) take in the mma. 3 is exact to f32's 24 bits;
// 2 keeps 16 bits (a relative error near 2^-16 a product) in fewer products; 1 is the
// one 16-bit term mamba_ssm's Triton backward casts them to. Throws on other values.
int ssdBwdPieces(const Specialization& s);

// The pieces dy takes as an mma operand: one where dy is dout itself in bf16 (no z: exact in one
// term), else ssdBwdPieces'.
int ssdBwdDyPieces(const Specialization& s);

// The dtype tensor argument `tensor` is bound as; whether it is bf16 or fp16.
DType ssdDtype(const Specialization& s, const char* tensor);
bool ssdIs16Bit(const Specialization& s, const char* tensor);

// Whether the backward's ring forms can stage dy's inputs: dout 16-bit, z 16-bit or absent, and
// tiles copied whole (ssdTileCopy).
bool ssdBwdDyRings(const Specialization& s);
// The vectors in which the backward's ring forms copy dout's and z's tiles (ssdTileVector's:
// their rows along the channels; 0 where the bindings do not prove them aligned; z's 1 without
// z, which copies nothing).
struct SsdDyVectors {
  int64_t dout = 0, z = 0;
};
SsdDyVectors ssdBwdDyVectors(const Specialization& s);
// z's ring of `elements` in z's dtype; one element where the call has no z (never read).
dsl::Value ssdBwdZRing(dsl::KernelBuilder& k, const Specialization& s, int64_t elements);
// Starts copying dout's [rows, cols] tile at (row `row`, tokens tok0 .., head h, channels c0 ..)
// into os[at ..] at row pitch `pitch`, and z's into zs[at ..] where the call has z; rowsValid x
// colsValid of it, zeros past (copyTileAsync).
void ssdCopyDyTiles(dsl::KernelBuilder& k, const SsdBwdValues& a, dsl::Value os, dsl::Value zs, dsl::Value at,
                    int64_t pitch, dsl::Value row, dsl::Value tok0, dsl::Value h, dsl::Value c0, int64_t rows,
                    int64_t cols, dsl::Value rowsValid, dsl::Value colsValid, const SsdDyVectors& v);

// Splits the f32 tile v into `terms` bf16 terms at the 16-bit shared buffer's buf[off + q
// termStride], each rounded from what the ones before it leave (the thread reads its own stores).
void ssdStoreTerms(dsl::KernelBuilder& k, dsl::Value buf, dsl::Value off, int64_t termStride, int terms, dsl::Value v);
// acc + a . (the sum of ssdStoreTerms' terms at buf[q termStride], b[k][n] as dot reads it):
// term q (weight 2^-8q) against a's first terms - q of aPieces terms, as dot's splits weigh them.
dsl::Value ssdDotTerms(dsl::KernelBuilder& k, dsl::Value a, dsl::Value buf, int64_t termStride, dsl::Value strideK,
                       dsl::Value strideN, dsl::Value acc, int terms, int aPieces);

// The first slot of sequence i (Ssd.h): row * cdiv(L, Q) + start / Q (+ i packed).
dsl::Value ssdFirstSlot(dsl::KernelBuilder& k, const SsdValues& a, dsl::Value i, dsl::Value row, dsl::Value start,
                        int64_t Q);

// dt' of raw dt (+ dt_bias of the head), softplus and the clamp, as the flags say.
dsl::Value ssdDtTransform(dsl::KernelBuilder& k, const SsdValues& a, dsl::Value dt, dsl::Value bias);

// exp(min(cumI - cumJ, 0)), the decay from token j to row i of the within-chunk scores, by the
// hardware's exp2 (2 ulp; 0 below 2^-126): expf's range reduction would be most of a score's
// instructions.
dsl::Value ssdDecay(dsl::KernelBuilder& k, dsl::Value cumI, dsl::Value cumJ);

// meta:PREFETCH of the state-passing kernels (absent: 4): the chunks read ahead of the one
// combined, `least`..8 (8 chunks' state slices in registers at most). A serial walk over the
// chunks that reads each as it combines it waits on every load (docs/performance.md). Throws
// naming the kernel on other values.
int64_t ssdPrefetchMeta(Specialization& s, int64_t least);

// Every SSD kernel's defaults: 4 warps, 32-bit offsets.
void ssdDefaultMeta(Specialization& s);
// The defaults of a kernel over [BLOCK_P, BLOCK_N] blocks of a state (ssd_chunk_state,
// ssd_bwd_dstates): fp32 accumulators, 32 a thread at 64 x 64 over 4 warps.
void ssdStateBlockMeta(Specialization& s);
// A kernel whose programs pass states along a chain (ssd_chunk_state under pass_states,
// ssd_bwd_dstates): its state blocks at least the chain's flags are laid out for (Ssd.h) and the
// flat grid its tickets follow; an InvalidArgument error naming the metas otherwise.
void ssdCheckChainMeta(const Specialization& s);
// Where the log of chunk slot `slot`'s decay for head h sits in the workspace: the cumsum's last
// entry, which for a partial chunk sums the zeros past its tokens in another order than its last
// token's entry. state_passing and the chains read this one, so that their states agree bitwise.
dsl::Value ssdChunkLogDecayAt(dsl::Value oCum, dsl::Value slot, dsl::Value H, dsl::Value h, int64_t Q);
// Where the chain's flag of program (slot, h, blk) sits in the workspace (Ssd.h: ssdChainBlocks):
// its int32 word from o_flags, laid out for the smallest state blocks of P x N states.
dsl::Value ssdChainFlag(dsl::KernelBuilder& k, dsl::Value oFlags, dsl::Value P, dsl::Value N, dsl::Value H,
                        dsl::Value slot, dsl::Value h, dsl::Value blk);

}  // namespace ssmjit::kernels
