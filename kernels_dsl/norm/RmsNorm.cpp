// RMSNorm over groups of channels, with the fused residual add of a pre-norm block and Mamba-2's
// SiLU gate before or after the norm. See RmsNorm.h for the argument contract.
#include "kernels_dsl/norm/RmsNorm.h"

#include <algorithm>
#include <string>
#include <vector>

#include "kernels_dsl/Dsl.h"
#include "kernels_dsl/Registry.h"
#include "kernels_dsl/norm/NormTiles.h"

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

// Most row elements a thread holds (in fp32 registers) between the sum and the scaling.
constexpr int64_t kMaxPerThread = 48;

void chooseMeta(Specialization& s) {
  chooseNormTiles(s, {"x", "out", "residual", "residual_out", "z"}, kMaxPerThread, "rms_norm");
}

}  // namespace

const KernelRegistration kRmsNormKernel(__FILE__, {kRmsNorm.kernel, build, chooseMeta, &kRmsNorm});

}  // namespace ssmjit::kernels
