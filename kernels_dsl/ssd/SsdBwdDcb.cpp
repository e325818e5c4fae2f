// ssd_bwd_dcb (SsdBackward.h): the gradient of CB for a chunk's 64 x 64 block (i, j), j <= i,
//   dCB_ij = sum over the group's heads h, in order, of exp(cum_i - cum_j) dt'_j dy_i . x_j,
// on the tensor cores: per head, dy [64 rows i, 32 channels] (fp32: meta:pieces terms) times x^T
// [32 channels, 64 tokens j] (zeros past the chunk and the channels), then decayed and masked
// (j > i: 0). fp32 to the dcb plane; blocks above the diagonal skipped.
// With 16-bit x, dout and z whose rows the bindings prove aligned, the tiles of x, dout and z
// ([64 tokens, 32 channels] as they lie) arrive through cp.async rings two steps ahead of their
// use, over the heads' channel steps in one sequence, and x is read by ldmatrix. Otherwise x is
// staged through an f32 buffer and dout and z are read from memory.
#include "kernels_dsl/Dsl.h"
#include "kernels_dsl/Registry.h"
#include "kernels_dsl/ssd/Ssd.h"
#include "kernels_dsl/ssd/SsdBackward.h"
#include "kernels_dsl/ssd/SsdChunks.h"

namespace ssmjit::kernels {
using namespace dsl;

namespace {

constexpr int64_t kChannels = 32;  // channels a step of the product
constexpr int kStages = 3;         // the rings' (16-bit tiles)
// A 16-bit tile's row pitch: 32 channels and 8 halves of padding, an odd number of 16-byte units.
constexpr int64_t kPitch16 = kChannels + 8;

// The decayed, masked product of head h added to the running total.
Value addHead(KernelBuilder& k, const SsdBwdValues& a, const SsdPairBlock& b, int64_t Q, Value h, Value iR, Value jC,
              Value dots, Value total) {
  Value zero = k.constFloat(0);
  Value mI = iR < b.ch.n, mJ = jC < b.ch.n, keep = (jC <= iR) && mI && mJ;
  Value wsRow = (b.slot * a.H + h) * Q;
  Value cumI = k.load(a.ws, a.oCum + wsRow + iR, mI, zero);
  Value cumJ = k.load(a.ws, a.oCum + wsRow + jC, mJ, zero), dtJ = k.load(a.ws, a.oDt + wsRow + jC, mJ, zero);
  return total + k.select(keep, dots * ssdDecay(k, cumI, cumJ) * dtJ, zero);
}

// The vectors of the ring form's copies of x, dout and z: all 0 where a tensor is not 16-bit or
// the bindings do not prove a copy aligned (the staged form).
struct RingVectors {
  int64_t x = 0;
  SsdDyVectors dy;
};
RingVectors ringVectors(const Specialization& spec) {
  if (!(ssdIs16Bit(spec, "x") && ssdBwdDyRings(spec))) return {};
  RingVectors v{ssdTileVector(spec, "x", "s_x_p", {"s_x_b", "s_x_l", "s_x_h"}), ssdBwdDyVectors(spec)};
  return v.x && v.dy.dout && v.dy.z ? v : RingVectors{};
}

void buildDcb(KernelBuilder& k, const Specialization& spec) {
  const int64_t Q = spec.get("meta:chunk"), T = kSsdTokenBlock;
  const SsdBwdValues a = ssdBwdValues(k);
  const SsdPairBlock b = ssdPairBlock(k, a, Q, ssdSlotHeadBlock(k, spec, a.H / a.hpg, k.constInt((Q / T) * (Q / T))));
  const SsdChunk& ch = b.ch;
  Value zero = k.constFloat(0), zeroI = k.constInt(0), oneI = k.constInt(1);
  Value G = a.H / a.hpg;
  Value iR = b.bi * T + k.expandDims(k.range(T), 1), jC = b.bj * T + k.expandDims(k.range(T), 0);  // [T, 1], [1, T]
  Value cR = k.expandDims(k.range(kChannels), 1), cC = k.expandDims(k.range(kChannels), 0);        // [32, 1], [1, 32]
  Value mI = iR < ch.n, mJ = jC < ch.n;
  const int px = dotPieces(spec, "x"), pf = ssdBwdPieces(spec);
  const RingVectors v = ringVectors(spec);
  Value total;
  if (v.x) {
    const int64_t stage = T * kPitch16;
    // x's tiles, the dot's b: swizzled in rows of 32 channels for wgmma (ssdWgmmaRows), else padded.
    const bool wgmma = ssdWgmmaRows(spec, 2 * kChannels);
    const SsdStagedRows xRows = ssdStagedRows(wgmma, kChannels);
    const int64_t xPitch = xRows.pitch, xStage = T * xPitch;
    Value xs = k.sharedBuffer(kStages * xStage, ssdDtype(spec, "x"), xRows.swizzle);
    Value os = k.sharedBuffer(kStages * stage, ssdDtype(spec, "dout")), zs = ssdBwdZRing(k, spec, kStages * stage);
    Value nC = cdiv(a.P, k.constInt(kChannels)), steps = a.hpg * nC;
    Value i0 = b.bi * T, j0 = b.bj * T;
    // Step t: head g hpg + t / nC, channels (t % nC) 32 .. ; its three tiles into stage t % 3.
    auto copy = [&](Value t) {
      Value h = b.g * a.hpg + t / nC, c0 = (t % nC) * kChannels, at = (t % kStages) * stage;
      k.copyTileAsync(xs, (t % kStages) * xStage, xPitch, a.x, ch.row * a.sXb + (ch.t0 + j0) * a.sXl + h * a.sXh + c0,
                      a.sXl, T, kChannels, ch.n - j0, a.P - c0, v.x);
      ssdCopyDyTiles(k, a, os, zs, at, kPitch16, ch.row, ch.t0 + i0, h, c0, T, kChannels, ch.n - i0, a.P - c0, v.dy);
    };
    for (int64_t t = 0; t < kStages - 1; ++t) {
      k.ifThen(k.constInt(t) < steps, [&] { copy(k.constInt(t)); });
      k.commitGroup();
    }
    Value tileOff = k.expandDims(k.range(T), 1) * kPitch16 + cC;  // [T, 32] in a stage
    total = k.forLoop(zeroI, a.hpg, oneI, {k.splat(zero, {T, T})}, [&](Value hh, const std::vector<Value>& tot) {
      Value dots = k.forLoop(zeroI, nC, oneI, {k.splat(zero, {T, T})}, [&](Value c, const std::vector<Value>& acc) {
        Value t = hh * nC + c, next = t + (kStages - 1);
        k.ifThen(next < steps, [&] { copy(next); });
        k.commitGroup();
        k.waitGroup(kStages - 1);
        k.barrier(wgmma);
        Value at = (t % kStages) * stage;
        Value dy = ssdGateDy(k, a, k.load(os, at + tileOff), [&] { return k.load(zs, at + tileOff); });
        Value r = k.dot(dy, xs, (t % kStages) * xStage, oneI, k.constInt(xPitch), acc[0], ssdBwdDyPieces(spec), 1);
        k.barrier();  // stage t % 3 is read before step t + 1 copies into it
        return std::vector<Value>{r};
      })[0];
      return std::vector<Value>{addHead(k, a, b, Q, b.g * a.hpg + hh, iR, jC, dots, tot[0])};
    })[0];
  } else {
    const int64_t LDs = T + 4;
    Value smem = k.sharedBuffer(kChannels * LDs);
    total = k.forLoop(zeroI, a.hpg, oneI, {k.splat(zero, {T, T})}, [&](Value hh, const std::vector<Value>& t) {
      Value h = b.g * a.hpg + hh;
      Value dots = k.forLoop(
          zeroI, a.P, k.constInt(kChannels), {k.splat(zero, {T, T})}, [&](Value c0, const std::vector<Value>& c) {
            Value pR = c0 + cR;
            Value xt = k.load(a.x, ch.row * a.sXb + (ch.t0 + jC) * a.sXl + h * a.sXh + pR * a.sXp, mJ && (pR < a.P),
                              zero);  // [32 channels, T tokens j]
            k.barrier();
            k.store(smem, cR * LDs + k.expandDims(k.range(T), 0), xt);
            k.barrier();
            Value pC = c0 + cC;
            Value dy = ssdBwdDy(k, a, ch.row, ch.t0 + iR, h, pC, mI && (pC < a.P));  // [T, 32]
            return std::vector<Value>{k.dot(dy, smem, zeroI, k.constInt(LDs), k.constInt(1), c[0], pf, px)};
          })[0];
      return std::vector<Value>{addHead(k, a, b, Q, h, iR, jC, dots, t[0])};
    })[0];
  }
  k.store(a.ws, a.oDcb + ((b.slot * G + b.g) * Q + iR) * Q + jC, total);
}

void chooseDcbMeta(Specialization& s) {
  ssdDefaultMeta(s);
  ssdSlotHeadMeta(s);
  // The ring form at three blocks an SM (168 registers, 8 bytes spilled at Mamba-2 heads, bf16):
  // 2-3% off the backward (docs/performance.md). The staged form would spill hundreds of bytes.
  if (!s.find("meta:min_blocks") && ringVectors(s).x) s.set("meta:min_blocks", 3);
}

}  // namespace

const KernelRegistration kBwdDcb(__FILE__, {kSsdBwdDcb.kernel, buildDcb, chooseDcbMeta, &kSsdBwdDcb});

}  // namespace ssmjit::kernels
