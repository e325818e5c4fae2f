// linear and embedding on the CPU: the argument checks of the ops (every bad input gets an
// InvalidArgument error naming the argument, and nothing touches the GPU: tensors here are fake
// device pointers never dereferenced), cuBLASLt's loader when the library is missing, and
// self-tests of the float64 references the GPU tests compare against.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runtime/Cublaslt.h"
#include "runtime/ops/EmbeddingCheck.h"
#include "runtime/ops/LinearCheck.h"
#include "ssmjit/error.h"
#include "ssmjit/ops.h"
#include "ssmjit/reference.h"
#include "tests/support/ExpectError.h"
#include "tests/support/FakeTensors.h"

using ssmjit::DeviceKind;
using ssmjit::DType;
using ssmjit::EmbeddingArgs;
using ssmjit::Error;
using ssmjit::LinearArgs;
using ssmjit::TensorView;
using namespace ssmjit::testing;

namespace {

// A valid call: x (13, 200) bf16, weight (77, 200), bias (77,), y (13, 77) bf16, a workspace.
LinearArgs validLinear(int64_t M = 13) {
  LinearArgs a;
  a.x = fakeView(0, DType::BF16, {M, 200});
  a.weight = fakeView(1, DType::BF16, {77, 200});
  a.bias = fakeView(2, DType::BF16, {77});
  a.y = fakeView(3, DType::BF16, {M, 77});
  a.workspace = fakeView(4, DType::F32, {1024});
  return a;
}

// The check's message, which the op (and linear_workspace_size, but for the workspace) repeats.
std::string linearError(const LinearArgs& a) {
  const std::string m = invalidArgMessage([&] {
    ssmjit::detail::checkLinearArgs(a, DeviceKind::CUDA, "linear");
    ssmjit::detail::checkLinearWorkspace(a, "linear");
  });
  if (!m.empty()) EXPECT_EQ(invalidArgMessage([&] { ssmjit::linear(a); }), m);
  return m;
}

EmbeddingArgs validEmbedding(int64_t T = 9) {
  EmbeddingArgs a;
  a.ids = fakeView(0, DType::I64, {T});
  a.table = fakeView(1, DType::BF16, {1000, 96});
  a.out = fakeView(2, DType::BF16, {T, 96});
  return a;
}

std::string embeddingError(const EmbeddingArgs& a) {
  const std::string m =
      invalidArgMessage([&] { ssmjit::detail::checkEmbeddingArgs(a, DeviceKind::CUDA, "embedding"); });
  if (!m.empty()) EXPECT_EQ(invalidArgMessage([&] { ssmjit::embedding(a); }), m);
  return m;
}

}  // namespace

TEST(LinearValidation, ValidCallsPassTheCheck) {
  const auto d = ssmjit::detail::checkLinearArgs(validLinear(), DeviceKind::CUDA, "linear");
  EXPECT_EQ(d.M, 13);
  EXPECT_EQ(d.N, 77);
  EXPECT_EQ(d.K, 200);
  // M = 0 passes every check, then returns without touching the GPU (on any machine).
  EXPECT_NO_THROW(ssmjit::linear(validLinear(0)));
  EXPECT_GT(ssmjit::linear_workspace_size(validLinear()), 0);
  // fp32 in, fp32 out; bf16 in, fp32 out (bias then fp32); no bias, no workspace; padded rows.
  LinearArgs f = validLinear(0);
  f.x.dtype = f.weight.dtype = f.y.dtype = f.bias.dtype = DType::F32;
  EXPECT_NO_THROW(ssmjit::linear(f));
  LinearArgs up = validLinear(0);
  up.y.dtype = up.bias.dtype = DType::F32;
  EXPECT_NO_THROW(ssmjit::linear(up));
  LinearArgs bare = validLinear();
  bare.bias = bare.workspace = TensorView{};
  bare.x.strides[0] = bare.y.strides[0] = 256;
  EXPECT_NO_THROW(ssmjit::detail::checkLinearArgs(bare, DeviceKind::CUDA, "linear"));
  // A single row's stride is never stepped: any value passes.
  LinearArgs row = validLinear(1);
  row.x.strides[0] = 3;
  EXPECT_NO_THROW(ssmjit::detail::checkLinearArgs(row, DeviceKind::CUDA, "linear"));
}

namespace {
// A bad call: validLinear() edited, and what its message must say.
struct BadLinear {
  std::function<void(LinearArgs&)> edit;
  std::vector<std::string> mentions;
};
char* bytesPast(void* p, int k) { return static_cast<char*>(p) + k; }
}  // namespace

TEST(LinearValidation, EachBadArgumentIsNamed) {
  const BadLinear cases[] = {
      // Shapes
      {[](LinearArgs& a) { a.x = TensorView{}; }, {"linear: x is required"}},
      {[](LinearArgs& a) {
         a.x = fakeView(0, DType::BF16, {2, 13, 200});
       },
       {"x has rank 3", "expected rank 2 (rows, in_features)"}},
      {[](LinearArgs& a) {
         a.weight = fakeView(1, DType::BF16, {77, 100});
       },
       {"weight has shape (77, 100), expected (77, 200)", "dim 1 (in_features) is 100", "in_features from x"}},
      {[](LinearArgs& a) {
         a.y = fakeView(3, DType::BF16, {13, 78});
       },
       {"y has shape (13, 78), expected (13, 77)", "dim 1 (out_features)"}},
      {[](LinearArgs& a) { a.bias = fakeView(2, DType::BF16, {78}); }, {"bias has shape (78), expected (77)"}},
      {[](LinearArgs& a) {
         a.x = fakeView(0, DType::BF16, {13, 0});
         a.weight = fakeView(1, DType::BF16, {77, 0});
       },
       {"x has shape (13, 0), expected at least 1 column"}},
      // Dtypes
      {[](LinearArgs& a) { a.weight.dtype = DType::F16; }, {"weight has dtype float16, expected x's dtype bfloat16"}},
      {[](LinearArgs& a) { a.x.dtype = a.weight.dtype = DType::I32; },
       {"x has dtype int32, expected float32, bfloat16 or float16"}},
      {[](LinearArgs& a) { a.y.dtype = DType::F16; }, {"y has dtype float16, expected float32 or bfloat16"}},
      {[](LinearArgs& a) { a.bias.dtype = DType::F32; }, {"bias has dtype float32, expected y's dtype bfloat16"}},
      // Strides, alignment, overlap
      {[](LinearArgs& a) {
         a.x.strides[0] = 1;
         a.x.strides[1] = 13;
       },
       {"x has strides (1, 13)", "expected a unit inner stride"}},
      {[](LinearArgs& a) { a.weight.strides[0] = 192; },
       {"weight has row stride 192", "expected a row stride >= in_features K = 200"}},
      {[](LinearArgs& a) { a.y.strides[0] = 64; }, {"y has row stride 64", "out_features N = 77"}},
      {[](LinearArgs& a) { a.x.strides[0] = 0; }, {"x has strides (0, 1)", "stride 0, expected a nonzero stride"}},
      {[](LinearArgs& a) { a.x.data = bytesPast(fakeAddress(0), 1); },
       {"x has data pointer 0x10001", "multiple of its element size (bfloat16: 2 bytes)"}},
      {[](LinearArgs& a) { a.bias.data = bytesPast(fakeAddress(2), 2); },
       {"bias has data pointer 0x2010002", "multiple of 16 bytes"}},
      {[](LinearArgs& a) { a.y.data = bytesPast(a.x.data, 64); },
       {"y (data 0x10040, shape (13, 77)) overlaps x", "expected separate memory"}},
      {[](LinearArgs& a) { a.y.data = a.weight.data; }, {"overlaps weight"}},
      // Devices and the workspace
      {[](LinearArgs& a) { a.weight.deviceId = 1; }, {"weight is on CUDA device 1, expected device 0 (where x is)"}},
      {[](LinearArgs& a) { a.y.device = DeviceKind::CPU; }, {"y is a CPU tensor, expected a CUDA tensor"}},
      {[](LinearArgs& a) { a.workspace.dtype = DType::BF16; }, {"workspace has dtype bfloat16, expected float32"}},
      {[](LinearArgs& a) { a.workspace.data = bytesPast(fakeAddress(4), 128); },
       {"workspace has data pointer 0x4010080", "multiple of 256 bytes"}},
      {[](LinearArgs& a) {
         a.workspace = fakeView(4, DType::F32, {16, 64});
         a.workspace.strides[0] = 128;
       },
       {"workspace has strides (128, 1)", "contiguous"}},
  };
  for (const BadLinear& c : cases) {
    LinearArgs a = validLinear();
    c.edit(a);
    const std::string m = linearError(a);
    for (const std::string& part : c.mentions) EXPECT_MENTIONS(m, part);
  }
}

TEST(LinearValidation, TheWorkspaceSizeChecksAllButTheWorkspace) {
  LinearArgs a = validLinear();
  a.weight.dtype = DType::F32;
  EXPECT_MENTIONS(invalidArgMessage([&] { (void)ssmjit::linear_workspace_size(a); }),
                  "linear_workspace_size: weight has dtype float32");
  a.weight.dtype = DType::BF16;
  a.workspace.dtype = DType::I32;
  EXPECT_NO_THROW((void)ssmjit::linear_workspace_size(a));
}

TEST(LinearValidation, TheReferenceSumsInDoubleAndRoundsOnce) {
  // x (2, 3) with row stride 4 (a padded row), weight (2, 3): small integers, exact in every dtype.
  std::vector<float> x = {1, 2, 3, -99, 4, 5, 6, -99}, w = {1, 0, -1, 2, 1, 1}, b = {0.5f, -1};
  std::vector<float> y(4, -7);
  LinearArgs a;
  a.x = TensorView::contiguous(x.data(), DType::F32, {2, 3}, DeviceKind::CPU);
  a.x.strides[0] = 4;
  a.weight = TensorView::contiguous(w.data(), DType::F32, {2, 3}, DeviceKind::CPU);
  a.bias = TensorView::contiguous(b.data(), DType::F32, {2}, DeviceKind::CPU);
  a.y = TensorView::contiguous(y.data(), DType::F32, {2, 2}, DeviceKind::CPU);
  ssmjit::reference::linear(a);
  EXPECT_EQ(y, (std::vector<float>{1 - 3 + 0.5f, 2 + 2 + 3 - 1, 4 - 6 + 0.5f, 8 + 5 + 6 - 1}));
  // One rounding of the double sum: 1 + 2^-8 + 2^-8 is 1 + 2^-7 in bf16 (a bf16 sum would round
  // 1 + 2^-8, a tie, to 1, twice).
  std::vector<uint16_t> xb = {ssmjit::reference::toBFloat16Bits(1), ssmjit::reference::toBFloat16Bits(0x1p-8),
                              ssmjit::reference::toBFloat16Bits(0x1p-8)};
  std::vector<uint16_t> wb(3, ssmjit::reference::toBFloat16Bits(1)), yb(1);
  LinearArgs h;
  h.x = TensorView::contiguous(xb.data(), DType::BF16, {1, 3}, DeviceKind::CPU);
  h.weight = TensorView::contiguous(wb.data(), DType::BF16, {1, 3}, DeviceKind::CPU);
  h.y = TensorView::contiguous(yb.data(), DType::BF16, {1, 1}, DeviceKind::CPU);
  ssmjit::reference::linear(h);
  EXPECT_EQ(ssmjit::reference::fromBFloat16Bits(yb[0]), 1 + 0x1p-7);
  // The same check as the op, on CPU tensors.
  a.y.device = DeviceKind::CUDA;
  EXPECT_MENTIONS(invalidArgMessage([&] { ssmjit::reference::linear(a); }),
                  "reference::linear: y is a CUDA tensor, expected a CPU tensor");
}

TEST(LinearValidation, TheLoaderSaysWhyWhenCublasLtIsMissing) {
  ssmjit::cublaslt::Api api;
  std::string why;
  EXPECT_FALSE(ssmjit::cublaslt::detail::tryLoad({"libssmjit_no_such_cublasLt.so.0"}, &api, &why));
  EXPECT_MENTIONS(why, "libcublasLt not found", "set CUDA_HOME or LD_LIBRARY_PATH",
                  "libssmjit_no_such_cublasLt.so.0: ", "/usr/local/cuda/lib64/libssmjit_no_such_cublasLt.so.0");
  // The real library, where this machine has it: every entry point resolves, and a status turns
  // into an error naming the call and the status.
  if (!ssmjit::cublaslt::available(&why)) {
    EXPECT_FALSE(why.empty());
    try {
      (void)ssmjit::cublaslt::api();
      ADD_FAILURE() << "cublaslt::api() did not throw although the library is unavailable";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), Error::Kind::Unavailable);
      EXPECT_MENTIONS(std::string(e.what()), "cuBLASLt unavailable: ", why);
    }
    GTEST_SKIP() << "libcublasLt not loadable here: " << why;
  }
  EXPECT_TRUE(ssmjit::cublaslt::detail::tryLoad({"libcublasLt.so.13", "libcublasLt.so"}, &api, &why)) << why;
  try {
    ssmjit::cublaslt::check(CUBLAS_STATUS_NOT_SUPPORTED, "linear: cublasLtMatmul");
    ADD_FAILURE() << "check did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), Error::Kind::Cuda);
    EXPECT_MENTIONS(std::string(e.what()), "linear: cublasLtMatmul: CUBLAS_STATUS_NOT_SUPPORTED");
  }
  EXPECT_NO_THROW(ssmjit::cublaslt::check(CUBLAS_STATUS_SUCCESS, "nothing"));
}

TEST(EmbeddingValidation, ArgumentsNameTheArgument) {
  EXPECT_NO_THROW(ssmjit::detail::checkEmbeddingArgs(validEmbedding(), DeviceKind::CUDA, "embedding"));
  EXPECT_NO_THROW(ssmjit::embedding(validEmbedding(0)));  // T = 0: checked, then nothing
  EmbeddingArgs a = validEmbedding();
  a.ids.dtype = DType::F32;
  EXPECT_MENTIONS(embeddingError(a), "embedding: ids has dtype float32, expected int32 or int64");
  a = validEmbedding();
  a.table = fakeView(1, DType::BF16, {1000});
  EXPECT_MENTIONS(embeddingError(a), "table has rank 1", "(vocab, dim)");
  a = validEmbedding();
  a.out.dtype = DType::F16;
  EXPECT_MENTIONS(embeddingError(a), "out has dtype float16, expected float32 or bfloat16");
  a = validEmbedding();
  a.out = fakeView(2, DType::BF16, {9, 95});
  EXPECT_MENTIONS(embeddingError(a), "out has shape (9, 95), expected (9, 96) [tokens, dim]");
  a = validEmbedding();
  a.table.deviceId = 2;
  EXPECT_MENTIONS(embeddingError(a), "table is on CUDA device 2, expected device 0 (where ids is)");
  a = validEmbedding();
  a.out.strides[0] = 0;
  EXPECT_MENTIONS(embeddingError(a), "out has strides (0, 1)", "stride 0");
}

TEST(EmbeddingValidation, TheReferenceCopiesRowsAndRejectsABadId) {
  std::vector<float> table = {0, 1, 10, 11, 20, 21};  // (3, 2)
  std::vector<int32_t> ids = {2, 0, 2};
  std::vector<uint16_t> out(6);
  EmbeddingArgs a;
  a.ids = TensorView::contiguous(ids.data(), DType::I32, {3}, DeviceKind::CPU);
  a.table = TensorView::contiguous(table.data(), DType::F32, {3, 2}, DeviceKind::CPU);
  a.out = TensorView::contiguous(out.data(), DType::BF16, {3, 2}, DeviceKind::CPU);
  EXPECT_MENTIONS(invalidArgMessage([&] { ssmjit::reference::embedding(a); }),
                  "out has dtype bfloat16, expected float32");
  std::vector<float> outF(6, -1);
  a.out = TensorView::contiguous(outF.data(), DType::F32, {3, 2}, DeviceKind::CPU);
  ssmjit::reference::embedding(a);
  EXPECT_EQ(outF, (std::vector<float>{20, 21, 0, 1, 20, 21}));
  ids[1] = 3;
  std::fill(outF.begin(), outF.end(), -1.0f);
  EXPECT_MENTIONS(invalidArgMessage([&] { ssmjit::reference::embedding(a); }),
                  "reference::embedding: ids[1] = 3, expected a row of table in [0, 3)");
  EXPECT_EQ(outF, std::vector<float>(6, -1.0f));  // nothing written
}

namespace {

// The backward of validLinear(): dy (13, 77), every gradient, a workspace.
ssmjit::LinearBackwardArgs validBackward() {
  ssmjit::LinearBackwardArgs a;
  a.x = fakeView(0, DType::BF16, {13, 200});
  a.weight = fakeView(1, DType::BF16, {77, 200});
  a.dy = fakeView(2, DType::BF16, {13, 77});
  a.dx = fakeView(3, DType::F32, {13, 200});
  a.dweight = fakeView(4, DType::F32, {77, 200});
  a.dbias = fakeView(5, DType::BF16, {77});
  a.workspace = fakeView(6, DType::F32, {int64_t{1} << 24});
  return a;
}

std::string backwardError(const ssmjit::LinearBackwardArgs& a) {
  return invalidArgMessage([&] { ssmjit::linear_backward(a); });
}

}  // namespace

TEST(LinearValidation, BackwardArgumentsAreNamed) {
  EXPECT_NO_THROW(ssmjit::detail::checkLinearBackwardArgs(validBackward(), DeviceKind::CUDA, "linear_backward"));
  // The GEMMs' 32 MiB, then 13 bf16 ones (7 floats).
  EXPECT_EQ(ssmjit::linear_backward_workspace_size(validBackward()), (int64_t{32} << 18) + 7);
  auto a = validBackward();
  a.dy = fakeView(2, DType::BF16, {13, 78});
  EXPECT_NE(backwardError(a).find("dy has shape (13, 78)"), std::string::npos) << backwardError(a);
  a = validBackward();
  a.dy = fakeView(2, DType::F32, {13, 77});
  EXPECT_NE(backwardError(a).find("dy has dtype float32"), std::string::npos) << backwardError(a);
  a = validBackward();
  a.dx = a.dweight = a.dbias = TensorView{};
  EXPECT_NE(backwardError(a).find("expected at least one gradient"), std::string::npos) << backwardError(a);
  a = validBackward();
  a.dweight = fakeView(4, DType::F16, {77, 200});
  EXPECT_NE(backwardError(a).find("dweight"), std::string::npos) << backwardError(a);
  a = validBackward();
  a.dx = fakeView(0, DType::F32, {13, 200});  // x's memory
  EXPECT_NE(backwardError(a).find("overlaps x"), std::string::npos) << backwardError(a);
  a = validBackward();
  a.workspace = fakeView(6, DType::F32, {1024});
  EXPECT_NE(backwardError(a).find("linear_backward_workspace_size"), std::string::npos) << backwardError(a);
}
