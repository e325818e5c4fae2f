// The DSL's dot on the GPU: out = acc + a . b on the tensor cores against a float64 product, on
// fresh random data with out poisoned, across the shapes the mma layout handles differently (two
// rows a thread, one, rows replicated over warps, four; a half k-step of 8; b as [k][n] and
// transposed; a loaded from bf16 and used as its pairs) and the bf16 pieces an operand takes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "GpuTest.h"
#include "kernels_dsl/CompileKernel.h"
#include "kernels_dsl/Dsl.h"
#include "kernels_dsl/Registry.h"
#include "runtime/DeviceBuffer.h"
#include "runtime/Driver.h"

namespace ssmjit {
namespace {

using dsl::KernelBuilder;
using dsl::Value;

struct DotCase {
  int64_t M, K, N;
  int pa, pb;
  int aBits, bBits;    // significand bits of the random data: 8 (bf16), 11 (fp16), 24 (f32)
  bool bTransposed;    // b[k][n] at n * K + k instead of k * N + n
  bool aBf16 = false;  // a stored as bf16
  std::string name() const {
    return "M" + std::to_string(M) + "_K" + std::to_string(K) + "_N" + std::to_string(N) + "_p" + std::to_string(pa) +
           std::to_string(pb) + "_bits" + std::to_string(aBits) + "_" + std::to_string(bBits) +
           (bTransposed ? "_bT" : "") + (aBf16 ? "_abf16" : "");
  }
};

float withBits(float v, int bits) {  // v rounded to `bits` significant bits (nearest)
  if (bits >= 24 || v == 0) return v;
  int e;
  std::frexp(v, &e);
  const double q = std::ldexp(1.0, e - bits);
  return static_cast<float>(std::nearbyint(v / q) * q);
}
uint16_t bf16Bits(float v) {  // v must already be bf16-exact
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return static_cast<uint16_t>(u >> 16);
}

// Runs the dot once and returns the largest error relative to sum |a b| + |acc| of its element.
double worstRelativeError(const DotCase& c, uint64_t seed) {
  dsl::KernelDef def;
  def.name = "dot_gpu_test";
  def.build = [&](KernelBuilder& k, const Specialization&) {
    Value a = k.ptrArg("a", dsl::PtrClass::Float), b = k.ptrArg("b", dsl::PtrClass::Float),
          acc = k.ptrArg("acc", dsl::PtrClass::Float), out = k.ptrArg("out", dsl::PtrClass::Float);
    Value rows = k.expandDims(k.range(c.M), 1);
    Value A = k.load(a, rows * c.K + k.expandDims(k.range(c.K), 0));
    Value cOff = rows * c.N + k.expandDims(k.range(c.N), 0);
    Value sk = k.constInt(c.bTransposed ? 1 : c.N), sn = k.constInt(c.bTransposed ? c.K : 1);
    k.store(out, cOff, k.dot(A, b, k.constInt(0), sk, sn, k.load(acc, cOff), c.pa, c.pb));
  };
  Specialization spec;
  spec.kernel = def.name;
  spec.arch = driver::currentArch();
  spec.set("dtype:a", (int)(c.aBf16 ? DType::BF16 : DType::F32));
  for (const char* p : {"b", "acc", "out"}) spec.set(std::string("dtype:") + p, (int)DType::F32);
  for (const char* p : {"a", "b", "acc", "out"}) spec.set(std::string("align:") + p, 16);
  spec.set("meta:num_warps", 4).set("meta:index_bits", 32);
  const CompiledKernel ck = compileKernel(def, spec);

  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-2.f, 2.f);
  std::vector<float> a(c.M * c.K), b(c.K * c.N), acc(c.M * c.N);
  for (float& v : a) v = withBits(u(rng), c.aBf16 ? 8 : c.aBits);
  for (float& v : b) v = withBits(u(rng), c.bBits);
  for (float& v : acc) v = u(rng);
  std::vector<uint16_t> aHalf;
  for (float v : a) aHalf.push_back(bf16Bits(v));
  DeviceBuffer da = c.aBf16 ? DeviceBuffer::fromHost(aHalf) : DeviceBuffer::fromHost(a);
  DeviceBuffer db = DeviceBuffer::fromHost(b), dacc = DeviceBuffer::fromHost(acc);
  DeviceBuffer dout = DeviceBuffer::fromHost(std::vector<float>(c.M * c.N, std::nanf("")));

  const driver::Api& api = driver::api();
  CUmodule mod = nullptr;
  CUfunction fn = nullptr;
  driver::check(api.cuModuleLoadDataEx(&mod, ck.cubin.data(), 0, nullptr, nullptr), "cuModuleLoadDataEx(dot)");
  driver::check(api.cuModuleGetFunction(&fn, mod, ck.entry.c_str()), "cuModuleGetFunction(dot)");
  std::vector<CUdeviceptr> ptrs;
  for (const KernelParam& p : ck.params) {
    EXPECT_EQ(p.kind, KernelParam::Kind::Ptr) << p.name;
    ptrs.push_back(p.name == "a" ? da.ptr() : p.name == "b" ? db.ptr() : p.name == "acc" ? dacc.ptr() : dout.ptr());
  }
  std::vector<void*> args;
  for (CUdeviceptr& p : ptrs) args.push_back(&p);
  driver::check(api.cuLaunchKernel(fn, 1, 1, 1, ck.numThreads, 1, 1, 0, nullptr, args.data(), nullptr),
                "cuLaunchKernel(dot)");
  driver::check(api.cuCtxSynchronize(), "cuCtxSynchronize(dot)");
  const std::vector<float> out = dout.download<float>();
  api.cuModuleUnload(mod);

  double worst = 0;
  for (int64_t i = 0; i < c.M; ++i)
    for (int64_t j = 0; j < c.N; ++j) {
      double ref = acc[i * c.N + j], scale = std::fabs(acc[i * c.N + j]);
      for (int64_t k = 0; k < c.K; ++k) {
        const double bv = b[c.bTransposed ? j * c.K + k : k * c.N + j];
        ref += double(a[i * c.K + k]) * bv;
        scale += std::fabs(double(a[i * c.K + k]) * bv);
      }
      const double got = out[i * c.N + j];
      if (std::isnan(got)) return INFINITY;
      worst = std::max(worst, std::fabs(got - ref) / scale);
    }
  return worst;
}

class DslDotGpu : public testing::GpuTest {};

TEST_F(DslDotGpu, MatchesFloat64Product) {
  // Pieces that hold the data exactly: every product exact, f32 sums (errors near 2^-24 K).
  const DotCase cases[] = {
      {64, 128, 16, 3, 1, 24, 8, false},      // two rows a thread, f32 a, bf16 b
      {64, 16, 128, 3, 3, 24, 24, true},      // f32 both, b transposed
      {16, 64, 16, 1, 1, 8, 8, false},        // 16 rows: replicated over the warps
      {32, 8, 8, 2, 2, 11, 11, false},        // one row a thread, a half k-step, fp16 data
      {128, 32, 32, 3, 2, 24, 11, true},      // four rows a thread
      {64, 32, 16, 1, 1, 8, 8, false, true},  // a stored as bf16: its loaded pairs
  };
  uint64_t seed = 17;
  for (const DotCase& c : cases) {
    SCOPED_TRACE(c.name());
    EXPECT_LE(worstRelativeError(c, seed++), 1e-5);
  }
}

TEST_F(DslDotGpu, FewerPiecesThanTheDataNeedsLoseItsLowBits) {
  // f32 data as one bf16 term: the products keep 8 bits of a, so the sums drift by ~2^-9.
  const DotCase c{64, 64, 16, 1, 1, 24, 24, false};
  EXPECT_GT(worstRelativeError(c, 99), 1e-4);
}

}  // namespace
}  // namespace ssmjit
