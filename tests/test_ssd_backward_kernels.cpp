// The SSD backward's kernels on the CPU: every kernel ssd_backward launches (the forward's five
// for the recomputation, then dstates, state passing, dx, dCB, dB, dC, ddt and the sums) goes
// through the whole pipeline and NVRTC for a few shapes, dtypes and options (dense and packed
// rows, states through slots with d(final) in and d(initial) out, D per head and per channel, z
// on and off, the clamp), with the specialisations the op's own binding makes. Tensors are fake
// device addresses: only their alignment classes are read.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "GpuTest.h"  // SSMJIT_REQUIRE_NVRTC
#include "kernels_dsl/CompileKernel.h"
#include "runtime/ops/SsdBackwardSpec.h"
#include "ssmjit/ops.h"
#include "tests/support/CompileEach.h"

using namespace ssmjit;

namespace {

void* fake(int k) { return reinterpret_cast<void*>(uintptr_t{0x10000} + uintptr_t(k) * 0x10000000); }
TensorView view(int k, DType t, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(fake(k), t, shape);
}

struct Variant {
  int64_t batch = 2, L = 1000, H = 8, P = 64, G = 1, N = 128, Q = 256;
  DType x = DType::BF16;
  bool packed = false, z = true, states = false, dPerChannel = false, clamp = false;
};

SsdBackwardArgs make(const Variant& v) {
  SsdBackwardArgs b;
  SsdArgs& a = b.forward;
  const int64_t Bt = v.packed ? 1 : v.batch;
  a.x = view(1, v.x, {Bt, v.L, v.H, v.P});
  a.dt = view(2, v.x, {Bt, v.L, v.H});
  a.A = view(3, DType::F32, {v.H});
  a.B = view(4, v.x, {Bt, v.L, v.G, v.N});
  a.C = view(5, v.x, {Bt, v.L, v.G, v.N});
  a.chunk_size = static_cast<int>(v.Q);
  a.D = v.dPerChannel ? view(7, DType::F32, {v.H, v.P}) : view(7, DType::F32, {v.H});
  if (v.z) a.z = view(8, v.x, {Bt, v.L, v.H, v.P});
  a.dt_bias = view(9, DType::F32, {v.H});
  a.dt_softplus = true;
  if (v.clamp) a.dt_min = 0.001f, a.dt_max = 0.5f;
  if (v.packed) a.cu_seqlens = view(10, DType::I32, {v.batch + 1});
  if (v.states) {
    a.initial_states = view(11, DType::F32, {5, v.H, v.P, v.N});
    a.initial_state_indices = view(12, DType::I32, {v.batch});
    a.final_state_indices = view(13, DType::I64, {v.batch});
    b.dfinal_states = view(14, DType::F32, {5, v.H, v.P, v.N});
    b.dinitial_states = view(15, DType::BF16, {5, v.H, v.P, v.N});
  }
  b.dout = view(16, v.x, {Bt, v.L, v.H, v.P});
  b.dx = view(17, v.x, {Bt, v.L, v.H, v.P});
  b.ddt = view(18, v.x, {Bt, v.L, v.H});
  b.dA = view(19, DType::F32, {v.H});
  b.dB = view(20, v.x, {Bt, v.L, v.G, v.N});
  b.dC = view(21, v.x, {Bt, v.L, v.G, v.N});
  b.dD = v.dPerChannel ? view(22, DType::F32, {v.H, v.P}) : view(22, DType::F32, {v.H});
  if (v.z) b.dz = view(23, v.x, {Bt, v.L, v.H, v.P});
  b.ddt_bias = view(24, DType::F32, {v.H});
  return b;
}

// The forward's five kernels, then the backward's eight.
constexpr size_t kKernels = 13;

void expectCompiles(const Variant& v, const char* arch) {
  ssmjit::testing::expectEachCompiles(detail::ssdBackwardSpecializations(make(v), arch), kKernels);
}

}  // namespace

TEST(SsdBackwardKernels, MambaHeadsCompile) {
  SSMJIT_REQUIRE_NVRTC();
  for (DType x : {DType::BF16, DType::F32}) {
    Variant v;
    v.x = x;
    expectCompiles(v, "sm_90a");
  }
}

TEST(SsdBackwardKernels, ShapesAndOptionsCompile) {
  SSMJIT_REQUIRE_NVRTC();
  Variant v;
  v.G = 2, v.P = 32, v.N = 64, v.Q = 64, v.x = DType::F32, v.dPerChannel = true, v.z = false, v.clamp = true;
  expectCompiles(v, "sm_90a");
  v = {};
  v.P = 256, v.N = 256, v.H = 4, v.G = 4, v.Q = 128, v.x = DType::F16;
  expectCompiles(v, "sm_80");
}

TEST(SsdBackwardKernels, PackedWithStatesCompile) {
  SSMJIT_REQUIRE_NVRTC();
  Variant v;
  v.packed = true, v.batch = 5, v.states = true;
  expectCompiles(v, "sm_90a");
}
