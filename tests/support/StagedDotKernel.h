// Test kernels of the shared-memory features. StagedDot, all of them together: out = a . b for a [M, K] f32 tile
// (global) and b (16-bit, global) streamed through a ring of `stages` k-tiles in a dynamic shared
// buffer by copyAsync (the tail past the runtime K masked, so zero-filled), each tile multiplied
// by a dot reading b from the buffer with ldmatrix. `nContiguous`: b stored [K][N] (n
// contiguous, .trans) in global and shared memory; else [N][K] (k contiguous). Rows of the
// buffer are padded by 8 elements. Global b rows hold kLd elements; K <= kLd, K % 8 == 0.
#pragma once
#include <functional>
#include <string>

#include "kernels_dsl/Dsl.h"
#include "kernels_dsl/Registry.h"
#include "tests/support/OwnKernel.h"

namespace ssmjit::testing {

struct StagedDot {
  int64_t M = 64, N = 128, BK = 64;
  int stages = 3;
  bool nContiguous = true;
  DType dtype = DType::BF16;
  static constexpr int64_t kLd = 256;  // a's and b's global row length (elements)

  int64_t pitch() const { return (nContiguous ? N : BK) + 8; }
  int64_t stageElems() const { return (nContiguous ? BK : N) * pitch(); }
  int64_t sharedBytes() const { return stages * stageElems() * 2; }
  std::string name() const {
    return std::string("staged_dot_") + (nContiguous ? "n" : "k") + (dtype == DType::F16 ? "_f16" : "_bf16") + "_s" +
           std::to_string(stages);
  }

  dsl::KernelDef def() const { return kernelDefOf("staged_dot", *this); }

  void build(dsl::KernelBuilder& k) const {
    using dsl::Value;
    Value a = k.ptrArg("a", dsl::PtrClass::Float), b = k.ptrArg("b", dsl::PtrClass::Float),
          out = k.ptrArg("out", dsl::PtrClass::Float);
    Value K = k.intArg("K");
    Value ring = k.sharedBuffer(stages * stageElems(), dtype);
    Value tiles = dsl::cdiv(K, k.constInt(BK));
    auto copyTile = [&](Value t) {
      Value kk = k.expandDims(k.range(BK), nContiguous ? 1 : 0), nn = k.expandDims(k.range(N), nContiguous ? 0 : 1);
      Value gk = t * BK + kk;
      Value global = nContiguous ? gk * N + nn : nn * kLd + gk;
      Value shared = (t % stages) * stageElems() + (nContiguous ? kk * pitch() + nn : nn * pitch() + kk);
      k.copyAsync(ring, shared, b, global, gk < K);
    };
    // Tiles 0 .. stages - 2 in flight before the loop; one group each, empty past the last tile.
    k.forLoop(k.constInt(0), k.constInt(stages - 1), k.constInt(1), {}, [&](Value t, const std::vector<Value>&) {
      k.ifThen(t < tiles, [&] { copyTile(t); });
      k.commitGroup();
      return std::vector<Value>{};
    });
    Value rows = k.expandDims(k.range(M), 1);
    Value acc0 = k.splat(k.constFloat(0), {M, N});
    Value acc = k.forLoop(k.constInt(0), tiles, k.constInt(1), {acc0}, [&](Value t, const std::vector<Value>& c) {
      // Tile t + stages - 1 goes into the stage tile t - 1 left (every warp passed the barrier
      // after reading it); then tile t, the oldest group, is waited for.
      Value next = t + (stages - 1);
      k.ifThen(next < tiles, [&] { copyTile(next); });
      k.commitGroup();
      k.waitGroup(stages - 1);
      k.barrier();
      Value kc = t * BK + k.expandDims(k.range(BK), 0);
      Value A = k.load(a, rows * kLd + kc, kc < K);
      Value sk = k.constInt(nContiguous ? pitch() : 1), sn = k.constInt(nContiguous ? 1 : pitch());
      Value r = k.dot(A, ring, (t % stages) * stageElems(), sk, sn, c[0], 1, 1);
      k.barrier();
      return std::vector<Value>{r};
    })[0];
    k.store(out, rows * N + k.expandDims(k.range(N), 0), acc);
  }
};

// out[r][c] = x[r][c] for rows r < R, 0 below: a [32, 64] tile of 16-bit x copied by copyAsync
// into a buffer of rows padded to 72, then widened. Outside a dot kernel the layout's runs are
// 8 elements: one 16-byte cp.async each.
inline dsl::KernelDef asyncCopyTileDef(DType dtype) {
  dsl::KernelDef d;
  d.name = "async_copy_tile";
  d.build = [dtype](dsl::KernelBuilder& k, const Specialization&) {
    using dsl::Value;
    Value x = k.ptrArg("x", dsl::PtrClass::Float), out = k.ptrArg("out", dsl::PtrClass::Float);
    Value R = k.intArg("R");
    Value buf = k.sharedBuffer(32 * 72, dtype);
    Value r = k.expandDims(k.range(32), 1), c = k.expandDims(k.range(64), 0);
    k.copyAsync(buf, r * 72 + c, x, r * 64 + c, r < R);
    k.commitGroup();
    k.waitGroup(0);
    k.barrier();
    k.store(out, r * 64 + c, k.load(buf, r * 72 + c));
  };
  return d;
}

// The tile kernels' arguments: x and out, the sizes base, S, R, C, and a shared buffer of `rows`
// rows of 64 + 8 elements of `dtype`, its [rows, 64] tile (r, c) at r 72 + c.
struct TileKernel {
  dsl::Value x, out, base, S, R, C, buf, r, c;  // r [rows, 1], c [1, 64]
};
inline dsl::KernelDef tileKernelDef(const char* name, DType dtype, int64_t rows,
                                    std::function<void(dsl::KernelBuilder&, const TileKernel&)> body) {
  dsl::KernelDef d;
  d.name = name;
  d.build = [dtype, rows, body](dsl::KernelBuilder& k, const Specialization&) {
    TileKernel t;
    t.x = k.ptrArg("x", dsl::PtrClass::Float), t.out = k.ptrArg("out", dsl::PtrClass::Float);
    t.base = k.intArg("base"), t.S = k.intArg("S"), t.R = k.intArg("R"), t.C = k.intArg("C");
    t.buf = k.sharedBuffer(rows * 72, dtype);
    t.r = k.expandDims(k.range(rows), 1), t.c = k.expandDims(k.range(64), 0);
    body(k, t);
  };
  return d;
}

// The specialisation the tile kernels compile with: x and out of these dtypes, both 16-byte
// aligned, 4 warps (launchOwnKernel replaces kernel and arch with its own).
inline Specialization tileKernelSpec(const char* kernel, DType x, DType out) {
  Specialization spec;
  spec.kernel = kernel;
  spec.arch = "sm_90a";
  spec.set("dtype:x", (int)x).set("dtype:out", (int)out);
  for (const char* p : {"x", "out"}) spec.set(std::string("align:") + p, 16);
  spec.set("meta:num_warps", 4).set("meta:index_bits", 32);
  return spec;
}

// copyTileAsync of a [rows, 64] tile of x (rows S apart from offset `base`; rows below R and
// columns below C valid) into the buffer, then the whole buffer widened into out [rows, 64].
// Rows 4 leave some of the block's threads without a vector.
inline dsl::KernelDef wholeTileCopyDef(DType dtype, int64_t rows = 32) {
  return tileKernelDef("whole_tile_copy", dtype, rows, [dtype, rows](dsl::KernelBuilder& k, const TileKernel& t) {
    k.copyTileAsync(t.buf, k.constInt(0), 72, t.x, t.base, t.S, rows, 64, t.R, t.C, 16 / dtypeBytes(dtype));
    k.commitGroup();
    k.waitGroup(0);
    k.barrier();
    k.store(t.out, t.r * 64 + t.c, k.load(t.buf, t.r * 72 + t.c));
  });
}

// x [rows, 64] (f32, contiguous) written in the kernel's layout to the buffer, then stored by
// storeTile to out (of `dtype`) at base + r S + c for r < R, c < C.
inline dsl::KernelDef tileStoreDef(DType dtype, int64_t rows = 32) {
  return tileKernelDef("tile_store", dtype, rows, [dtype, rows](dsl::KernelBuilder& k, const TileKernel& t) {
    k.store(t.buf, t.r * 72 + t.c, k.load(t.x, t.r * 64 + t.c));
    k.barrier();
    k.storeTile(t.buf, k.constInt(0), 72, t.out, t.base, t.S, rows, 64, t.R, t.C, 16 / dtypeBytes(dtype));
  });
}

// x [rows, 64] (16-bit) copied by copyTileAsync into a bf16 view over the bytes after an f32
// buffer's first rows x 72 floats, and stored widened by the threads into those first floats;
// then out [rows, 64] = the first part's values plus the view's: 2 x where neither clobbers the
// other.
inline dsl::KernelDef sharedViewDef(int64_t rows = 32) {
  dsl::KernelDef d;
  d.name = "shared_view_copy";
  d.build = [rows](dsl::KernelBuilder& k, const Specialization&) {
    using dsl::Value;
    Value x = k.ptrArg("x", dsl::PtrClass::Float), out = k.ptrArg("out", dsl::PtrClass::Float);
    Value buf = k.sharedBuffer(rows * 72 + rows * 36, DType::F32);
    Value view = k.sharedView(buf, rows * 72, rows * 72, DType::BF16);
    Value r = k.expandDims(k.range(rows), 1), c = k.expandDims(k.range(64), 0);
    k.copyTileAsync(view, k.constInt(0), 72, x, k.constInt(0), k.constInt(64), rows, 64, k.constInt(rows),
                    k.constInt(64), 8);
    k.commitGroup();
    k.store(buf, r * 72 + c, k.load(x, r * 64 + c));
    k.waitGroup(0);
    k.barrier();
    k.store(out, r * 64 + c, k.load(buf, r * 72 + c) + k.load(view, r * 72 + c));
  };
  return d;
}

// out [M, N] = a . b with both operands in 16-bit shared buffers (dot with a from shared memory):
// a [M][K] (or, aTransposed, [K][M] as x^T is) and b [K][N] copied from global memory with
// their layouts, rows padded by 8, then multiplied by ldmatrix fragments.
struct SharedDot {
  int64_t M = 64, K = 64, N = 64;
  bool aTransposed = false;
  DType dtype = DType::BF16;
  std::string name() const {
    return "shared_dot_M" + std::to_string(M) + (aTransposed ? "_aT" : "") + (dtype == DType::F16 ? "_f16" : "_bf16");
  }
  int64_t aPitch() const { return (aTransposed ? M : K) + 8; }
  dsl::KernelDef def() const {
    dsl::KernelDef d;
    d.name = "shared_dot";
    const SharedDot c = *this;
    d.build = [c](dsl::KernelBuilder& k, const Specialization&) {
      using dsl::Value;
      Value a = k.ptrArg("a", dsl::PtrClass::Float), b = k.ptrArg("b", dsl::PtrClass::Float),
            out = k.ptrArg("out", dsl::PtrClass::Float);
      const int64_t aRows = c.aTransposed ? c.K : c.M, aCols = c.aTransposed ? c.M : c.K;
      Value as = k.sharedBuffer(aRows * c.aPitch(), c.dtype), bs = k.sharedBuffer(c.K * (c.N + 8), c.dtype);
      Value ar = k.expandDims(k.range(aRows), 1), ac = k.expandDims(k.range(aCols), 0);
      k.copyAsync(as, ar * c.aPitch() + ac, a, ar * aCols + ac);
      Value br = k.expandDims(k.range(c.K), 1), bc = k.expandDims(k.range(c.N), 0);
      k.copyAsync(bs, br * (c.N + 8) + bc, b, br * c.N + bc);
      k.commitGroup();
      k.waitGroup(0);
      k.barrier();
      Value one = k.constInt(1), ap = k.constInt(c.aPitch());
      Value r = k.dot(as, k.constInt(0), c.aTransposed ? one : ap, c.aTransposed ? ap : one, c.K, bs, k.constInt(0),
                      k.constInt(c.N + 8), one, k.splat(k.constFloat(0), {c.M, c.N}));
      k.store(out, k.expandDims(k.range(c.M), 1) * c.N + k.expandDims(k.range(c.N), 0), r);
    };
    return d;
  }
};

}  // namespace ssmjit::testing
