// gated_rms_norm_backward on the GPU against the float64 reference: fresh random inputs, poisoned
// outputs and workspace, rows of 1, 7, 1000 and 3000 tokens, 64 to 8192 channels (200: not a
// multiple of a vector), every dtype, groups of 1 and 8, no gate and the gate on either side of the
// norm, padded rows and offset data; dweight fp32 and in the weight's dtype; repeated calls equal
// bit for bit.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "GpuTest.h"
#include "runtime/DeviceBuffer.h"
#include "ssmjit/ops.h"
#include "ssmjit/reference.h"
#include "tools/problems/ConvProblem.h"  // DeviceTensors
#include "tools/problems/NormProblem.h"

using namespace ssmjit;
using namespace ssmjit::testing;

namespace {

struct NormBackwardCase {
  NormCase forward;
  bool weightTypeGradient = false;  // dweight in the weight's dtype (else fp32)
  std::string name() const { return forward.name() + (weightTypeGradient ? "_dwTyped" : ""); }
};
std::ostream& operator<<(std::ostream& os, const NormBackwardCase& c) { return os << c.name(); }

// The forward's inputs (NormProblem) and the backward's dout and (poisoned) gradients.
struct NormBackwardProblem {
  NormProblem f;
  HostTensor dout, dx, dz, dweight;
  explicit NormBackwardProblem(const NormBackwardCase& c) : f(c.forward) {
    std::mt19937_64 rng(c.forward.seed + 7);
    const NormCase& n = c.forward;
    dout = makeTensor(n.xType, {n.T, n.D}, n.rows, rng);
    fillUniform(dout, rng, -1, 1);
    dx = makeTensor(n.xType, {n.T, n.D}, n.rows, rng);
    if (n.gate != NormGate::None) dz = makeTensor(n.xType, {n.T, n.D}, n.rows, rng);
    dweight = makeTensor(c.weightTypeGradient ? n.weightType : DType::F32, {n.D}, Layout{}, rng);
  }
  GatedRmsNormBackwardArgs args(const Viewer& view = hostView) const {
    GatedRmsNormBackwardArgs a;
    a.forward = f.gatedArgs(view);
    a.forward.out = TensorView{};
    a.dout = view(dout);
    a.dx = view(dx);
    a.dz = view(dz);
    a.dweight = view(dweight);
    return a;
  }
  // The forward's out too: gatedArgs() views it (the backward does not read it).
  std::vector<const HostTensor*> all() const { return {&f.x, &f.z, &f.weight, &f.out, &dout, &dx, &dz, &dweight}; }
};
enum : size_t { kDx = 5, kDz = 6, kDweight = 7 };

void runAndCompare(const NormBackwardCase& c) {
  NormBackwardProblem ref(c), gpu(c);
  DeviceTensors d(gpu.all());
  reference::gated_rms_norm_backward(ref.args());
  GatedRmsNormBackwardArgs a = gpu.args(d.viewer());
  const int64_t floats = gated_rms_norm_backward_workspace_size(a);
  DeviceBuffer ws(static_cast<size_t>(floats) * 4);
  ws.fill(kPoison);  // its contents on entry must not matter
  a.workspace = TensorView::contiguous(ws.data(), DType::F32, {floats});
  gated_rms_norm_backward(a);
  checkDeviceErrors();
  const NormCase& n = c.forward;
  const std::vector<char> rows(static_cast<size_t>(n.T), 1), all(static_cast<size_t>(n.D), 1);
  // Per row: a few fp32 operations an element and two sums over the group. dweight: a sum over
  // every row of terms of either sign.
  expectWithin(compareTensor(ref.dx, d.download(kDx), rows), bound(n.xType, kFp32Short), "dx");
  if (n.gate != NormGate::None)
    expectWithin(compareTensor(ref.dz, d.download(kDz), rows), bound(n.xType, kFp32Short), "dz");
  expectWithin(compareTensor(ref.dweight, d.download(kDweight), all),
               bound(ref.dweight.meta.dtype, fp32RecurrenceGradient(n.T)), "dweight");
  // Deterministic: a second call leaves the same bytes.
  const std::vector<uint8_t> dw = d.download(kDweight), dxFirst = d.download(kDx);
  gated_rms_norm_backward(a);
  EXPECT_EQ(d.download(kDweight), dw);
  EXPECT_EQ(d.download(kDx), dxFirst);
}

std::vector<NormBackwardCase> cases() {
  std::vector<NormBackwardCase> out;
  const DType types[] = {DType::BF16, DType::F32, DType::F16};
  uint64_t seed = 500;
  int k = 0;
  for (int64_t D : {64, 200, 2560, 5120, 8192})
    for (int64_t groups : {1, 8})
      for (NormGate gate : {NormGate::None, NormGate::GateFirst, NormGate::NormFirst}) {
        if (D % groups != 0) continue;
        NormBackwardCase c;
        NormCase& n = c.forward;
        n.gated = true;
        n.xType = types[k % 3];
        n.weightType = k % 2 ? DType::F32 : n.xType;
        n.T = std::vector<int64_t>{1, 7, 1000, 3000}[static_cast<size_t>(k % 4)];
        n.D = D;
        n.groups = groups;
        n.gate = gate;
        n.seed = seed++;
        c.weightTypeGradient = k % 5 == 0;
        ++k;
        out.push_back(c);
      }
  NormBackwardCase c;
  c.forward.gated = true;
  c.forward.T = 33;
  c.forward.D = 2560;
  c.forward.groups = 8;
  c.forward.gate = NormGate::GateFirst;
  c.forward.rows.padded = true;
  c.forward.seed = seed++;
  out.push_back(c);
  c.forward.D = 200;
  c.forward.groups = 1;
  c.forward.gate = NormGate::NormFirst;
  c.forward.rows = Layout{true, false, true};
  c.forward.seed = seed++;
  out.push_back(c);
  return out;
}

SSMJIT_REFERENCE_MATRIX(GatedRmsNormBackwardGpu, NormBackwardCase, cases());

}  // namespace
