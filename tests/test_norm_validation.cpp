// RMSNorm on the CPU: the argument checks of rms_norm and gated_rms_norm (every bad input gets an
// InvalidArgument error naming the argument, and nothing touches the GPU: tensors here are fake
// device pointers that are never dereferenced), and self-tests of the float64 references the GPU
// tests compare against.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "runtime/ops/RmsNormCheck.h"
#include "ssmjit/error.h"
#include "ssmjit/ops.h"
#include "ssmjit/reference.h"
#include "tests/support/ExpectError.h"
#include "tests/support/FakeTensors.h"
#include "tools/problems/HostTensor.h"
#include "tools/problems/NormProblem.h"

using ssmjit::DeviceKind;
using ssmjit::DType;
using ssmjit::GatedRmsNormArgs;
using ssmjit::RmsNormArgs;
using ssmjit::TensorView;
using namespace ssmjit::testing;

namespace {

// ----------------------------------------------------------------------------------------------
// Argument checks

constexpr int64_t T = 10, D = 64;

// bf16 rows, an fp32 residual updated in place, an fp32 weight.
RmsNormArgs validRms() {
  RmsNormArgs a;
  a.x = fakeView(0, DType::BF16, {T, D});
  a.residual = fakeView(1, DType::F32, {T, D});
  a.residual_out = a.residual;
  a.weight = fakeView(2, DType::F32, {D});
  a.out = fakeView(3, DType::BF16, {T, D});
  return a;
}

// bf16 rows and gate, 4 groups of 16, an fp32 weight.
GatedRmsNormArgs validGated() {
  GatedRmsNormArgs a;
  a.x = fakeView(0, DType::BF16, {T, D});
  a.z = fakeView(1, DType::BF16, {T, D});
  a.weight = fakeView(2, DType::F32, {D});
  a.out = fakeView(3, DType::BF16, {T, D});
  a.group_size = 16;
  return a;
}

// The op refuses `a` with a message that starts with the op and names every part of `parts`.
template <class Args>
void expectRefused(const Args& a, std::initializer_list<const char*> parts) {
  const std::string msg = invalidArgMessage([&] {
    if constexpr (std::is_same_v<Args, RmsNormArgs>)
      ssmjit::rms_norm(a);
    else
      ssmjit::gated_rms_norm(a);
  });
  SCOPED_TRACE(msg);
  EXPECT_EQ(msg.rfind(std::is_same_v<Args, RmsNormArgs> ? "rms_norm: " : "gated_rms_norm: ", 0), 0u);
  for (const char* p : parts) EXPECT_NE(msg.find(p), std::string::npos) << p;
}

// x's row r, shifted by `elements` (a view that overlaps x without being x).
TensorView shifted(TensorView v, int64_t elements) {
  v.data = static_cast<char*>(v.data) + elements * ssmjit::dtypeBytes(v.dtype);
  return v;
}

}  // namespace

TEST(NormValidation, ValidCallsPass) {
  using ssmjit::detail::checkGatedRmsNormArgs;
  using ssmjit::detail::checkRmsNormArgs;
  const auto d = checkRmsNormArgs(validRms(), DeviceKind::CUDA, "rms_norm");
  EXPECT_EQ(d.T, T);
  EXPECT_EQ(d.D, D);
  EXPECT_EQ(d.groups(), 1);
  const auto g = checkGatedRmsNormArgs(validGated(), DeviceKind::CUDA, "gated_rms_norm");
  EXPECT_EQ(g.groupSize, 16);
  EXPECT_EQ(g.groups(), 4);

  RmsNormArgs r = validRms();
  r.out = r.x;  // in place
  r.residual = TensorView{};
  r.residual_out = fakeView(4, DType::F32, {T, D});  // residual_in_fp32 on the first layer
  EXPECT_NO_THROW(checkRmsNormArgs(r, DeviceKind::CUDA, "rms_norm"));
  r.weight.strides[0] = 0;  // a broadcast weight
  EXPECT_NO_THROW(checkRmsNormArgs(r, DeviceKind::CUDA, "rms_norm"));
  r.x = r.out = fakeView(0, DType::BF16, {0, D});  // no rows
  r.residual_out = fakeView(4, DType::F32, {0, D});
  EXPECT_NO_THROW(checkRmsNormArgs(r, DeviceKind::CUDA, "rms_norm"));
  EXPECT_NO_THROW(ssmjit::rms_norm(r));  // nothing to launch

  GatedRmsNormArgs a = validGated();
  a.out = a.x;  // in place
  a.group_size = 0;
  EXPECT_EQ(checkGatedRmsNormArgs(a, DeviceKind::CUDA, "gated_rms_norm").groupSize, D);
  a.z = TensorView{};
  a.out = a.x;
  EXPECT_NO_THROW(checkGatedRmsNormArgs(a, DeviceKind::CUDA, "gated_rms_norm"));
  // Rows with gaps (a row stride of 80 elements) and one row with any stride.
  a.x = a.out = fakeView(0, DType::F32, {T, D});
  a.x.strides[0] = a.out.strides[0] = 80;
  EXPECT_NO_THROW(checkGatedRmsNormArgs(a, DeviceKind::CUDA, "gated_rms_norm"));
}

TEST(NormValidation, MissingTensorsAreNamed) {
  for (const char* name : {"x", "weight", "out"}) {
    RmsNormArgs a = validRms();
    (std::string(name) == "x" ? a.x : std::string(name) == "weight" ? a.weight : a.out) = TensorView{};
    expectRefused(a, {name, "is required"});
  }
}

TEST(NormValidation, ShapesAreChecked) {
  RmsNormArgs a = validRms();
  a.x = fakeView(0, DType::BF16, {2, T, D});
  expectRefused(a, {"x has rank 3", "tokens, dim"});
  a = validRms();
  a.out = fakeView(3, DType::BF16, {T + 1, D});
  expectRefused(a, {"out has shape (11, 64)", "(10, 64)"});
  a = validRms();
  a.residual = a.residual_out = fakeView(1, DType::F32, {T, D + 1});
  expectRefused(a, {"residual has shape (10, 65)"});
  a = validRms();
  a.weight = fakeView(2, DType::F32, {D / 2});
  expectRefused(a, {"weight has shape (32)", "(64)"});
  GatedRmsNormArgs g = validGated();
  g.z = fakeView(1, DType::BF16, {T, D, 1});
  expectRefused(g, {"z has rank 3"});
}

TEST(NormValidation, GroupSizeIsChecked) {
  GatedRmsNormArgs a = validGated();
  a.group_size = 24;
  expectRefused(a, {"group_size is 24", "divisor of dim = 64"});
  a.group_size = -16;
  expectRefused(a, {"group_size is -16"});
  a.x = a.z = a.out = fakeView(0, DType::BF16, {1, 2 * ssmjit::kMaxNormGroup});
  a.out = fakeView(3, DType::BF16, {1, 2 * ssmjit::kMaxNormGroup});
  a.z = TensorView{};
  a.weight = fakeView(2, DType::F32, {2 * ssmjit::kMaxNormGroup});
  a.group_size = 0;
  expectRefused(a, {"group_size is 32768 (dim, group_size 0)", "kMaxNormGroup"});
  a.group_size = ssmjit::kMaxNormGroup;
  EXPECT_NO_THROW(ssmjit::detail::checkGatedRmsNormArgs(a, DeviceKind::CUDA, "gated_rms_norm"));
  RmsNormArgs r = validRms();
  r.x = r.out = fakeView(0, DType::F32, {T, ssmjit::kMaxNormGroup + 8});
  r.residual = r.residual_out = TensorView{};
  r.weight = fakeView(2, DType::F32, {ssmjit::kMaxNormGroup + 8});
  expectRefused(r, {"group_size is 16392 (dim, group_size 0)"});
}

TEST(NormValidation, DtypesAreChecked) {
  RmsNormArgs a = validRms();
  a.x = fakeView(0, DType::I32, {T, D});
  expectRefused(a, {"x has dtype int32", "float32, bfloat16 or float16"});
  a = validRms();
  a.weight = fakeView(2, DType::F16, {D});
  expectRefused(a, {"weight has dtype float16", "float32 or bfloat16"});
  a = validRms();
  a.out = fakeView(3, DType::F16, {T, D});
  expectRefused(a, {"out has dtype float16"});
  a = validRms();
  a.residual = a.residual_out = fakeView(1, DType::F16, {T, D});
  expectRefused(a, {"residual has dtype float16"});
  GatedRmsNormArgs g = validGated();
  g.z = fakeView(1, DType::F16, {T, D});
  expectRefused(g, {"z has dtype float16"});
}

TEST(NormValidation, StridesAreChecked) {
  RmsNormArgs a = validRms();
  a.x.strides[0] = 1;
  a.x.strides[1] = T;  // a transposed view: channels T elements apart
  expectRefused(a, {"x has strides (1, 10)", "unit stride along dim"});
  a = validRms();
  a.out.strides[0] = 0;  // every row onto one
  expectRefused(a, {"out has strides (0, 1)"});
  GatedRmsNormArgs g = validGated();
  g.z.strides[1] = 2;
  g.z.strides[0] = 2 * D;
  expectRefused(g, {"z has strides (128, 2)", "unit stride"});
  g = validGated();
  g.x.data = static_cast<char*>(g.x.data) + 1;
  expectRefused(g, {"x has data pointer", "element size"});
}

TEST(NormValidation, DevicesAreChecked) {
  RmsNormArgs a = validRms();
  a.out.deviceId = 1;
  expectRefused(a, {"out is on CUDA device 1", "device 0"});
  a = validRms();
  a.weight.device = DeviceKind::CPU;
  expectRefused(a, {"weight is a CPU tensor", "CUDA"});
  // The references take CPU tensors only.
  const std::string msg = invalidArgMessage([] { ssmjit::reference::rms_norm(validRms()); });
  EXPECT_NE(msg.find("x is a CUDA tensor"), std::string::npos) << msg;
}

TEST(NormValidation, EpsIsChecked) {
  for (float eps : {0.0f, -1e-5f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    RmsNormArgs a = validRms();
    a.eps = eps;
    expectRefused(a, {"eps is", "finite value > 0"});
    GatedRmsNormArgs g = validGated();
    g.eps = eps;
    expectRefused(g, {"eps is"});
  }
}

// Outputs may be an input exactly (in place); any other sharing is refused, naming both.
TEST(NormValidation, OverlapsAreRefused) {
  RmsNormArgs a = validRms();
  a.out = shifted(a.x, D);  // one row on
  expectRefused(a, {"out (data", "shares memory with x", "x itself (in place"});
  a = validRms();
  a.residual_out = shifted(a.residual, 8);
  expectRefused(a, {"residual_out (data", "shares memory with residual"});
  a = validRms();
  a.residual_out = fakeView(4, DType::F32, {T, D});
  a.out = fakeView(4, DType::F32, {T, D});  // both outputs in one tensor
  expectRefused(a, {"out (data", "shares memory with residual_out", "two separate outputs"});
  a = validRms();
  a.out = a.residual;  // fp32 out over the residual: only x may be out itself
  expectRefused(a, {"out (data", "shares memory with residual", "only x may be out itself"});
  a = validRms();
  a.out = a.x;
  a.out.dtype = DType::F32;  // x's memory as fp32: not x itself
  expectRefused(a, {"out (data", "shares memory with x", "x itself (in place"});
  a = validRms();
  a.out = fakeView(2, DType::F32, {T, D});  // over the weight
  expectRefused(a, {"shares memory with weight"});
  GatedRmsNormArgs g = validGated();
  g.out = shifted(g.z, 1);
  expectRefused(g, {"out (data", "shares memory with z"});
  g.out = g.z;  // over the gate: refused (only x)
  expectRefused(g, {"out (data", "shares memory with z", "only x may be out itself"});
}

// ----------------------------------------------------------------------------------------------
// The references

namespace {

double silu(double v) { return v / (1.0 + std::exp(-v)); }
double at(const HostTensor& h, int64_t t, int64_t d) {
  return loadElement(h.view(), t * h.meta.strides[0] + d * h.meta.strides[1]);
}

// The formulas of ops.h evaluated directly, element by element, for row t, channel d.
double expectedOut(const NormProblem& p, int64_t t, int64_t d) {
  const NormCase& c = p.c;
  const int64_t gs = c.gated ? c.D / c.groups : c.D, first = d / gs * gs;
  auto pre = [&](int64_t k) {  // what is normalised
    double v = at(p.x, t, k);
    if (c.residual) v += at(p.residual, t, k);
    if (c.gate == NormGate::GateFirst) v *= silu(at(p.z, t, k));
    return v;
  };
  double ms = 0;
  for (int64_t k = first; k < first + gs; ++k) ms += pre(k) * pre(k) / static_cast<double>(gs);
  double y = pre(d) / std::sqrt(ms + 1e-5f) * loadElement(p.weight.view(), d);
  if (c.gate == NormGate::NormFirst) y *= silu(at(p.z, t, d));
  return y;
}

// v stored in dtype t and read back.
double rounded(DType t, double v) {
  std::mt19937_64 rng(1);
  HostTensor one = makeTensor(t, {1}, Layout{}, rng);
  storeElement(one.view(), 0, v);
  return loadElement(one.view(), 0);
}

// Runs the reference on p and checks each written element against expectedOut, rounded to its
// dtype as the reference rounds it (so exactly, but for a sum's order: 1e-12 relative).
void checkReference(NormCase c) {
  NormProblem p(c), before(c);
  if (c.gated)
    ssmjit::reference::gated_rms_norm(p.gatedArgs());
  else
    ssmjit::reference::rms_norm(p.rmsArgs());
  const HostTensor& out = c.outInPlace ? p.x : p.out;
  const HostTensor* resOut = !c.residualOut ? nullptr : c.residualInPlace ? &p.residual : &p.residualOut;
  for (int64_t t = 0; t < c.T; ++t)
    for (int64_t d = 0; d < c.D; ++d) {
      const double want = rounded(out.meta.dtype, expectedOut(before, t, d)), got = at(out, t, d);
      ASSERT_NEAR(got, want, 1e-6 * std::abs(want) + 1e-30) << c.name() << " out t=" << t << " d=" << d;
      if (resOut) {
        const double r = at(before.x, t, d) + (c.residual ? at(before.residual, t, d) : 0.0);
        ASSERT_EQ(at(*resOut, t, d), rounded(resOut->meta.dtype, r))
            << c.name() << " residual_out t=" << t << " d=" << d;
      }
    }
}

}  // namespace

TEST(NormReference, RmsNormMatchesTheFormulas) {
  NormCase c;
  c.T = 5;
  c.D = 24;
  checkReference(c);
  c.residual = c.residualOut = true;
  c.rows.padded = true;
  checkReference(c);
  c.residualInPlace = c.outInPlace = true;
  c.residualType = DType::BF16;
  checkReference(c);
  c.xType = c.residualType = DType::F32;
  c.residual = false;
  c.residualInPlace = false;
  checkReference(c);
}

TEST(NormReference, GatedRmsNormMatchesTheFormulas) {
  NormCase c;
  c.gated = true;
  c.T = 4;
  c.D = 24;
  for (int64_t groups : {1, 3})
    for (NormGate gate : {NormGate::None, NormGate::GateFirst, NormGate::NormFirst})
      for (bool inPlace : {false, true}) {
        c.groups = groups;
        c.gate = gate;
        c.outInPlace = inPlace;
        c.xType = inPlace ? DType::F16 : DType::BF16;
        checkReference(c);
      }
}

namespace {

// The backward of validGated(): bf16 gradients of the rows, an fp32 dweight, a workspace.
ssmjit::GatedRmsNormBackwardArgs validBackward() {
  ssmjit::GatedRmsNormBackwardArgs a;
  a.forward = validGated();
  a.forward.out = TensorView{};
  a.dout = fakeView(4, DType::BF16, {T, D});
  a.dx = fakeView(5, DType::BF16, {T, D});
  a.dz = fakeView(6, DType::BF16, {T, D});
  a.dweight = fakeView(7, DType::F32, {D});
  a.workspace = fakeView(8, DType::F32, {1 << 20});
  return a;
}

void expectBackwardRefused(const ssmjit::GatedRmsNormBackwardArgs& a, std::initializer_list<const char*> parts) {
  const std::string msg = invalidArgMessage([&] { ssmjit::gated_rms_norm_backward(a); });
  SCOPED_TRACE(msg);
  EXPECT_EQ(msg.rfind("gated_rms_norm_backward: ", 0), 0u);
  for (const char* p : parts) EXPECT_NE(msg.find(p), std::string::npos) << p;
}

}  // namespace

TEST(NormValidation, BackwardArgumentsAreChecked) {
  EXPECT_NO_THROW(ssmjit::detail::checkGatedRmsNormBackwardArgs(validBackward(), DeviceKind::CUDA, "b"));
  EXPECT_EQ(ssmjit::gated_rms_norm_backward_workspace_size(validBackward()), T * D);  // one program a row
  auto a = validBackward();
  a.dz = TensorView{};
  expectBackwardRefused(a, {"dz is absent", "exactly when forward.z is given"});
  a = validBackward();
  a.forward.z = TensorView{};
  expectBackwardRefused(a, {"dz is given"});
  a = validBackward();
  a.dx = TensorView{};
  expectBackwardRefused(a, {"dx", "is required"});
  a = validBackward();
  a.dout = fakeView(4, DType::BF16, {T, D + 1});
  expectBackwardRefused(a, {"dout has shape (10, 65)", "(10, 64)"});
  a = validBackward();
  a.dweight = fakeView(7, DType::F16, {D});
  expectBackwardRefused(a, {"dweight", "float16"});
  a = validBackward();
  a.dx = a.dout;
  expectBackwardRefused(a, {"dx", "shares memory with dout"});
  a = validBackward();
  a.workspace = fakeView(8, DType::F32, {T * D - 1});
  expectBackwardRefused(a, {"workspace", "gated_rms_norm_backward_workspace_size"});
}
