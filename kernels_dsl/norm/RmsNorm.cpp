// RMSNorm over groups of channels, with the fused residual add of a pre-norm block and Mamba-2's
// SiLU gate before or after the norm. See RmsNorm.h for the argument contract.
#include "kernels_dsl/norm/RmsNorm.h"

#include <algorithm>
#include <string>
#include <vector>

#include "compiler/IntMath.h"
#include "kernels_dsl/Dsl.h"
#include "kernels_dsl/MetaDefaults.h"
#include "kernels_dsl/Registry.h"
#include "ssmjit/dtype.h"
#include "ssmjit/error.h"

namespace ssmjit::kernels {
using namespace dsl;

namespace {

using Tiles = std::vector<Value>;

void build(KernelBuilder& k, const Specialization& spec) {
  const int64_t BT = spec.get("meta:BLOCK_T"), BG = spec.get("meta:BLOCK_G"), chunks = spec.get("meta:chunks");
  k.setInnerLanes(static_cast<int>(spec.get("meta:inner_lanes")));
  Value x = k.arg("x"), res = k.arg("residual"), resOut = k.arg("residual_out"), z = k.arg("z"), w = k.arg("weight"),
        out = k.arg("out");
  Value T = k.arg("T"), GS = k.arg("group_size"), eps = k.arg("eps");
  Value hasRes = k.arg("has_residual"), hasResOut = k.arg("has_residual_out"), hasZ = k.arg("has_z"),
        beforeGate = k.arg("norm_before_gate"), outIsX = k.arg("out_is_x"),
        resOutIsRes = k.arg("residual_out_is_residual");

  // Masks only where a tile may pass the end: rows with several a program, channels in the last
  // chunk when the chunks overrun the group (group_size is bound: the code knows it).
  const int64_t groupSize = spec.get("group_size");
  Value rows = k.programId(0) * BT + k.range(BT), first = k.programId(1) * GS;
  Value rowMask = BT > 1 ? k.expandDims(rows < T, 1) : Value();
  // Chunk c: channels [c * BG, (c + 1) * BG) of the group.
  std::vector<Value> cols, colMasks, masks;
  for (int64_t c = 0; c < chunks; ++c) {
    Value local = k.range(BG) + c * BG;
    cols.push_back(first + local);
    colMasks.push_back((c + 1) * BG > groupSize ? local < GS : Value());
    Value m = rowMask;
    if (colMasks.back().valid())
      m = m.valid() ? m && k.expandDims(colMasks.back(), 0) : k.expandDims(colMasks.back(), 0);
    masks.push_back(m);
  }
  // Zeros where masked: they add nothing to the sums.
  auto loadMasked = [&](Value ptr, Value offsets, Value mask) {
    return mask.valid() ? k.load(ptr, offsets, mask, k.constFloat(0)) : k.load(ptr, offsets);
  };
  auto at = [&](const char* rowStride, const char* colStride, int64_t c) {
    return k.expandDims(rows * k.arg(rowStride), 1) + k.expandDims(cols[c] * k.arg(colStride), 0);
  };
  auto loadAll = [&](Value ptr, const char* rowStride, const char* colStride) {
    Tiles t;
    for (int64_t c = 0; c < chunks; ++c) t.push_back(loadMasked(ptr, at(rowStride, colStride, c), masks[c]));
    return t;
  };
  auto zeros = [&] { return Tiles(chunks, k.splat(k.constFloat(0), {BT, BG})); };

  // Every input is read before anything is written (in place).
  Tiles r = loadAll(x, "s_x_t", "s_x_d");
  const Tiles resid = k.ifElse(
      hasRes, [&] { return loadAll(res, "s_res_t", "s_res_d"); }, zeros);
  const Tiles gate = k.ifElse(
      hasZ, [&] { return loadAll(z, "s_z_t", "s_z_d"); }, zeros);
  // The weight too, before the sum: loaded after the reduction's barrier it would add a memory
  // round trip to every program (a decode step's one-row norms are bound by that latency).
  Tiles weight;
  for (int64_t c = 0; c < chunks; ++c)
    weight.push_back(k.expandDims(loadMasked(w, cols[c] * k.arg("s_w_d"), colMasks[c]), 0));
  for (int64_t c = 0; c < chunks; ++c) r[c] = r[c] + resid[c];
  // Chunk c of an output, or of the input it replaces (in place: through the input's pointer).
  auto storeTo = [&](Value ptr, const char* rowStride, const char* colStride, Value input, const char* inRowStride,
                     const char* inColStride, Value inPlace, int64_t c, Value v) {
    k.ifThen(inPlace, [&] { k.store(input, at(inRowStride, inColStride, c), v, masks[c]); });
    k.ifThen(!inPlace, [&] { k.store(ptr, at(rowStride, colStride, c), v, masks[c]); });
  };
  k.ifThen(hasResOut, [&] {
    for (int64_t c = 0; c < chunks; ++c)
      storeTo(resOut, "s_res_out_t", "s_res_out_d", res, "s_res_t", "s_res_d", resOutIsRes, c, r[c]);
  });
  const Tiles g = k.ifElse(
      hasZ && !beforeGate,
      [&] {
        Tiles t;
        for (int64_t c = 0; c < chunks; ++c) t.push_back(r[c] * silu(gate[c]));
        return t;
      },
      [&] { return r; });

  // The chunks' squares summed elementwise, then one reduction along the channels.
  Value squares = g[0] * g[0];
  for (int64_t c = 1; c < chunks; ++c) squares = squares + g[c] * g[c];
  Value rstd = k.expandDims(k.rsqrt(k.reduce(squares, 1, "sum") / k.toFloat(GS) + eps), 1);
  for (int64_t c = 0; c < chunks; ++c) {
    Value y = g[c] * rstd * weight[c];
    y = k.ifElse(
        hasZ && beforeGate, [&] { return Tiles{y * silu(gate[c])}; }, [&] { return Tiles{y}; })[0];
    storeTo(out, "s_out_t", "s_out_d", x, "s_x_t", "s_x_d", outIsX, c, y);
  }
}

// The narrowest element among the row tensors the call reads or writes: it sets the vector width
// (16 bytes of it a thread).
int64_t narrowestBytes(const Specialization& s) {
  int64_t bytes = 4;
  auto take = [&](const char* t) {
    bytes = std::min<int64_t>(bytes, dtypeBytes(static_cast<DType>(s.get(std::string("dtype:") + t))));
  };
  take("x");
  take("out");
  if (s.get("has_residual")) take("residual");
  if (s.get("has_residual_out")) take("residual_out");
  if (s.get("has_z")) take("z");
  return bytes;
}

// Most row elements a thread holds (in fp32 registers) between the sum and the scaling.
constexpr int64_t kMaxPerThread = 48;

// The widest warps along the channels a tile of bg channels takes (every thread holds a vector).
int64_t warpsAlong(int64_t bg, int64_t vec) {
  const int64_t lanes = std::min<int64_t>(32, std::max<int64_t>(1, bg / vec));
  return std::max<int64_t>(1, bg / (vec * lanes));
}

// Bandwidth-bound: each element is read and written once, so a program holds its rows whole in
// registers and the launch only needs enough bytes in flight. A group is `chunks` tiles of BLOCK_G
// channels: the power of two that masks the fewest channels (ties: the widest; at most 8 chunks
// of at least 8 vectors) and lets one program of up to 16 warps hold a row with at most
// kMaxPerThread elements a thread (Mamba-2 2.7B's 5120 bf16 channels: 5 chunks of 1024, none
// masked, 4 warps; its groups of 640: 5 chunks of 128).
// A row of at least 2048 elements is one program, with the fewest warps that hold it; shorter
// rows share a program of 4 warps, about 2048 elements (enough rows to put every warp on them).
void chooseMeta(Specialization& s) {
  const int64_t GS = s.get("group_size"), vec = 16 / narrowestBytes(s);
  setDefault(s, "meta:index_bits", 32);
  if (!s.find("meta:BLOCK_G")) {
    int64_t best = nextPow2(GS), bestWaste = best - GS;
    for (int64_t bg = best / 2; bg >= 1; bg /= 2) {
      const int64_t n = (GS + bg - 1) / bg, waste = n * bg - GS;
      if (n > 8 || bg < 8 * vec || n * bg > kMaxPerThread * 32 * std::min<int64_t>(16, warpsAlong(bg, vec))) break;
      if (waste < bestWaste) best = bg, bestWaste = waste;
    }
    s.set("meta:BLOCK_G", best);
  }
  const int64_t BG = s.get("meta:BLOCK_G");
  if (!isPow2(BG))
    throw Error(Error::Kind::InvalidArgument,
                "rms_norm: meta BLOCK_G (SSMJIT_META) is " + std::to_string(BG) + ", expected a power of two");
  setDefault(s, "meta:chunks", (GS + BG - 1) / BG);
  const int64_t row = s.get("meta:chunks") * BG;
  if (row < GS)
    throw Error(Error::Kind::InvalidArgument,
                "rms_norm: meta chunks (SSMJIT_META) is " + std::to_string(s.get("meta:chunks")) + " of BLOCK_G " +
                    std::to_string(BG) + ", expected them to cover group_size " + std::to_string(GS));
  const int64_t lanes = std::min<int64_t>(32, std::max<int64_t>(1, BG / vec));
  setDefault(s, "meta:inner_lanes", lanes);
  if (row >= 2048) {
    int64_t warps = 1;
    while (warps < 16 && row > kMaxPerThread * 32 * warps) warps *= 2;
    setDefault(s, "meta:num_warps", std::min(warps, warpsAlong(BG, vec)));
    setDefault(s, "meta:BLOCK_T", 1);
  } else {
    setDefault(s, "meta:num_warps", 4);
    // Rows enough that the warps the channels cannot take go down the rows.
    const int64_t warps = s.get("meta:num_warps"), alongRows = std::max<int64_t>(1, warps / warpsAlong(BG, vec));
    if (!s.find("meta:BLOCK_T"))
      s.set("meta:BLOCK_T", std::max<int64_t>((32 / lanes) * alongRows, std::max<int64_t>(1, 2048 / nextPow2(row))));
  }
  if (!isPow2(s.get("meta:BLOCK_T")))
    throw Error(Error::Kind::InvalidArgument, "rms_norm: meta BLOCK_T (SSMJIT_META) is " +
                                                  std::to_string(s.get("meta:BLOCK_T")) + ", expected a power of two");
}

}  // namespace

const KernelRegistration kRmsNormKernel(__FILE__, {kRmsNorm.kernel, build, chooseMeta, &kRmsNorm});

}  // namespace ssmjit::kernels
