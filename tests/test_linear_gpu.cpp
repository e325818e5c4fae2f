// linear (cuBLASLt) and embedding on the GPU against the float64 reference: Mamba-2 shapes (in_proj,
// out_proj, lm_head at 2.7B sizes) in bf16, fp16 and fp32, odd shapes, bias, fp32 output, padded
// rows (gaps left alone), M = 0, a workspace, and both ops captured in a CUDA graph and replayed
// on new inputs; the embedding copies rows exactly and reports bad ids.
//
// The bound, per element of y: |gpu - ref| <= 2 u_y |ref| + (2 sqrt(K) + 2) u_32 S, with
// S = sum_k |x[m, k] w[n, k]| (+ |bias[n]|), u_y the unit roundoff of y's dtype and u_32 = 2^-24.
// Why: the reference reads the very bf16/fp16/fp32 values the GPU reads, so the inputs' own
// rounding (eps_bf16 of the values they were made from) is not a difference. What differs is
//  1. the GPU's fp32 accumulation: products of 16-bit inputs are exact in fp32 (fp32 inputs:
//     FFMA, at most one rounding a product, u_32 S in all), and each of the K - 1 additions errs
//     by at most u_32 times a partial sum, itself at most S. Round-to-nearest errors behave as a
//     random walk, so their sum stays within about sqrt(K) u_32 S (the probabilistic bound of
//     Higham and Mary; the worst case K u_32 S needs every rounding to go one way); 2 sqrt(K)
//     leaves room. Split-K partial sums are kept in fp32 too (Linear.cpp asks for it).
//  2. the one rounding of y to its dtype: both sides round almost the same value, so they differ
//     by at most one ulp of y, 2 u_y |ref|.
// A wrong operand mapping, transpose or stride gives errors of the size of y itself (about
// sqrt(K) times an input product), far outside: at K = 2560 the bound is 0.8 % of |y| for bf16
// plus 2e-3 absolute, against |y| ~ 17 for inputs in (-1, 1).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "GpuTest.h"
#include "ssmjit/ops.h"
#include "ssmjit/reference.h"

using namespace ssmjit;
using namespace ssmjit::testing;

namespace {

// A host matrix (rows, cols) of `dtype` with row stride ld, every byte first poisoned (so the gaps
// past each row stay poisoned). Movable only: the view points into the bytes.
struct HostMatrix {
  std::vector<uint8_t> bytes;
  TensorView view;  // CPU
  HostMatrix(DType t, int64_t rows, int64_t cols, int64_t ld)
      : bytes(static_cast<size_t>(std::max<int64_t>(1, rows * ld)) * dtypeBytes(t), kPoison) {
    view = TensorView::contiguous(bytes.data(), t, {rows, cols}, DeviceKind::CPU);
    view.strides[0] = ld;
  }
  HostMatrix(HostMatrix&&) = default;
  HostMatrix(const HostMatrix&) = delete;
  void fill(std::mt19937_64& rng, double lo, double hi) {
    std::uniform_real_distribution<double> u(lo, hi);
    forEachElement(view, [&](int64_t off, const std::vector<int64_t>&) { storeElement(view, off, u(rng)); });
  }
  // The same values with their signs cleared (the sign is the top bit in every float dtype).
  HostMatrix magnitudes() const {
    HostMatrix m(view.dtype, view.shape[0], view.shape[1], view.strides[0]);
    std::copy(bytes.begin(), bytes.end(), m.bytes.begin());
    const size_t w = static_cast<size_t>(dtypeBytes(view.dtype));
    for (size_t i = w - 1; i < m.bytes.size(); i += w) m.bytes[i] &= 0x7F;
    return m;
  }
  // The values converted to fp32 (exact from bf16 and fp16), dense.
  HostMatrix asF32() const {
    HostMatrix m(DType::F32, view.shape[0], view.shape[1], view.shape[1]);
    forEachElement(view, [&](int64_t off, const std::vector<int64_t>& i) {
      storeElement(m.view, i[0] * m.view.strides[0] + i[1], loadElement(view, off));
    });
    return m;
  }
  TensorView row() const {  // a (1, cols) matrix as a vector (cols,)
    return TensorView::contiguous(view.data, view.dtype, {view.shape[1]}, DeviceKind::CPU);
  }
};

// A device copy of a host tensor's bytes, viewed with the same shape and strides.
struct DeviceCopy {
  DeviceBuffer buf;
  TensorView view;
};
DeviceCopy toDevice(const std::vector<uint8_t>& bytes, TensorView v) {
  DeviceCopy d{DeviceBuffer::fromHost(bytes), v};
  d.view.data = d.buf.data();
  d.view.device = DeviceKind::CUDA;
  return d;
}
DeviceCopy toDevice(const HostMatrix& h) { return toDevice(h.bytes, h.view); }

struct LinearCase {
  DType in = DType::BF16, out = DType::BF16;
  int64_t M = 1, N = 1, K = 1;
  bool bias = false;
  int64_t padX = 0, padW = 0, padY = 0;  // elements past each row
  bool workspace = false;
  std::string name() const {
    char b[160];
    std::snprintf(b, sizeof b, "%s->%s (%lld, %lld)x(%lld, %lld)%s%s%s", dtypeName(in), dtypeName(out),
                  static_cast<long long>(M), static_cast<long long>(K), static_cast<long long>(N),
                  static_cast<long long>(K), bias ? " +bias" : "", padX + padW + padY ? " padded" : "",
                  workspace ? " +workspace" : "");
    return b;
  }
};

// The rows checked against the reference: all of a small batch, spread samples of a large one
// (the float64 reference of 2048 x 10576 x 2560 would take minutes).
std::vector<int64_t> checkedRows(int64_t M) {
  std::vector<int64_t> r;
  if (M <= 64) {
    for (int64_t m = 0; m < M; ++m) r.push_back(m);
    return r;
  }
  for (int64_t m : {int64_t{0}, int64_t{1}, M / 3, M / 2 + 1, 2 * M / 3 + 5, M - 2, M - 1}) r.push_back(m);
  return r;
}

// The inputs of one linear call on the host (random in (-1, 1)).
struct LinearInputs {
  HostMatrix x, w, bias;
  LinearInputs(const LinearCase& c, uint64_t seed)
      : x(c.in, c.M, c.K, c.K + c.padX), w(c.in, c.N, c.K, c.K + c.padW), bias(c.out, 1, c.N, c.N) {
    std::mt19937_64 rng(seed);
    x.fill(rng, -1, 1);
    w.fill(rng, -1, 1);
    bias.fill(rng, -1, 1);
  }
};

// Checks y (downloaded bytes, y's layout) at `rows` against the reference of x, w (and bias):
// every element within the bound above, and every gap byte still poisoned.
void expectLinear(const LinearCase& c, const LinearInputs& in, const std::vector<uint8_t>& yBytes,
                  const TensorView& yLayout, const std::string& what) {
  const HostMatrix xMag = in.x.magnitudes(), wMag = in.w.magnitudes(), bias32 = in.bias.asF32(),
                   biasMag = bias32.magnitudes();
  TensorView y = yLayout;
  y.data = const_cast<uint8_t*>(yBytes.data());
  y.device = DeviceKind::CPU;
  const double uY = unitRoundoff(c.out), u32 = 0x1p-24, sqrtK = std::sqrt(double(c.K));
  double worst = 0;
  std::string worstAt;
  int64_t bad = 0;
  for (int64_t m : checkedRows(c.M)) {
    HostMatrix ref(DType::F32, 1, c.N, c.N), mag(DType::F32, 1, c.N, c.N);
    LinearArgs r;
    r.x = in.x.view.narrow(0, m, 1);
    r.weight = in.w.view;
    r.y = ref.view;
    if (c.bias) r.bias = bias32.row();
    reference::linear(r);
    r.x = xMag.view.narrow(0, m, 1);
    r.weight = wMag.view;
    r.y = mag.view;
    if (c.bias) r.bias = biasMag.row();
    reference::linear(r);
    for (int64_t n = 0; n < c.N; ++n) {
      const double want = loadElement(ref.view, n), s = loadElement(mag.view, n);
      const double got = loadElement(y, m * y.strides[0] + n);
      const double bound = 2 * uY * std::fabs(want) + (2 * sqrtK + 2) * u32 * s;
      const double ratio = std::fabs(got - want) / bound;
      if (!(ratio <= 1)) ++bad;
      if (!(ratio <= worst)) {
        worst = ratio;
        char b[160];
        std::snprintf(b, sizeof b, "y[%lld, %lld] = %.9g, reference %.9g, bound %.3g", static_cast<long long>(m),
                      static_cast<long long>(n), got, want, bound);
        worstAt = b;
      }
    }
  }
  std::fprintf(stderr, "[ measured ] %s %s: worst error / bound %.3f (%s)\n",
               ::testing::UnitTest::GetInstance()->current_test_info()->name(), what.c_str(), worst, worstAt.c_str());
  EXPECT_EQ(bad, 0) << what << ": elements outside the bound; worst " << worstAt;
  // The gaps past each row of y: never written.
  const size_t eb = static_cast<size_t>(dtypeBytes(c.out));
  int64_t touched = 0;
  for (int64_t m = 0; m < c.M; ++m)
    for (int64_t j = c.N; j < y.strides[0]; ++j)
      for (size_t k = 0; k < eb; ++k) touched += yBytes[static_cast<size_t>(m * y.strides[0] + j) * eb + k] != kPoison;
  EXPECT_EQ(touched, 0) << what << ": bytes in the gaps between y's rows were written";
}

// Runs one case on `stream` and checks it.
void runLinear(const LinearCase& c, uint64_t seed) {
  SCOPED_TRACE(c.name());
  const LinearInputs in(c, seed);
  const HostMatrix yInit(c.out, c.M, c.N, c.N + c.padY);
  DeviceCopy x = toDevice(in.x), w = toDevice(in.w), bias = toDevice(in.bias.bytes, in.bias.row()), y = toDevice(yInit);
  DeviceBuffer ws;
  LinearArgs a;
  a.x = x.view;
  a.weight = w.view;
  a.y = y.view;
  if (c.bias) a.bias = bias.view;
  if (c.workspace) {
    const int64_t n = linear_workspace_size(a);
    ws = DeviceBuffer(static_cast<size_t>(n) * 4);
    a.workspace = TensorView::contiguous(ws.data(), DType::F32, {n});
  }
  linear(a);
  driver::check(driver::api().cuCtxSynchronize(), "cuCtxSynchronize after linear");
  expectLinear(c, in, y.buf.download<uint8_t>(), y.view, c.name());
}

// Mamba-2 2.7B: d_model 2560, d_inner 5120, in_proj's 10576 outputs (2 d_inner + 2 G N + H with
// G = 1, N = 128, H = 80); lm_head's vocabulary is another N of the same kind.
const LinearCase kModelShapes[] = {
    {DType::BF16, DType::BF16, 1, 10576, 2560},     // in_proj, one decode token
    {DType::BF16, DType::BF16, 7, 2560, 5120},      // out_proj, a small decode batch
    {DType::BF16, DType::BF16, 2048, 10576, 2560},  // in_proj, a prefill
    {DType::BF16, DType::BF16, 13, 77, 200},        // odd sizes, y rows of 77 (154 bytes)
};

}  // namespace

TEST(LinearGpu, ModelShapesInEveryDtype) {
  SSMJIT_REQUIRE_GPU();
  uint64_t seed = 1;
  for (DType t : {DType::BF16, DType::F16, DType::F32})
    for (LinearCase c : kModelShapes) {
      c.in = c.out = t;
      runLinear(c, seed++);
    }
}

TEST(LinearGpu, BiasAndFp32Output) {
  SSMJIT_REQUIRE_GPU();
  uint64_t seed = 100;
  for (DType t : {DType::BF16, DType::F16, DType::F32})
    for (DType out : {t, DType::F32})
      for (const LinearCase& shape : {kModelShapes[1], kModelShapes[3]}) {
        LinearCase c = shape;
        c.in = t;
        c.out = out;
        c.bias = true;
        runLinear(c, seed++);
        c.bias = false;
        if (out != t) runLinear(c, seed++);  // fp32 output without the epilogue too
      }
}

TEST(LinearGpu, PaddedRowsLeaveTheGapsAlone) {
  SSMJIT_REQUIRE_GPU();
  uint64_t seed = 200;
  for (DType t : {DType::BF16, DType::F32})
    for (const LinearCase& shape : {kModelShapes[0], kModelShapes[1], kModelShapes[3]}) {
      LinearCase c = shape;
      c.in = c.out = t;
      c.padX = 8;  // x a column slice of a wider tensor
      c.padW = 16;
      c.padY = 24;  // y a column slice of in_proj's output, say
      c.bias = true;
      runLinear(c, seed++);
      c.padX = 3;  // rows 2- or 4-byte aligned: cuBLASLt is told the pointers' alignment
      c.padY = 5;
      runLinear(c, seed++);
    }
}

TEST(LinearGpu, WorkspaceOffersEveryAlgorithm) {
  SSMJIT_REQUIRE_GPU();
  uint64_t seed = 300;
  for (const LinearCase& shape : {kModelShapes[0], kModelShapes[1], kModelShapes[3]})  // split-K candidates
    for (bool bias : {false, true}) {
      LinearCase c = shape;
      c.workspace = true;
      c.bias = bias;
      runLinear(c, seed++);
    }
}

TEST(LinearGpu, EmptyBatchDoesNothing) {
  SSMJIT_REQUIRE_GPU();
  const LinearCase c{DType::BF16, DType::BF16, 0, 77, 200};
  const LinearInputs in(c, 9);
  DeviceCopy w = toDevice(in.w);
  DeviceBuffer scratch(256);
  LinearArgs a;
  a.x = TensorView::contiguous(scratch.data(), DType::BF16, {0, 200});
  a.weight = w.view;
  a.y = TensorView::contiguous(scratch.data(), DType::BF16, {0, 77});
  EXPECT_NO_THROW(linear(a));
}

// linear_backward against its float64 reference with the bound above, K being the sum's length
// (N for dx, M for dweight and dbias) and S the sum of the magnitudes (the reference of the same
// call on |x|, |w|, |dy|). Every gradient given, fp32 or the inputs' dtype, dx's rows padded.
namespace {

struct BackwardCase {
  DType in = DType::BF16, grad = DType::F32;
  int64_t M = 1, N = 1, K = 1;
};

// Checks `got` (downloaded bytes, layout `ref`'s) against ref within the bound of a sum of `terms`.
void expectSums(const HostMatrix& ref, const HostMatrix& mag, const std::vector<uint8_t>& got, int64_t terms,
                const char* what) {
  TensorView g = ref.view;
  g.data = const_cast<uint8_t*>(got.data());
  const double uG = unitRoundoff(ref.view.dtype), u32 = 0x1p-24, sqrtK = std::sqrt(double(terms));
  int64_t bad = 0;
  double worst = 0;
  forEachElement(ref.view, [&](int64_t off, const std::vector<int64_t>&) {
    const double want = loadElement(ref.view, off), s = loadElement(mag.view, off), have = loadElement(g, off);
    const double ratio = std::fabs(have - want) / (2 * uG * std::fabs(want) + (2 * sqrtK + 2) * u32 * s);
    if (!(ratio <= 1)) ++bad;
    worst = std::max(worst, ratio);
  });
  std::fprintf(stderr, "[ measured ] %s %s: worst error / bound %.3f\n",
               ::testing::UnitTest::GetInstance()->current_test_info()->name(), what, worst);
  EXPECT_EQ(bad, 0) << what;
}

void runBackward(const BackwardCase& c, uint64_t seed) {
  SCOPED_TRACE(std::string(dtypeName(c.in)) + "->" + dtypeName(c.grad) + " M " + std::to_string(c.M) + " N " +
               std::to_string(c.N) + " K " + std::to_string(c.K));
  std::mt19937_64 rng(seed);
  HostMatrix x(c.in, c.M, c.K, c.K), w(c.in, c.N, c.K, c.K), dy(c.in, c.M, c.N, c.N);
  x.fill(rng, -1, 1);
  w.fill(rng, -1, 1);
  dy.fill(rng, -1, 1);
  // Outputs: dx with 8 elements of gap a row, dweight dense, dbias a (1, N) row.
  HostMatrix dx(c.grad, c.M, c.K, c.K + 8), dw(c.grad, c.N, c.K, c.K), db(c.grad, 1, c.N, c.N);
  HostMatrix rdx(c.grad, c.M, c.K, c.K + 8), rdw(c.grad, c.N, c.K, c.K), rdb(c.grad, 1, c.N, c.N);
  HostMatrix mdx(DType::F32, c.M, c.K, c.K + 8), mdw(DType::F32, c.N, c.K, c.K), mdb(DType::F32, 1, c.N, c.N);
  auto args = [](const TensorView& x, const TensorView& w, const TensorView& dy, const TensorView& dx,
                 const TensorView& dw, const TensorView& db) {
    LinearBackwardArgs a;
    a.x = x;
    a.weight = w;
    a.dy = dy;
    a.dx = dx;
    a.dweight = dw;
    a.dbias = db;
    return a;
  };
  reference::linear_backward(args(x.view, w.view, dy.view, rdx.view, rdw.view, rdb.row()));
  const HostMatrix xm = x.magnitudes(), wm = w.magnitudes(), dym = dy.magnitudes();
  reference::linear_backward(args(xm.view, wm.view, dym.view, mdx.view, mdw.view, mdb.row()));
  DeviceCopy gx = toDevice(x), gw = toDevice(w), gdy = toDevice(dy), gdx = toDevice(dx), gdw = toDevice(dw),
             gdb = toDevice(db.bytes, db.row());
  LinearBackwardArgs a = args(gx.view, gw.view, gdy.view, gdx.view, gdw.view, gdb.view);
  const int64_t n = linear_backward_workspace_size(a);
  DeviceBuffer ws(static_cast<size_t>(n) * 4);
  ws.fill(kPoison);
  a.workspace = TensorView::contiguous(ws.data(), DType::F32, {n});
  linear_backward(a);
  checkDeviceErrors();
  expectSums(rdx, mdx, gdx.buf.download<uint8_t>(), c.N, "dx");
  expectSums(rdw, mdw, gdw.buf.download<uint8_t>(), c.M, "dweight");
  expectSums(rdb, mdb, gdb.buf.download<uint8_t>(), c.M, "dbias");
  // dx's gaps: never written.
  const std::vector<uint8_t> bytes = gdx.buf.download<uint8_t>();
  const size_t eb = static_cast<size_t>(dtypeBytes(c.grad));
  int64_t touched = 0;
  for (int64_t m = 0; m < c.M; ++m)
    for (int64_t j = c.K; j < c.K + 8; ++j)
      for (size_t k = 0; k < eb; ++k) touched += bytes[static_cast<size_t>(m * (c.K + 8) + j) * eb + k] != kPoison;
  EXPECT_EQ(touched, 0) << "bytes in the gaps between dx's rows were written";
}

}  // namespace

TEST(LinearGpu, BackwardMatchesFloat64Reference) {
  SSMJIT_REQUIRE_GPU();
  uint64_t seed = 400;
  for (DType t : {DType::BF16, DType::F16, DType::F32})
    for (DType g : {t, DType::F32})
      for (const BackwardCase& shape :
           {BackwardCase{t, g, 13, 77, 200}, BackwardCase{t, g, 1000, 96, 160}, BackwardCase{t, g, 1, 40, 24}}) {
        if (g != t && shape.M == 1) continue;
        runBackward(shape, seed++);
      }
}

TEST(LinearGpu, BackwardOfAnEmptyBatchWritesZeros) {
  SSMJIT_REQUIRE_GPU();
  DeviceBuffer scratch(256);
  HostMatrix w(DType::BF16, 4, 8, 8), poisoned(DType::F32, 4, 8, 8);
  std::mt19937_64 rng(7);
  w.fill(rng, -1, 1);
  DeviceCopy gw = toDevice(w), gdw = toDevice(poisoned);
  LinearBackwardArgs a;
  a.x = TensorView::contiguous(scratch.data(), DType::BF16, {0, 8});
  a.weight = gw.view;
  a.dy = TensorView::contiguous(scratch.data(), DType::BF16, {0, 4});
  a.dweight = gdw.view;
  const int64_t n = linear_backward_workspace_size(a);
  DeviceBuffer ws(static_cast<size_t>(n) * 4);
  a.workspace = TensorView::contiguous(ws.data(), DType::F32, {n});
  linear_backward(a);
  for (float v : gdw.buf.download<float>()) EXPECT_EQ(v, 0.0f);
}

// A decode step's shape: the embedding, then out_proj-sized GEMM with bias, captured once (after a
// first call outside capture makes the kernel, the cuBLASLt handle and the plan) and replayed on
// new ids. GLOBAL capture mode: an allocation or a synchronous call anywhere would fail it.
TEST(LinearGpu, CapturedInACudaGraphWithTheEmbedding) {
  SSMJIT_REQUIRE_GPU();
  SSMJIT_REQUIRE_NVRTC();
  const int64_t V = 1000, T = 7;
  LinearCase c = kModelShapes[1];  // (7, 5120) x (2560, 5120)
  c.bias = true;
  LinearInputs in(c, 42);  // x is replaced by the embedding's reference below
  HostMatrix table(DType::BF16, V, c.K, c.K);
  std::mt19937_64 rng(43);
  table.fill(rng, -1, 1);
  std::vector<int32_t> ids(T);
  const DeviceCopy dTable = toDevice(table), w = toDevice(in.w), bias = toDevice(in.bias.bytes, in.bias.row());
  DeviceBuffer dIds(T * sizeof(int32_t)), h(static_cast<size_t>(T * c.K) * 2), y(static_cast<size_t>(T * c.N) * 2);
  EmbeddingArgs e;
  e.ids = TensorView::contiguous(dIds.data(), DType::I32, {T});
  e.table = dTable.view;
  e.out = TensorView::contiguous(h.data(), DType::BF16, {T, c.K});
  LinearArgs a;
  a.x = e.out;
  a.weight = w.view;
  a.bias = bias.view;
  a.y = TensorView::contiguous(y.data(), DType::BF16, {T, c.N});
  const int64_t wsElems = linear_workspace_size(a);
  DeviceBuffer ws(static_cast<size_t>(wsElems) * 4);
  a.workspace = TensorView::contiguous(ws.data(), DType::F32, {wsElems});
  OwnedStream stream;
  auto step = [&](CUstream s) {
    embedding(e, s);
    linear(a, s);
  };
  dIds.upload(ids);
  step(stream);
  stream.synchronize();
  CudaGraph g = CudaGraph::capture(stream, step, CU_STREAM_CAPTURE_MODE_GLOBAL);
  ASSERT_TRUE(g.valid());
  for (int replay = 0; replay < 2; ++replay) {
    for (int64_t t = 0; t < T; ++t) ids[static_cast<size_t>(t)] = static_cast<int32_t>((t * 131 + replay * 17) % V);
    dIds.upload(ids);
    g.launch(stream);
    stream.synchronize();
    checkDeviceErrors(stream);
    // The reference: the same embedding, then the same GEMM.
    EmbeddingArgs r;
    r.ids = TensorView::contiguous(ids.data(), DType::I32, {T}, DeviceKind::CPU);
    r.table = table.view;
    r.out = in.x.view;
    reference::embedding(r);
    expectLinear(c, in, y.download<uint8_t>(), a.y, "replay " + std::to_string(replay));
  }
}

TEST(EmbeddingGpu, CopiesRowsExactly) {
  SSMJIT_REQUIRE_GPU();
  SSMJIT_REQUIRE_NVRTC();
  std::mt19937_64 rng(5);
  for (DType idType : {DType::I32, DType::I64})
    for (DType tt : {DType::BF16, DType::F16, DType::F32})
      for (bool fp32Out : {false, true})
        for (int64_t D : {int64_t{2560}, int64_t{97}})
          for (int64_t T : {int64_t{1}, int64_t{300}}) {
            const int64_t V = 5000, pad = D == 97 ? 5 : 0;
            const DType ot = fp32Out ? DType::F32 : tt;
            SCOPED_TRACE(std::string(dtypeName(idType)) + " ids, " + dtypeName(tt) + " table -> " + dtypeName(ot) +
                         ", D " + std::to_string(D) + ", T " + std::to_string(T));
            HostMatrix table(tt, V, D, D + pad), out(ot, T, D, D + pad), ids(idType, 1, T, T);
            table.fill(rng, -3, 3);
            std::uniform_int_distribution<int64_t> pick(0, V - 1);
            for (int64_t t = 0; t < T; ++t) storeElement(ids.view, t, double(pick(rng)));
            HostMatrix want(ot, T, D, D + pad);
            EmbeddingArgs r;
            r.ids = ids.row();
            r.table = table.view;
            r.out = want.view;
            reference::embedding(r);
            DeviceCopy dIds = toDevice(ids.bytes, ids.row()), dTable = toDevice(table), dOut = toDevice(out);
            embedding({dIds.view, dTable.view, dOut.view});
            checkDeviceErrors();
            // A copy (or an exact widening to fp32): every byte equal, the gaps still poisoned.
            EXPECT_TRUE(dOut.buf.download<uint8_t>() == want.bytes);
          }
}

TEST(EmbeddingGpu, BadIdsWriteZerosAndAreReported) {
  SSMJIT_REQUIRE_GPU();
  SSMJIT_REQUIRE_NVRTC();
  const int64_t V = 50, D = 2560, T = 6;
  std::mt19937_64 rng(6);
  HostMatrix table(DType::BF16, V, D, D);
  table.fill(rng, -1, 1);
  for (DType idType : {DType::I32, DType::I64}) {
    SCOPED_TRACE(dtypeName(idType));
    HostMatrix ids(idType, 1, T, T);
    // Row 2: V (one past the end); row 4: -1; int64 row 5: 2^32 + 1, which in 32 bits would wrap
    // to row 1.
    const double bad5 = idType == DType::I64 ? 4294967297.0 : 7.0;
    const double values[T] = {3, 0, double(V), 49, -1, bad5};
    for (int64_t t = 0; t < T; ++t) storeElement(ids.view, t, values[t]);
    DeviceCopy dIds = toDevice(ids.bytes, ids.row()), dTable = toDevice(table),
               dOut = toDevice(HostMatrix(DType::BF16, T, D, D));
    embedding({dIds.view, dTable.view, dOut.view});
    try {
      checkDeviceErrors();
      ADD_FAILURE() << "checkDeviceErrors did not report the bad ids";
    } catch (const Error& err) {
      EXPECT_EQ(err.kind(), Error::Kind::InvalidArgument);
      const std::string m = err.what();
      // The first bad id a program reports wins: any of the bad rows.
      EXPECT_NE(m.find("embedding: ids["), std::string::npos) << m;
      EXPECT_NE(m.find("is out of range [0, 50)"), std::string::npos) << m;
    }
    EXPECT_NO_THROW(checkDeviceErrors());  // the record was reset
    std::vector<uint8_t> got = dOut.buf.download<uint8_t>();
    TensorView o = dOut.view;
    o.data = got.data();
    o.device = DeviceKind::CPU;
    for (int64_t t = 0; t < T; ++t) {
      const bool bad = values[t] < 0 || values[t] >= double(V);
      int64_t wrong = 0;
      for (int64_t j = 0; j < D; ++j) {
        const double want = bad ? 0.0 : loadElement(table.view, int64_t(values[t]) * D + j);
        wrong += loadElement(o, t * D + j) != want;
      }
      EXPECT_EQ(wrong, 0) << "row " << t << (bad ? " (a bad id: zeros)" : " (a copy of its table row)");
    }
  }
}
