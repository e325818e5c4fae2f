// The wgmma dot's test kernel: out [M, N] = a . b with b in a swizzled shared buffer, so that the
// dot runs on wgmma. k-contiguous: b [N][K] (f32 in memory) is stored by the threads into the
// buffer one k-tile of BK = swizzle / 2 after another (tile t's element (n, k) at t N BK + n BK +
// k), narrowing to the buffer's dtype. n-contiguous: b [K][N] (16-bit in memory, N = swizzle / 2)
// is copied by copyTileAsync as it lies, and each dot takes 32 rows of it. a [M][K] is either
// copied into a 16-bit buffer of rows padded by 8 (a dot with both operands in shared memory, a
// by ldmatrix) or loaded from memory as f32 registers split into `aPieces` terms. One dot a k-tile;
// with storeBetween, each dot but the first follows a store of zeros to out (a memory write, so
// that each dot's group is waited for on its own).
#pragma once
#include <string>

#include "kernels_dsl/Dsl.h"
#include "kernels_dsl/Registry.h"
#include "tests/support/OwnKernel.h"

namespace ssmjit::testing {

struct WgmmaDot {
  int64_t M = 64, N = 64, K = 128, swizzle = 64;
  bool aShared = true;
  bool nContiguous = false;
  bool storeBetween = false;
  int aPieces = 1;
  int warps = 4;
  DType dtype = DType::BF16;

  int64_t bk() const { return nContiguous ? 32 : swizzle / 2; }
  std::string name() const {
    return "wgmma_dot_M" + std::to_string(M) + "_N" + std::to_string(N) + "_sw" + std::to_string(swizzle) +
           (aShared ? "_ashared" : "_aregs" + std::to_string(aPieces)) + (nContiguous ? "_bn" : "_bk") +
           (dtype == DType::F16 ? "_f16" : "_bf16") + "_w" + std::to_string(warps) + (storeBetween ? "_stores" : "");
  }
  // a's dtype (16-bit where it is staged, else f32), b's (16-bit where it is copied, else f32),
  // out's f32.
  Specialization spec(const std::string& arch = "sm_90a") const {
    Specialization s;
    s.kernel = "wgmma_dot";
    s.arch = arch;
    s.set("dtype:a", (int)(aShared ? dtype : DType::F32)).set("dtype:b", (int)(nContiguous ? dtype : DType::F32));
    s.set("dtype:out", (int)DType::F32);
    for (const char* p : {"a", "b", "out"}) s.set(std::string("align:") + p, 16);
    s.set("meta:num_warps", warps).set("meta:index_bits", 32);
    return s;
  }

  dsl::KernelDef def() const { return kernelDefOf("wgmma_dot", *this); }

  void build(dsl::KernelBuilder& k) const {
    using dsl::Value;
    Value a = k.ptrArg("a", dsl::PtrClass::Float), b = k.ptrArg("b", dsl::PtrClass::Float),
          out = k.ptrArg("out", dsl::PtrClass::Float);
    const int64_t BK = bk();
    Value bs = k.sharedBuffer(N * K, dtype, swizzle);
    if (nContiguous) {
      Value n = k.constInt(N), kk = k.constInt(K);
      k.copyTileAsync(bs, k.constInt(0), N, b, k.constInt(0), n, K, N, kk, n, 8);
      k.commitGroup();
    } else {
      Value nR = k.expandDims(k.range(N), 1), kC = k.expandDims(k.range(K), 0);
      k.store(bs, (kC / BK) * (N * BK) + nR * BK + kC % BK, k.load(b, nR * K + kC));
    }
    Value mR = k.expandDims(k.range(M), 1), one = k.constInt(1);
    Value as;
    if (aShared) {
      Value mK = k.expandDims(k.range(K), 0);
      as = k.sharedBuffer(M * (K + 8), dtype);
      k.copyAsync(as, mR * (K + 8) + mK, a, mR * K + mK);
      k.commitGroup();
    }
    if (aShared || nContiguous) k.waitGroup(0);
    k.barrier(true);
    Value acc = k.splat(k.constFloat(0), {M, N});
    for (int64_t t = 0; t < K / BK; ++t) {
      if (storeBetween && t > 0) k.store(out, mR * N + k.expandDims(k.range(N), 0), k.splat(k.constFloat(0), {M, N}));
      // k-contiguous: strides (1, BK); n-contiguous: (N, 1).
      Value bOff = k.constInt(t * N * BK), sk = k.constInt(nContiguous ? N : 1), sn = k.constInt(nContiguous ? 1 : BK);
      if (aShared) {
        acc = k.dot(as, k.constInt(t * BK), k.constInt(K + 8), one, BK, bs, bOff, sk, sn, acc);
      } else {
        Value A = k.load(a, mR * K + t * BK + k.expandDims(k.range(BK), 0));
        acc = k.dot(A, bs, bOff, sk, sn, acc, aPieces, 1);
      }
    }
    k.store(out, mR * N + k.expandDims(k.range(N), 0), acc);
  }
};

}  // namespace ssmjit::testing
