// The inputs of a fake ssd call (FakeTensors.h) for the CPU tests of the SSD's specialisations,
// forward and backward: x, dt, A, B, C (fake tensors 1-5), the chunk and, packed, cu_seqlens (10).
#pragma once
#include <cstdint>

#include "ssmjit/ops.h"
#include "tests/support/FakeTensors.h"

namespace ssmjit::testing {

// `batch` sequences of L tokens (one packed row of them when `packed`), H heads of P channels, G
// groups of N states, chunk Q; x, dt, B and C of dtype x.
struct FakeSsdShape {
  int64_t batch = 2, L = 1000, H = 8, P = 64, G = 1, N = 128, Q = 256;
  DType x = DType::BF16;
  bool packed = false;
};

inline SsdArgs fakeSsdInputs(const FakeSsdShape& v) {
  SsdArgs a;
  const int64_t Bt = v.packed ? 1 : v.batch;
  a.x = fakeView(1, v.x, {Bt, v.L, v.H, v.P});
  a.dt = fakeView(2, v.x, {Bt, v.L, v.H});
  a.A = fakeView(3, DType::F32, {v.H});
  a.B = fakeView(4, v.x, {Bt, v.L, v.G, v.N});
  a.C = fakeView(5, v.x, {Bt, v.L, v.G, v.N});
  a.chunk_size = static_cast<int>(v.Q);
  if (v.packed) a.cu_seqlens = fakeView(10, DType::I32, {v.batch + 1});
  return a;
}

}  // namespace ssmjit::testing
