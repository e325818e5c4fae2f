// The gradients of the grouped (gated) RMSNorm: dx, dz and dweight's partial sums per program,
// then their fixed-order sum. See RmsNormBackward.h for the argument contract.
#include "kernels_dsl/norm/RmsNormBackward.h"

#include <vector>

#include "kernels_dsl/Dsl.h"
#include "kernels_dsl/MetaDefaults.h"
#include "kernels_dsl/Registry.h"
#include "kernels_dsl/norm/NormTiles.h"

namespace ssmjit::kernels {
using namespace dsl;

namespace {

using Tiles = std::vector<Value>;

// One group's columns: chunk c holds channels [c * BG, (c + 1) * BG) of the group, masked only in
// a last chunk that overruns it (group_size is bound: the code knows which).
struct GroupColumns {
  Tiles cols, masks;
};

GroupColumns groupColumns(KernelBuilder& k, Value first, int64_t groupSize, int64_t BG, int64_t chunks) {
  GroupColumns g;
  for (int64_t c = 0; c < chunks; ++c) {
    Value local = k.range(BG) + c * BG;
    g.cols.push_back(first + local);
    g.masks.push_back((c + 1) * BG > groupSize ? local < k.arg("group_size") : Value());
  }
  return g;
}

// A program walks its row tiles with dweight's partial sums carried in the loop; each tile is read
// whole (two reductions along its rows) before its dx and dz are written.
void build(KernelBuilder& k, const Specialization& spec) {
  const int64_t BT = spec.get("meta:BLOCK_T"), BG = spec.get("meta:BLOCK_G"), chunks = spec.get("meta:chunks");
  k.setInnerLanes(static_cast<int>(spec.get("meta:inner_lanes")));
  Value x = k.arg("x"), z = k.arg("z"), w = k.arg("weight"), dy = k.arg("dout"), dx = k.arg("dx"), dz = k.arg("dz"),
        ws = k.arg("ws");
  Value T = k.arg("T"), GS = k.arg("group_size"), eps = k.arg("eps"), programs = k.arg("row_programs");
  Value hasZ = k.arg("has_z"), normFirst = k.arg("norm_before_gate");
  const GroupColumns g = groupColumns(k, k.programId(1) * GS, spec.get("group_size"), BG, chunks);
  Value zero = k.constFloat(0), one = k.constFloat(1);

  Tiles sums(chunks, k.splat(zero, {BT, BG}));
  sums = k.forLoop(k.programId(0) * BT, T, programs * BT, sums, [&](Value r0, const Tiles& acc) {
    Value rows = r0 + k.range(BT);
    // Rows past T only where a program takes several (a lone row's loop bound keeps it below T).
    Value rowMask = BT > 1 ? k.expandDims(rows < T, 1) : Value();
    Tiles masks;
    for (int64_t c = 0; c < chunks; ++c) {
      Value m = g.masks[c].valid() ? k.expandDims(g.masks[c], 0) : Value();
      masks.push_back(rowMask.valid() && m.valid() ? rowMask && m : rowMask.valid() ? rowMask : m);
    }
    auto at = [&](const char* rowStride, const char* colStride, int64_t c) {
      return k.expandDims(rows * k.arg(rowStride), 1) + k.expandDims(g.cols[c] * k.arg(colStride), 0);
    };
    // Zeros where masked: they add nothing to the sums.
    auto loadAll = [&](Value ptr, const char* rowStride, const char* colStride) {
      Tiles t;
      for (int64_t c = 0; c < chunks; ++c) {
        Value offs = at(rowStride, colStride, c);
        t.push_back(masks[c].valid() ? k.load(ptr, offs, masks[c], zero) : k.load(ptr, offs));
      }
      return t;
    };
    auto ones = [&] { return Tiles(chunks, k.splat(one, {BT, BG})); };
    const Tiles xs = loadAll(x, "s_x_t", "s_x_d"), dys = loadAll(dy, "s_dy_t", "s_dy_d");
    const Tiles zs = k.ifElse(
        hasZ, [&] { return loadAll(z, "s_z_t", "s_z_d"); }, ones);
    Tiles gate, h;
    for (int64_t c = 0; c < chunks; ++c) {
      gate.push_back(k.ifElse(
          hasZ, [&] { return Tiles{silu(zs[c])}; },
          [&] {
            return Tiles{k.splat(one, {BT, BG})};
          })[0]);
      h.push_back(k.ifElse(
          normFirst, [&] { return Tiles{xs[c]}; }, [&] { return Tiles{xs[c] * gate[c]}; })[0]);
    }
    Value squares = h[0] * h[0];
    for (int64_t c = 1; c < chunks; ++c) squares = squares + h[c] * h[c];
    Value rstd = k.expandDims(k.rsqrt(k.reduce(squares, 1, "sum") / k.toFloat(GS) + eps), 1);
    // The weight per tile (an L1 hit after the first): held across the loop it would take a row's
    // worth of registers more than a thread has at 16 warps.
    Tiles weight;
    for (int64_t c = 0; c < chunks; ++c) {
      Value offs = g.cols[c] * k.arg("s_w_d");
      weight.push_back(k.expandDims(g.masks[c].valid() ? k.load(w, offs, g.masks[c], zero) : k.load(w, offs), 0));
    }
    Tiles n, gn, dn;
    for (int64_t c = 0; c < chunks; ++c) {
      n.push_back(h[c] * rstd);
      gn.push_back(k.ifElse(
          normFirst, [&] { return Tiles{dys[c] * gate[c]}; }, [&] { return Tiles{dys[c]}; })[0]);
      dn.push_back(gn[c] * weight[c]);
    }
    Value dots = dn[0] * n[0];
    for (int64_t c = 1; c < chunks; ++c) dots = dots + dn[c] * n[c];
    Value meanDot = k.expandDims(k.reduce(dots, 1, "sum") / k.toFloat(GS), 1);
    Tiles next;
    for (int64_t c = 0; c < chunks; ++c) {
      Value dh = rstd * (dn[c] - n[c] * meanDot);
      Value dxv = k.ifElse(
          normFirst, [&] { return Tiles{dh}; }, [&] { return Tiles{dh * gate[c]}; })[0];
      k.store(dx, at("s_dx_t", "s_dx_d", c), dxv, masks[c]);
      k.ifThen(hasZ, [&] {
        Value sig = sigmoid(zs[c]), dsilu = sig * (one + zs[c] * (one - sig));
        Value dzv = k.ifElse(
            normFirst, [&] { return Tiles{dys[c] * n[c] * weight[c] * dsilu}; },
            [&] { return Tiles{dh * xs[c] * dsilu}; })[0];
        k.store(dz, at("s_dz_t", "s_dz_d", c), dzv, masks[c]);
      });
      next.push_back(acc[c] + gn[c] * n[c]);
    }
    return next;
  });
  // This program's partial sums of dweight, reduced along its rows, to its row of ws.
  Value p = k.programId(0);
  for (int64_t c = 0; c < chunks; ++c)
    k.store(ws, p * k.arg("s_ws_p") + g.cols[c] * k.arg("s_ws_d"), k.reduce(sums[c], 0, "sum"), g.masks[c]);
}

// dweight = ws summed over its rows in order: [BLOCK_P x BLOCK_D] tiles element-wise, then along
// the partials.
void buildReduce(KernelBuilder& k, const Specialization& spec) {
  const int64_t BD = spec.get("meta:BLOCK_D"), BP = spec.get("meta:BLOCK_P");
  Value ws = k.arg("ws"), dw = k.arg("dweight"), D = k.arg("D"), P = k.arg("partials");
  Value offsD = k.programId(0) * BD + k.range(BD), maskD = offsD < D;
  Value zero = k.constFloat(0), rP = k.expandDims(k.range(BP), 1);
  Value cols = k.expandDims(offsD * k.arg("s_ws_d"), 0), mD = k.expandDims(maskD, 0);
  Value sum = k.forLoop(k.constInt(0), P, k.constInt(BP), {k.splat(zero, {BP, BD})}, [&](Value p0, const Tiles& c) {
    Value pv = p0 + rP;
    return Tiles{c[0] + k.load(ws, pv * k.arg("s_ws_p") + cols, (pv < P) && mD, zero)};
  })[0];
  k.store(dw, offsD * k.arg("s_dw_d"), k.reduce(sum, 0, "sum"), maskD);
}

// At most 16 row elements a thread: a tile holds x, z and dout (and dweight's sums) at once.
constexpr int64_t kMaxPerThread = 16;

void chooseMeta(Specialization& s) { chooseNormTiles(s, {"x", "z", "dout", "dx"}, kMaxPerThread, "rms_norm_bwd"); }

void chooseReduceMeta(Specialization& s) {
  setDefaults(s, {{"meta:num_warps", 4}, {"meta:BLOCK_D", 64}, {"meta:BLOCK_P", 32}, {"meta:index_bits", 32}});
}

}  // namespace

const KernelRegistration kRmsNormBwdKernel(__FILE__, {kRmsNormBwd.kernel, build, chooseMeta, &kRmsNormBwd});
const KernelRegistration kRmsNormBwdReduceKernel(__FILE__, {kRmsNormBwdReduce.kernel, buildReduce, chooseReduceMeta,
                                                            &kRmsNormBwdReduce});

}  // namespace ssmjit::kernels
