// RMSNorm on the GPU against the float64 reference: fresh random inputs, poisoned outputs, rows
// of 0, 1, 7 and 1000 tokens, 64 to 8192 channels (200: not a multiple of a vector), every dtype,
// the residual add with residual_out separate or in place over the residual, out in place over x,
// groups of 1 and 8 with the gate before or after the norm, padded rows and offset data.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "GpuTest.h"
#include "ssmjit/ops.h"
#include "ssmjit/reference.h"
#include "tools/problems/ConvProblem.h"  // DeviceTensors
#include "tools/problems/NormProblem.h"

using namespace ssmjit;
using namespace ssmjit::testing;

namespace {

// all()'s index of each tensor (NormProblem.h).
enum : size_t { kX = 0, kResidual = 1, kResidualOut = 2, kOut = 5 };

void runAndCompare(const NormCase& c) {
  NormProblem ref(c), gpu(c);
  DeviceTensors d(gpu.all());
  if (c.gated) {
    reference::gated_rms_norm(ref.gatedArgs());
    gated_rms_norm(gpu.gatedArgs(d.viewer()));
  } else {
    reference::rms_norm(ref.rmsArgs());
    rms_norm(gpu.rmsArgs(d.viewer()));
  }
  checkDeviceErrors();
  const std::vector<char> rows(static_cast<size_t>(c.T), 1);
  // A few fp32 operations an element and a sum of up to 8192 squares (a run of at most 48 a
  // thread, then a tree), the gate's hardware exp2 and reciprocal: the short fp32 bound.
  const size_t out = c.outInPlace ? kX : kOut;
  expectWithin(compareTensor(c.outInPlace ? ref.x : ref.out, d.download(out), rows), bound(c.xType, kFp32Short), "out");
  if (c.residualOut) {
    const size_t k = c.residualInPlace ? kResidual : kResidualOut;
    expectWithin(compareTensor(c.residualInPlace ? ref.residual : ref.residualOut, d.download(k), rows),
                 bound(c.residualType, kFp32Short), "residual_out");
  }
  // The inputs that are not also outputs are as they were, bit for bit.
  const std::vector<char> none(static_cast<size_t>(c.T), 0);
  if (!c.outInPlace) expectWithin(compareTensor(ref.x, d.download(kX), none), bound(c.xType, kExact), "x unchanged");
  if (c.residual && !c.residualInPlace)
    expectWithin(compareTensor(ref.residual, d.download(kResidual), none), bound(c.residualType, kExact),
                 "residual unchanged");
}

// The widths of both matrices, and case k's dtypes: x takes bf16, fp32 and fp16 in turn, the
// weight fp32 on odd k and x's dtype on even k.
constexpr int64_t kDims[] = {64, 200, 2560, 5120, 8192};
NormCase typedCase(int k) {
  const DType types[] = {DType::BF16, DType::F32, DType::F16};
  NormCase c;
  c.xType = types[k % 3];
  c.weightType = k % 2 ? DType::F32 : c.xType;
  return c;
}

std::vector<NormCase> rmsCases() {
  std::vector<NormCase> out;
  uint64_t seed = 1;
  int k = 0;
  for (int64_t D : kDims)
    for (int64_t T : {0, 1, 7, 1000})
      for (int residual = 0; residual < 4; ++residual, ++k) {
        NormCase c = typedCase(k);
        // 0: none; 1: residual in x's dtype, no residual_out; 2: fp32 residual_out separate
        // (residual_in_fp32); 3: fp32 residual updated in place.
        c.residual = residual == 1 || residual == 3;
        c.residualOut = residual >= 2;
        c.residualInPlace = residual == 3;
        c.residualType = residual == 1 ? c.xType : DType::F32;
        c.T = T;
        c.D = D;
        c.seed = seed++;
        out.push_back(c);
      }
  NormCase c;  // out in place over x, padded rows
  c.T = 7;
  c.D = 200;
  c.residual = c.residualOut = c.residualInPlace = true;
  c.outInPlace = true;
  c.rows.padded = true;
  c.seed = seed++;
  out.push_back(c);
  c.D = 5120;
  c.T = 1000;
  c.rows = Layout{false, false, true};  // data one element into the allocation: no 16-byte vectors
  c.outInPlace = false;
  c.seed = seed++;
  out.push_back(c);
  c.rows = Layout{true, false, true};
  c.residualType = DType::BF16;
  c.seed = seed++;
  out.push_back(c);
  return out;
}

std::vector<NormCase> gatedCases() {
  std::vector<NormCase> out;
  uint64_t seed = 100;
  int k = 0;
  for (int64_t D : kDims)
    for (int64_t groups : {1, 8})
      for (NormGate gate : {NormGate::None, NormGate::GateFirst, NormGate::NormFirst}) {
        if (D % groups != 0) continue;
        NormCase c = typedCase(k);
        c.gated = true;
        c.T = std::vector<int64_t>{0, 1, 7, 1000}[static_cast<size_t>(k % 4)];
        if (D == 5120 && groups == 8) c.T = 1000;  // Mamba-2 2.7B's groups, on many rows
        c.D = D;
        c.groups = groups;
        c.gate = gate;
        c.seed = seed++;
        ++k;
        out.push_back(c);
      }
  NormCase c;  // out in place over x, padded rows
  c.gated = true;
  c.T = 7;
  c.D = 2560;
  c.groups = 8;
  c.gate = NormGate::GateFirst;
  c.outInPlace = true;
  c.rows.padded = true;
  c.seed = seed++;
  out.push_back(c);
  c.D = 200;
  c.groups = 1;
  c.T = 1000;
  c.gate = NormGate::NormFirst;
  c.rows = Layout{true, false, true};
  c.outInPlace = false;
  c.seed = seed++;
  out.push_back(c);
  return out;
}

SSMJIT_REFERENCE_MATRIX(RmsNormGpu, NormCase, rmsCases());

SSMJIT_REFERENCE_MATRIX(GatedRmsNormGpu, NormCase, gatedCases());

}  // namespace
