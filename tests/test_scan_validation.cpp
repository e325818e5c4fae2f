// selective_scan on the CPU: the argument check (every bad call gets an InvalidArgument error
// naming the argument, the expected and the actual value, and writes nothing; the GPU op, given
// the same call on the device, throws the same message before touching the GPU), and self-tests
// of the float64 reference the GPU tests compare against: hand-computed values, and properties
// that a second copy of the same formula could not check (packing, batching and splitting a
// sequence do not change the result; constant B/C and groups equal their expanded forms; 16-bit
// inputs are read exactly; every initial state is read before any final state is written).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "runtime/ops/SelectiveScanCheck.h"
#include "ssmjit/error.h"
#include "ssmjit/ops.h"
#include "ssmjit/reference.h"
#include "tests/support/ExpectError.h"
#include "tests/support/HostTensors.h"
#include "tools/problems/HostTensor.h"
#include "tools/problems/ScanProblem.h"

using namespace ssmjit;
using namespace ssmjit::testing;

namespace {

// ---- helpers ----------------------------------------------------------------------------------

std::vector<TensorView*> tensorsOf(SelectiveScanArgs& a) {
  return {&a.u,
          &a.delta,
          &a.A,
          &a.B,
          &a.C,
          &a.D,
          &a.z,
          &a.delta_bias,
          &a.out,
          &a.cu_seqlens,
          &a.initial_states,
          &a.initial_state_indices,
          &a.final_states,
          &a.final_state_indices,
          &a.workspace};
}

// The same call with every tensor on CUDA device 0: the pointers stay (host memory), so only
// the check may see it.
SelectiveScanArgs onCuda(SelectiveScanArgs a) {
  for (TensorView* t : tensorsOf(a))
    if (t->defined()) t->device = DeviceKind::CUDA, t->deviceId = 0;
  return a;
}

std::vector<int64_t> shapeOf(const HostTensor& t) { return {t.meta.shape, t.meta.shape + t.meta.ndim}; }

// ---- the argument check -----------------------------------------------------------------------

// Dense: batch 2, D 8, N 4, L 6, time-varying B (bf16) and C (fp32) in G = 2 groups, bf16 u and
// out, fp16 delta, fp32 z, D and delta_bias, states in place (S = 4) through int64 slot indices.
ScanCase denseCase() {
  ScanCase c;
  c.batch = 2, c.D = 8, c.N = 4, c.L = 6, c.G = 2;
  c.uType = c.outType = c.bType = DType::BF16;
  c.deltaType = DType::F16;
  c.initialStates = c.finalStates = c.slotIndices = true;
  c.indexType = DType::I64;
  return c;
}
// Packed: one row of 3 sequences (2, 3, 1 tokens: cu_seqlens 0 2 5 6), max_seqlen 3, S = 5.
ScanCase packedCase() {
  ScanCase c = denseCase();
  c.lens = {2, 3, 1};
  c.maxSeqlen = 3;
  return c;
}

TEST(ScanCheck, ValidCallsPass) {
  using detail::checkSelectiveScanArgs;
  const ScanProblem dense(denseCase()), packed(packedCase());
  const detail::ScanDims d = checkSelectiveScanArgs(onCuda(dense.args()), DeviceKind::CUDA, "selective_scan");
  EXPECT_EQ(d.batch, 2);
  EXPECT_EQ(d.D, 8);
  EXPECT_EQ(d.L, 6);
  EXPECT_EQ(d.N, 4);
  EXPECT_EQ(d.G, 2);
  EXPECT_TRUE(d.bVarying && d.cVarying);
  EXPECT_EQ(d.nseq, 2);
  EXPECT_FALSE(d.packed);
  EXPECT_EQ(d.initSlots, 4);
  EXPECT_EQ(d.finalSlots, 4);
  const detail::ScanDims p = checkSelectiveScanArgs(onCuda(packed.args()), DeviceKind::CUDA, "selective_scan");
  EXPECT_EQ(p.batch, 1);
  EXPECT_EQ(p.L, 6);
  EXPECT_EQ(p.nseq, 3);
  EXPECT_TRUE(p.packed);
  EXPECT_EQ(p.initSlots, 5);

  // Constant B: G comes from C; both constant: G = 1. No options at all.
  ScanCase c = denseCase();
  c.bVarying = false, c.G = 4;
  const detail::ScanDims cb = checkSelectiveScanArgs(ScanProblem(c).args(), DeviceKind::CPU, "op");
  EXPECT_FALSE(cb.bVarying);
  EXPECT_TRUE(cb.cVarying);
  EXPECT_EQ(cb.G, 4);
  c.cVarying = false;
  c.hasD = c.hasZ = c.hasDeltaBias = c.softplus = c.initialStates = c.finalStates = false;
  const detail::ScanDims cc = checkSelectiveScanArgs(ScanProblem(c).args(), DeviceKind::CPU, "op");
  EXPECT_EQ(cc.G, 1);
  EXPECT_EQ(cc.initSlots + cc.finalSlots, 0);

  // The parameters may broadcast (read once per program); N = kMaxScanState; without indices
  // any S >= nseq slots; a token axis of size 1 may have any stride.
  SelectiveScanArgs a = dense.args();
  a.A.strides[0] = a.A.strides[1] = a.D.strides[0] = a.delta_bias.strides[0] = 0;
  EXPECT_NO_THROW(checkSelectiveScanArgs(a, DeviceKind::CPU, "op"));
  c = denseCase();
  c.N = kMaxScanState;
  EXPECT_EQ(checkSelectiveScanArgs(ScanProblem(c).args(), DeviceKind::CPU, "op").N, kMaxScanState);
  c = denseCase();
  c.slotIndices = false;
  EXPECT_EQ(checkSelectiveScanArgs(ScanProblem(c).args(), DeviceKind::CPU, "op").initSlots, 4);
  c.L = 1;
  ScanProblem one(c);
  a = one.args();
  a.u.strides[2] = a.delta.strides[2] = a.out.strides[2] = a.B.strides[3] = 7;
  EXPECT_NO_THROW(checkSelectiveScanArgs(a, DeviceKind::CPU, "op"));
}

// What a bad call is wrong in: the arguments (the device check throws the same), the values of
// cu_seqlens or the slot indices (read by the reference; on the device the kernel reports them),
// or the device of a tensor (the host-only case).
enum class Wrong { Args, Values, Device };

struct Bad {
  const ScanProblem* base;
  std::function<void(ScanProblem&, SelectiveScanArgs&)> mutate;
  std::vector<std::string> parts;
  Wrong wrong = Wrong::Args;
};

TEST(ScanReference, BadCallsAreNamedAndWriteNothing) {
  const ScanProblem dense(denseCase()), packed(packedCase());
  ScanCase big;  // one more row or sequence than the grid holds
  big.batch = 65536, big.D = 1, big.N = 1, big.L = 1;
  const ScanProblem bigDense(big);
  big.lens.assign(65536, 1);
  const ScanProblem bigPacked(big);
  using P = ScanProblem;
  using A = SelectiveScanArgs;
  const std::vector<Bad> bad = {
      // u, delta, z: (batch, dim, seqlen), floats, tokens contiguous.
      {&dense, [](P&, A& a) { a.u = {}; }, {"u is required"}},
      {&dense, [](P&, A& a) { a.u.ndim = 2; }, {"u has rank 2 (shape (2, 8))", "expected rank 3 (batch, dim, seqlen)"}},
      {&dense,
       [](P&, A& a) { a.u.dtype = DType::I32; },
       {"u has dtype int32", "expected float32, bfloat16 or float16"}},
      {&dense,
       [](P&, A& a) { a.u.strides[2] = 2; },
       {"u has stride 2 along its token axis (dim 2 of shape (2, 8, 6))", "expected 1"}},
      {&dense,
       [](P&, A& a) { a.u.data = static_cast<char*>(a.u.data) + 1; },
       {"u has data pointer 0x", "expected a multiple of its element size (bfloat16: 2 bytes)"}},
      {&dense, [](P&, A& a) { a.delta = {}; }, {"delta is required"}},
      {&dense,
       [](P&, A& a) { a.delta.shape[1] = 7; },
       {"delta has shape (2, 7, 6)", "expected (2, 8, 6) [batch, dim, seqlen]", "dim 1 (dim) is 7, expected 8"}},
      {&dense,
       [](P&, A& a) { a.delta.strides[1] = 1, a.delta.strides[2] = 8; },
       {"delta has stride 8 along its token axis", "expected 1"}},
      {&dense, [](P&, A& a) { a.delta.dtype = DType::I64; }, {"delta has dtype int64", "expected float32, bfloat16"}},
      {&dense, [](P&, A& a) { a.z.shape[2] = 5; }, {"z has shape (2, 8, 5)", "dim 2 (seqlen) is 5, expected 6"}},
      {&dense, [](P&, A& a) { a.z.strides[2] = 3; }, {"z has stride 3 along its token axis", "expected 1"}},
      // out: u's shape, no broadcast, not an input.
      {&dense, [](P&, A& a) { a.out = {}; }, {"out is required"}},
      {&dense, [](P&, A& a) { a.out.shape[0] = 3; }, {"out has shape (3, 8, 6)", "dim 0 (batch) is 3, expected 2"}},
      {&dense,
       [](P&, A& a) { a.out.dtype = DType::I64; },
       {"out has dtype int64", "expected float32, bfloat16 or float16"}},
      {&dense,
       [](P&, A& a) { a.out.strides[0] = 0; },
       {"out has strides (0, 6, 1)", "dim 0 (batch, size 2) has stride 0", "expected a nonzero stride"}},
      {&dense, [](P&, A& a) { a.out.strides[2] = 2; }, {"out has stride 2 along its token axis", "expected 1"}},
      {&dense,
       [](P&, A& a) { a.out.data = a.u.data; },
       {"out has data pointer 0x", "the same as u's", "expected a separate tensor"}},
      {&dense, [](P&, A& a) { a.out.data = a.delta.data; }, {"the same as delta's"}},
      {&dense, [](P&, A& a) { a.out.data = a.z.data; }, {"the same as z's"}},
      // A (D, N) fp32, 1 <= N <= kMaxScanState.
      {&dense, [](P&, A& a) { a.A = {}; }, {"A is required"}},
      {&dense, [](P&, A& a) { a.A.ndim = 1; }, {"A has rank 1 (shape (8))", "expected rank 2 (dim, dstate)"}},
      {&dense,
       [](P&, A& a) { a.A.shape[1] = 257; },
       {"A has dstate 257 (dim 1 of shape (8, 257))", "expected 1 <= N <= 256 (kMaxScanState)"}},
      {&dense, [](P&, A& a) { a.A.shape[1] = 0; }, {"A has dstate 0", "1 <= N <= 256"}},
      {&dense, [](P&, A& a) { a.A.shape[0] = 7; }, {"A has shape (7, 4)", "dim 0 (dim) is 7, expected 8"}},
      {&dense, [](P&, A& a) { a.A.dtype = DType::BF16; }, {"A has dtype bfloat16", "expected float32"}},
      // B and C: (batch, G, N, L) or constant (D, N) fp32; the same G; D % G == 0.
      {&dense, [](P&, A& a) { a.B = {}; }, {"B is required"}},
      {&dense,
       [](P&, A& a) { a.B.ndim = 3; },
       {"B has rank 3", "expected rank 2 (dim, dstate) for a constant B or rank 4 (batch, ngroups, dstate, seqlen)"}},
      {&dense, [](P&, A& a) { a.B.shape[1] = 3; }, {"B has 3 groups (dim 1 of shape (2, 3, 4, 6))", "dividing D = 8"}},
      {&dense,
       [](P&, A& a) { a.B.shape[2] = 5; },
       {"B has shape (2, 2, 5, 6)", "[batch, ngroups, dstate, seqlen]", "dim 2 (dstate) is 5, expected 4"}},
      {&dense, [](P&, A& a) { a.B.shape[0] = 1; }, {"B has shape (1, 2, 4, 6)", "dim 0 (batch) is 1, expected 2"}},
      {&dense,
       [](P&, A& a) { a.B.dtype = DType::I32; },
       {"B has dtype int32", "expected float32, bfloat16 or float16"}},
      {&dense, [](P&, A& a) { a.B.strides[3] = 2; }, {"B has stride 2 along its token axis (dim 3", "expected 1"}},
      {&dense,
       [](P&, A& a) { a.B.strides[0] = 0; },
       {"B has strides (0, 24, 6, 1)", "dim 0 (batch, size 2) has stride 0"}},
      {&dense,
       [](P&, A& a) { a.C.shape[1] = 4; },
       {"B has 2 groups and C has 4", "(2, 2, 4, 6) and (2, 4, 4, 6)", "expected the same"}},
      {&dense, [](P&, A& a) { a.C = a.A, a.C.dtype = DType::BF16; }, {"C has dtype bfloat16", "expected float32"}},
      {&dense,
       [](P&, A& a) { a.C = a.A, a.C.shape[1] = 5; },
       {"C has shape (8, 5)", "expected (8, 4) [dim, dstate]", "dim 1 (dstate) is 5, expected 4"}},
      // D and delta_bias: (D,) fp32.
      {&dense, [](P&, A& a) { a.D.shape[0] = 9; }, {"D has shape (9)", "expected (8) [dim]"}},
      {&dense, [](P&, A& a) { a.D.dtype = DType::F16; }, {"D has dtype float16", "expected float32"}},
      {&dense, [](P&, A& a) { a.delta_bias.ndim = 2; }, {"delta_bias has rank 2", "expected rank 1 (dim)"}},
      {&dense,
       [](P&, A& a) { a.delta_bias.strides[0] = -1; },
       {"delta_bias has strides (-1)", "dim 0 (dim) has stride -1", "expected a stride >= 0"}},
      // Packing: one row; cu_seqlens (nseq + 1,) int32/int64; max_seqlen >= 0, only with it.
      {&dense,
       [](P&, A& a) { a.cu_seqlens = a.initial_state_indices; },
       {"cu_seqlens is given and u has batch 2 (shape (2, 8, 6))", "expected batch 1"}},
      {&dense, [](P&, A& a) { a.max_seqlen = 5; }, {"max_seqlen is 5", "expected 0", "cu_seqlens is not given"}},
      {&packed, [](P&, A& a) { a.max_seqlen = -1; }, {"max_seqlen is -1", "expected >= 0"}},
      {&dense, [](P&, A& a) { a.serial_seqlen = -2; }, {"serial_seqlen is -2", "expected >= 0"}},
      {&packed, [](P&, A& a) { a.cu_seqlens.ndim = 2; }, {"cu_seqlens has rank 2", "expected rank 1 (nseq + 1)"}},
      {&packed,
       [](P&, A& a) { a.cu_seqlens.shape[0] = 1; },
       {"cu_seqlens has shape (1)", "expected at least 2 entries"}},
      {&packed,
       [](P&, A& a) { a.cu_seqlens.dtype = DType::F32; },
       {"cu_seqlens has dtype float32", "expected int32 or int64"}},
      {&packed, [](P&, A& a) { a.cu_seqlens.strides[0] = 0; }, {"cu_seqlens has strides (0)", "has stride 0"}},
      // States (S, D, N) and their indices (nseq,).
      {&dense,
       [](P&, A& a) { a.initial_states = {}; },
       {"initial_state_indices is given (shape (2))", "expected none", "initial_states is not given"}},
      {&dense, [](P&, A& a) { a.final_states = {}; }, {"final_state_indices is given", "final_states is not given"}},
      {&dense,
       [](P&, A& a) { a.initial_states.ndim = 2; },
       {"initial_states has rank 2", "expected rank 3 (slots, dim, dstate)"}},
      {&dense,
       [](P&, A& a) { a.initial_states.shape[2] = 3; },
       {"initial_states has shape (4, 8, 3)", "[slots, dim, dstate]", "dim 2 (dstate) is 3, expected 4"}},
      {&dense,
       [](P&, A& a) { a.final_states.dtype = DType::I32; },
       {"final_states has dtype int32", "expected float32"}},
      {&dense,
       [](P&, A& a) { a.final_states.strides[0] = 0; },
       {"final_states has strides (0, 4, 1)", "dim 0 (slots, size 4) has stride 0"}},
      {&dense,
       [](P&, A& a) { a.final_states.data = static_cast<char*>(a.final_states.data) + 2; },
       {"final_states has data pointer 0x", "(float32: 4 bytes)"}},
      {&dense,
       [](P&, A& a) { a.initial_state_indices.shape[0] = 3; },
       {"initial_state_indices has shape (3)", "expected (2) [nseq]", "dim 0 (nseq) is 3, expected 2"}},
      {&packed,
       [](P&, A& a) { a.initial_state_indices.shape[0] = 2; },
       {"initial_state_indices has shape (2)", "dim 0 (nseq) is 2, expected 3"}},
      {&dense,
       [](P&, A& a) { a.final_state_indices.dtype = DType::F32; },
       {"final_state_indices has dtype float32", "expected int32 or int64"}},
      {&dense,
       [](P&, A& a) { a.final_state_indices.data = static_cast<char*>(a.final_state_indices.data) + 4; },
       {"final_state_indices has data pointer 0x", "(int64: 8 bytes)"}},
      {&packed,
       [](P&, A& a) { a.initial_state_indices = {}, a.initial_states.shape[0] = 2; },
       {"initial_states has 2 slots (dim 0 of shape (2, 8, 4))", "expected at least nseq = 3",
        "without initial_state_indices, sequence i uses slot i"}},
      {&dense,
       [](P&, A& a) { a.final_state_indices = {}, a.final_states.shape[0] = 1; },
       {"final_states has 1 slots", "expected at least nseq = 2"}},
      // The grid: one program row per sequence.
      {&bigDense,
       [](P&, A&) {},
       {"u has batch 65536 (dim 0 of shape (65536, 1, 1))", "expected at most 65535", "grid limit"}},
      {&bigPacked, [](P&, A&) {}, {"cu_seqlens holds 65536 sequences", "expected at most 65535", "grid limit"}},
      // Devices: the reference takes CPU tensors.
      {&dense,
       [](P&, A& a) { a.D.device = DeviceKind::CUDA; },
       {"D is a CUDA tensor, expected a CPU tensor"},
       Wrong::Device},
      {&dense,
       [](P&, A& a) { a.u.device = DeviceKind::CUDA; },
       {"u is a CUDA tensor, expected a CPU tensor"},
       Wrong::Device},
      // Values, read by the reference before anything is written.
      {&packed, [](P& p, A&) { setIndex(p.cu, 0, 1); }, {"cu_seqlens[0] = 1, expected 0"}, Wrong::Values},
      {&packed,
       [](P& p, A&) { setIndex(p.cu, 2, 2); },
       {"cu_seqlens[2] = 2 after cu_seqlens[1] = 2", "expected strictly increasing"},
       Wrong::Values},
      {&packed,
       [](P& p, A& a) { setIndex(p.cu, 2, 7), a.max_seqlen = 0; },
       {"cu_seqlens[3] = 6 after cu_seqlens[2] = 7"},
       Wrong::Values},
      {&packed,
       [](P& p, A&) { setIndex(p.cu, 3, 7); },
       {"cu_seqlens[3] = 7 (the last entry)", "expected T = 6 (u's seqlen)"},
       Wrong::Values},
      {&packed,
       [](P&, A& a) { a.max_seqlen = 2; },
       {"sequence 1 has 3 tokens", "expected at most max_seqlen = 2"},
       Wrong::Values},
      {&packed,
       [](P& p, A&) { setIndex(p.initIdx, 2, 5); },
       {"initial_state_indices[2] = 5", "expected -1 or a slot in [0, 5)"},
       Wrong::Values},
      {&packed,
       [](P& p, A&) { setIndex(p.finalIdx, 0, -2); },
       {"final_state_indices[0] = -2", "[0, 5)"},
       Wrong::Values},
      {&dense, [](P& p, A&) { setIndex(p.initIdx, 1, 4); }, {"initial_state_indices[1] = 4", "[0, 4)"}, Wrong::Values},
  };
  for (size_t i = 0; i < bad.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i) + ": " + bad[i].parts[0]);
    ScanProblem p = *bad[i].base;
    SelectiveScanArgs a = p.args();
    bad[i].mutate(p, a);
    const std::string m =
        expectRefusedUnwritten(p, "reference::selective_scan", bad[i].parts, [&] { reference::selective_scan(a); });
    if (bad[i].wrong == Wrong::Device) continue;

    // On the device the check sees the same arguments (it reads no data): the same message from
    // the op and the workspace query, or none for bad values (the kernel reports those). The op
    // runs only where the check threw, so the host pointers never reach a kernel.
    const SelectiveScanArgs g = onCuda(a);
    std::string dm;
    try {
      detail::checkSelectiveScanArgs(g, DeviceKind::CUDA, "selective_scan");
    } catch (const Error& e) {
      dm = e.what();
    }
    if (bad[i].wrong == Wrong::Values) {
      EXPECT_EQ(dm, "") << "the device check reads no values";
      continue;
    }
    EXPECT_EQ(dm, "selective_scan: " + m.substr(std::strlen("reference::selective_scan: ")));
    if (dm.empty()) continue;
    EXPECT_EQ(invalidArgMessage([&] { selective_scan(g); }), dm);
    EXPECT_EQ(invalidArgMessage([&] { selective_scan_workspace_size(g); }), dm);
  }

  // The bases themselves are valid, and the grid's last row is accepted.
  for (const ScanProblem* base : {&dense, &packed}) {
    ScanProblem p = *base;
    EXPECT_NO_THROW(reference::selective_scan(p.args()));
  }
  big.lens.clear();
  big.batch = 65535;
  ScanProblem edge(big);
  EXPECT_NO_THROW(reference::selective_scan(edge.args()));
}

// ---- the reference: hand-computed values ------------------------------------------------------

double gate(double z) { return z / (1 + std::exp(-z)); }

// D = 1, N = 1, L = 3: time-varying B and C, D, an initial state, no softplus.
// A call long enough for spans needs a workspace; each bad one is named before anything launches
// (the tensors are host memory marked as CUDA: the op must throw before it reads them).
TEST(ScanCheck, BadWorkspaceIsNamed) {
  ScanCase c;
  c.batch = 1, c.D = 16, c.N = 4, c.L = 600;  // spans of 256 tokens at D 16
  ScanProblem p(c);
  SelectiveScanArgs a = onCuda(p.args());
  const int64_t need = selective_scan_workspace_size(a);
  ASSERT_GT(need, 0);
  std::vector<float> buf(static_cast<size_t>(2 * need + 2));
  auto ws = [&](DType t, std::initializer_list<int64_t> shape) {
    TensorView w = TensorView::contiguous(buf.data(), t, shape);
    w.device = DeviceKind::CUDA;
    return w;
  };
  auto message = [&](const TensorView& w) {
    SelectiveScanArgs g = a;
    g.workspace = w;
    return invalidArgMessage([&] { selective_scan(g); });
  };
  EXPECT_NE(message({}).find("workspace is not given, expected a float32 buffer of at least " + std::to_string(need)),
            std::string::npos);
  EXPECT_NE(message(ws(DType::BF16, {need})).find("workspace has dtype bfloat16, expected float32"), std::string::npos);
  EXPECT_NE(message(ws(DType::F32, {need - 1}))
                .find("workspace has " + std::to_string(need - 1) + " elements (shape (" + std::to_string(need - 1) +
                      ")), expected at least " + std::to_string(need)),
            std::string::npos);
  TensorView strided = ws(DType::F32, {need});
  strided.strides[0] = 2;
  EXPECT_NE(message(strided).find("workspace has strides (2) for shape (" + std::to_string(need) +
                                  "), expected contiguous strides"),
            std::string::npos);
  TensorView other = ws(DType::F32, {need});
  other.deviceId = 1;
  EXPECT_NE(message(other).find("workspace is on CUDA device 1, expected device 0"), std::string::npos);
  TensorView odd = ws(DType::F32, {need});
  odd.data = reinterpret_cast<char*>(buf.data()) + 2;
  EXPECT_NE(message(odd).find("workspace has data pointer"), std::string::npos);
}

// A short call with more states than one program holds needs a workspace too (the chunks of
// states sum y there): the message says why. One plane of B x D x L elements, no spans.
TEST(ScanCheck, StateChunksNeedAWorkspace) {
  ScanCase c;
  c.batch = 2, c.D = 16, c.N = 40, c.L = 100;
  ScanProblem p(c);
  SelectiveScanArgs a = onCuda(p.args());
  EXPECT_EQ(selective_scan_workspace_size(a), 2 * 16 * 100);
  const std::string m = invalidArgMessage([&] { selective_scan(a); });
  EXPECT_NE(m.find("workspace is not given, expected a float32 buffer of at least 3200"), std::string::npos) << m;
  EXPECT_NE(m.find("more than 16 states run in chunks"), std::string::npos) << m;
  c.N = 16;
  EXPECT_EQ(selective_scan_workspace_size(onCuda(ScanProblem(c).args())), 0);
}

TEST(ScanReference, HandComputedWithDAndInitialState) {
  HostTensor u = hostTensor(DType::F32, {1, 1, 3}, {1, -2, 0.5});
  HostTensor delta = hostTensor(DType::F32, {1, 1, 3}, {1, 2, 0.5});
  HostTensor A = hostTensor(DType::F32, {1, 1}, {-0.5});
  HostTensor B = hostTensor(DType::F32, {1, 1, 1, 3}, {0.5, 1, -1});
  HostTensor C = hostTensor(DType::F32, {1, 1, 1, 3}, {2, -1, 0.25});
  HostTensor Dv = hostTensor(DType::F32, {1}, {0.25});
  HostTensor h0 = hostTensor(DType::F32, {1, 1, 1}, {2});
  HostTensor out = poisoned(DType::F32, {1, 1, 3}), hF = poisoned(DType::F32, {1, 1, 1});
  SelectiveScanArgs a;
  a.u = u.view(), a.delta = delta.view(), a.A = A.view(), a.B = B.view(), a.C = C.view(), a.D = Dv.view();
  a.out = out.view(), a.initial_states = h0.view(), a.final_states = hF.view();
  reference::selective_scan(a);
  // h = exp(dt A) h + dt B u;  y = C h + D u.
  const double h1 = std::exp(-0.5) * 2 + 1 * 0.5 * 1, y1 = 2 * h1 + 0.25 * 1;
  const double h2 = std::exp(-1.0) * h1 + 2 * 1 * -2, y2 = -1 * h2 + 0.25 * -2;
  const double h3 = std::exp(-0.25) * h2 + 0.5 * -1 * 0.5, y3 = 0.25 * h3 + 0.25 * 0.5;
  EXPECT_FLOAT_EQ(value(out, {0, 0, 0}), y1);
  EXPECT_FLOAT_EQ(value(out, {0, 0, 1}), y2);
  EXPECT_FLOAT_EQ(value(out, {0, 0, 2}), y3);
  EXPECT_FLOAT_EQ(value(hF, {0, 0, 0}), h3);
}

// Softplus of delta + delta_bias (log1p(exp) up to 20, the identity above: dt = 800 would
// overflow exp), constant B and C, z's gate, no D, a zero start.
TEST(ScanReference, HandComputedSoftplusBiasAndGate) {
  HostTensor u = hostTensor(DType::F32, {1, 1, 3}, {1, -2, 0.5});
  HostTensor delta = hostTensor(DType::F32, {1, 1, 3}, {-0.5, 799.5, -1.5});
  HostTensor bias = hostTensor(DType::F32, {1}, {0.5});
  HostTensor z = hostTensor(DType::F32, {1, 1, 3}, {1, -1, 2});
  HostTensor A = hostTensor(DType::F32, {1, 1}, {-0.5});
  HostTensor B = hostTensor(DType::F32, {1, 1}, {0.5}), C = hostTensor(DType::F32, {1, 1}, {2});
  HostTensor out = poisoned(DType::F32, {1, 1, 3}), hF = poisoned(DType::F32, {1, 1, 1});
  SelectiveScanArgs a;
  a.u = u.view(), a.delta = delta.view(), a.delta_bias = bias.view(), a.delta_softplus = true, a.z = z.view();
  a.A = A.view(), a.B = B.view(), a.C = C.view(), a.out = out.view(), a.final_states = hF.view();
  reference::selective_scan(a);
  const double dt1 = std::log(2.0), dt2 = 800, dt3 = std::log1p(std::exp(-1.0));
  const double h1 = dt1 * 0.5 * 1;  // exp(dt A) * 0
  const double h2 = std::exp(dt2 * -0.5) * h1 + dt2 * 0.5 * -2;
  const double h3 = std::exp(dt3 * -0.5) * h2 + dt3 * 0.5 * 0.5;
  EXPECT_FLOAT_EQ(value(out, {0, 0, 0}), 2 * h1 * gate(1));
  EXPECT_FLOAT_EQ(value(out, {0, 0, 1}), 2 * h2 * gate(-1));
  EXPECT_FLOAT_EQ(value(out, {0, 0, 2}), 2 * h3 * gate(2));
  EXPECT_FLOAT_EQ(value(hF, {0, 0, 0}), h3);
}

// ---- the reference: properties ----------------------------------------------------------------

// Runs every sequence of `src` alone, as a batch-1 call on views of its tokens: the inputs and
// initial states from src (as they were before any run), out and the final states into dst's
// tensors (each its own slot, no indices, no cu_seqlens).
void runEachAlone(const ScanProblem& src, ScanProblem& dst) {
  const SelectiveScanArgs in = src.args(), io = dst.args();
  for (int64_t i = 0; i < src.nseq; ++i) {
    const size_t k = static_cast<size_t>(i);
    auto tokens = [&](const TensorView& t) {
      return slice(slice(t, 0, src.row[k], 1), t.ndim - 1, src.start[k], src.len[k]);
    };
    SelectiveScanArgs s = in;
    s.u = tokens(in.u), s.delta = tokens(in.delta), s.z = tokens(in.z), s.out = tokens(io.out);
    if (in.B.ndim == 4) s.B = tokens(in.B);
    if (in.C.ndim == 4) s.C = tokens(in.C);
    s.cu_seqlens = s.initial_state_indices = s.final_state_indices = {};
    s.max_seqlen = 0;
    s.initial_states =
        src.c.initialStates && src.initSlot[k] >= 0 ? slice(in.initial_states, 0, src.initSlot[k], 1) : TensorView{};
    s.final_states =
        src.c.finalStates && src.finalSlot[k] >= 0 ? slice(io.final_states, 0, src.finalSlot[k], 1) : TensorView{};
    reference::selective_scan(s);
  }
}

// A packed row (cu_seqlens) or a batch of rows gives, bit for bit, the out and final states of
// running each sequence alone; states through slots (permuted, -1 entries), in place or not.
TEST(ScanReference, EverySequenceEqualsRunningItAlone) {
  std::vector<ScanCase> cases;
  ScanCase c;
  c.D = 6, c.N = 5, c.G = 2, c.lens = {5, 1, 12, 3}, c.maxSeqlen = 12;
  c.initialStates = c.finalStates = c.slotIndices = true;
  c.indexType = DType::I64;
  cases.push_back(c);
  c.uType = c.outType = c.deltaType = DType::BF16, c.bVarying = false, c.cType = DType::F16, c.G = 3;
  c.stateType = DType::BF16, c.inPlace = false, c.indexType = DType::I32, c.strided = true, c.seed = 2;
  cases.push_back(c);
  c = ScanCase{};  // no options, no states
  c.D = 4, c.N = 3, c.lens = {7, 2};
  c.hasD = c.hasZ = c.hasDeltaBias = c.softplus = false;
  cases.push_back(c);
  c = ScanCase{};  // dense rows; states in place, slot i for row i
  c.batch = 3, c.D = 5, c.N = kMaxScanState, c.L = 9, c.G = 5;
  c.uType = c.zType = c.outType = c.stateType = DType::F16;
  c.initialStates = c.finalStates = c.strided = true;
  cases.push_back(c);
  c.initialStates = false, c.slotIndices = true, c.seed = 3;  // final states only, through slots
  cases.push_back(c);

  for (const ScanCase& sc : cases) {
    SCOPED_TRACE(sc.name());
    const ScanProblem start(sc);
    ScanProblem whole = start, alone = start;
    reference::selective_scan(whole.args());
    runEachAlone(start, alone);
    EXPECT_EQ(nonFinite(whole.out), 0) << "every token written";
    EXPECT_EQ(whole.out.bytes, alone.out.bytes);
    if (sc.finalStates) {
      EXPECT_EQ(whole.finalHolder().bytes, alone.finalHolder().bytes);
      EXPECT_NE(whole.finalHolder().bytes, start.finalHolder().bytes);
    }
    if (sc.initialStates && !whole.inPlace()) EXPECT_EQ(whole.initStates.bytes, start.initStates.bytes);
  }
}

// Cutting every row at token 17 into two calls, the second starting from the first's final state
// (stored in fp32), matches one call but for that one rounding of the state.
TEST(ScanReference, SplittingASequenceCarriesTheState) {
  for (bool varying : {true, false}) {
    ScanCase c;
    c.batch = 2, c.D = 6, c.N = 7, c.L = 40, c.G = 3, c.bVarying = c.cVarying = varying;
    c.uType = DType::BF16;
    c.initialStates = c.finalStates = true, c.inPlace = false;
    SCOPED_TRACE(c.name());
    const ScanProblem start(c);
    ScanProblem whole = start, split = start;
    reference::selective_scan(whole.args());

    const int64_t cut = 17;
    HostTensor mid = poisoned(DType::F32, {start.S, c.D, c.N});
    const SelectiveScanArgs a = split.args();
    auto part = [&](int64_t from, int64_t len, const TensorView& init, const TensorView& fin) {
      SelectiveScanArgs s = a;
      s.u = slice(a.u, 2, from, len), s.delta = slice(a.delta, 2, from, len), s.z = slice(a.z, 2, from, len);
      s.out = slice(a.out, 2, from, len);
      if (varying) s.B = slice(a.B, 3, from, len), s.C = slice(a.C, 3, from, len);
      s.initial_states = init, s.final_states = fin;
      reference::selective_scan(s);
    };
    part(0, cut, a.initial_states, mid.view());
    part(cut, c.L - cut, mid.view(), a.final_states);

    const Compared o = compareTensor(whole.out, split.out.bytes, std::vector<char>(2, 1));
    EXPECT_EQ(o.violations, 0) << o.first;
    EXPECT_LE(o.maxErr, 1e-6) << o.first;
    EXPECT_GT(o.maxAbsErr, 0) << "the state's rounding shows";
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t d = 0; d < c.D; ++d)
        for (int64_t t = 0; t < cut; ++t) ASSERT_EQ(value(split.out, {b, d, t}), value(whole.out, {b, d, t}));
    const Compared f = compareTensor(whole.finalStates, split.finalStates.bytes, whole.slotsWritten());
    EXPECT_EQ(f.violations, 0) << f.first;
    EXPECT_LE(f.maxErr, 1e-6) << f.first;
  }
}

// B or C as the (batch, G = D, N, L) tensor every channel reads its own group of: constant rows
// repeated over batch and tokens, or group g repeated for its D / G channels.
HostTensor perChannel(const HostTensor& t, bool varying, int64_t batch, int64_t D, int64_t L) {
  const int64_t N = varying ? t.meta.shape[2] : t.meta.shape[1], per = varying ? D / t.meta.shape[1] : 1;
  HostTensor e = poisoned(t.meta.dtype, {batch, D, N, L});
  forEachElement(e.view(), [&](int64_t off, const std::vector<int64_t>& i) {
    storeElement(e.view(), off, varying ? value(t, {i[0], i[1] / per, i[2], i[3]}) : value(t, {i[1], i[2]}));
  });
  return e;
}

// Constant B/C, and groups of any size, equal their per-channel expansions bit for bit.
TEST(ScanReference, ConstantAndGroupedBCEqualPerChannel) {
  struct Form {
    bool b, c;
    int64_t G;
  };
  for (const Form f :
       {Form{false, false, 1}, Form{true, false, 2}, Form{false, true, 3}, Form{true, true, 2}, Form{true, true, 6}}) {
    for (bool packed : {false, true}) {
      ScanCase c;
      c.batch = 2, c.D = 6, c.N = 4, c.L = 11, c.G = f.G, c.bVarying = f.b, c.cVarying = f.c;
      c.bType = DType::BF16, c.cType = DType::F16;
      c.initialStates = c.finalStates = true;
      if (packed) c.lens = {4, 7};
      SCOPED_TRACE(c.name());
      ScanProblem p(c), e = p;
      const int64_t Bt = p.u.meta.shape[0], L = p.u.meta.shape[2];
      e.B = perChannel(p.B, f.b, Bt, c.D, L);
      e.C = perChannel(p.C, f.c, Bt, c.D, L);
      reference::selective_scan(p.args());
      reference::selective_scan(e.args());
      EXPECT_EQ(nonFinite(p.out), 0);
      EXPECT_EQ(p.out.bytes, e.out.bytes);
      EXPECT_EQ(p.initStates.bytes, e.initStates.bytes);
    }
  }
}

// IEEE half bits of a float that fp16 holds exactly as a normal number (or zero), made here
// rather than by the reference's conversions.
uint16_t halfBits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  if ((x & 0x7FFFFFFF) == 0) return sign;
  const int e = static_cast<int>((x >> 23) & 0xFF) - 127 + 15;
  EXPECT_TRUE(e > 0 && e < 31 && (x & 0x1FFF) == 0) << f << " is not an fp16 normal";
  return static_cast<uint16_t>(sign | (e << 10) | ((x >> 13) & 0x3FF));
}

// A copy of an fp32 tensor in bf16 or fp16 (values exact in it), its bits made from the fp32
// bits: bf16 is the top half.
HostTensor to16(const HostTensor& t, DType x) {
  HostTensor h = poisoned(x, shapeOf(t));
  forEachElement(t.view(), [&](int64_t off, const std::vector<int64_t>& i) {
    float f;
    std::memcpy(&f, t.bytes.data() + t.byteOffset + off * 4, 4);
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    EXPECT_EQ(bits & 0xFFFF, 0u) << f << " is not exact in bfloat16";
    const uint16_t v = x == DType::BF16 ? static_cast<uint16_t>(bits >> 16) : halfBits(f);
    int64_t o = 0;
    for (size_t k = 0; k < i.size(); ++k) o += i[k] * h.meta.strides[k];
    std::memcpy(h.bytes.data() + h.byteOffset + o * 2, &v, 2);
  });
  return h;
}

// 16-bit inputs (u, delta, z, time-varying B and C, initial states) are read as the values they
// hold: with values on a grid of 1/64 (exact in fp32, bf16 and fp16) the results equal the fp32
// call's bit for bit.
TEST(ScanReference, SixteenBitInputsAreReadExactly) {
  ScanCase c;
  c.batch = 2, c.D = 4, c.N = 6, c.L = 13, c.G = 2;
  c.initialStates = true;
  ScanProblem p32(c);
  std::mt19937_64 rng(5);
  auto grid = [&](HostTensor& t, int lo, int hi) {  // k / 64 for k in [lo, hi]
    std::uniform_int_distribution<int> k(lo, hi);
    forEachElement(t.view(),
                   [&](int64_t off, const std::vector<int64_t>&) { storeElement(t.view(), off, k(rng) / 64.0); });
  };
  grid(p32.u, -64, 64), grid(p32.delta, -192, 0), grid(p32.z, -128, 128);
  grid(p32.B, -64, 64), grid(p32.C, -64, 64), grid(p32.initStates, -64, 64);
  HostTensor fin32 = poisoned(DType::F32, {p32.S, c.D, c.N});
  SelectiveScanArgs a32 = p32.args();
  a32.final_states = fin32.view();
  reference::selective_scan(a32);
  EXPECT_EQ(nonFinite(p32.out), 0);

  for (DType x : {DType::BF16, DType::F16}) {
    SCOPED_TRACE(dtypeName(x));
    ScanProblem p = p32;
    p.out = poisoned(DType::F32, shapeOf(p32.out));
    for (HostTensor* t : {&p.u, &p.delta, &p.z, &p.B, &p.C, &p.initStates}) *t = to16(*t, x);
    HostTensor fin = poisoned(DType::F32, {p.S, c.D, c.N});
    SelectiveScanArgs a = p.args();
    a.final_states = fin.view();
    reference::selective_scan(a);
    EXPECT_EQ(p.out.bytes, p32.out.bytes);
    EXPECT_EQ(fin.bytes, fin32.bytes);
  }
}

// Every initial state is read before any final state is written: in place, with sequence i
// writing the slot sequence i + 1 reads, the result equals writing into a separate copy. (The
// GPU op asks for distinct slots; the reference takes any.)
TEST(ScanReference, InPlaceReadsEveryInitialStateFirst) {
  ScanCase c;
  c.D = 5, c.N = 3, c.lens = {4, 6, 3};
  c.initialStates = c.finalStates = c.slotIndices = true;
  ScanProblem p(c);
  for (int64_t i = 0; i < 3; ++i) setIndex(p.initIdx, i, i), setIndex(p.finalIdx, i, (i + 1) % 3);
  ScanProblem q = p;
  HostTensor sep = q.initStates;
  SelectiveScanArgs a = q.args();
  a.final_states = sep.view();
  reference::selective_scan(p.args());
  reference::selective_scan(a);
  EXPECT_EQ(p.out.bytes, q.out.bytes);
  EXPECT_EQ(p.initStates.bytes, sep.bytes);
  EXPECT_NE(p.initStates.bytes, q.initStates.bytes);
}

}  // namespace
