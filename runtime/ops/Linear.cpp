// linear: y = x W^T (+ bias) through cuBLASLt (runtime/Cublaslt.h). The arguments are checked once,
// here at the edge (LinearCheck); each thread keeps, per call shape, the cuBLASLt descriptors and
// the algorithm the heuristic chose, so a repeated call (a decode step's GEMMs) costs a hash lookup
// and one cublasLtMatmul: nothing allocated, nothing synchronised, capturable in a CUDA graph.
//
// Row-major to column-major. cuBLASLt's matrices are column-major: a row-major (R, C) matrix with
// row stride ld is, to cuBLASLt, the column-major (C, R) matrix with leading dimension ld (its
// transpose, in the same bytes). So the row-major y (M, N) = x (M, K) W^T, with W (N, K), is
// computed as the column-major y^T (N, M) = W (N, K) x^T (K, M):
//   A = weight's bytes: column-major (K, N), ld = weight's row stride; TRANSA = T: op(A) = W (N, K);
//   B = x's bytes:      column-major (K, M), ld = x's row stride;      TRANSB = N: op(B) = x^T (K, M);
//   C = D = y's bytes:  column-major (N, M), ld = y's row stride.
// The bias epilogue adds a vector of D's row count (N) to every column: bias[n] to y[m, n].
#include <cublasLt.h>
#include <cuda.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "compiler/Hash.h"
#include "runtime/Cublaslt.h"
#include "runtime/Driver.h"
#include "runtime/ops/LinearCheck.h"
#include "ssmjit/error.h"
#include "ssmjit/ops.h"

namespace ssmjit {
namespace {

// The largest workspace the heuristic is offered: cuBLAS's own default on Hopper.
constexpr int64_t kWorkspaceBytes = int64_t{32} << 20;

cudaDataType_t cudaType(DType t) { return t == DType::F32 ? CUDA_R_32F : t == DType::F16 ? CUDA_R_16F : CUDA_R_16BF; }

// The largest power of two up to 256 dividing the address: the heuristic's minimum alignments
// (its default, 256, would exclude every algorithm for a less aligned pointer or slice).
uint32_t alignmentOf(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t c = 256;
  while (c > 1 && a % c != 0) c >>= 1;
  return c;
}

// A leading dimension: the row stride, or the row length for a single row (whose stride is never
// stepped; cuBLASLt wants ld >= the column-major row count).
int64_t leading(const TensorView& t) { return t.shape[0] > 1 ? t.strides[0] : t.shape[1]; }

// One cuBLASLt handle per context, created at its first linear call and kept for the process.
cublasLtHandle_t handleFor(CUcontext ctx) {
  static std::mutex mutex;
  static std::unordered_map<CUcontext, cublasLtHandle_t> handles;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = handles.find(ctx);
  if (it != handles.end()) return it->second;
  cublasLtHandle_t h = nullptr;
  cublaslt::check(cublaslt::api().create(&h), "linear: cublasLtCreate");
  handles.emplace(ctx, h);
  return h;
}

// Everything a call's plan depends on, as words (hashed and compared whole).
enum KeyWord { kCtx, kM, kN, kK, kLdx, kLdw, kLdy, kXType, kYType, kBias, kAlignX, kAlignW, kAlignY, kWs, kWords };
using Key = std::array<int64_t, kWords>;
struct KeyHash {
  size_t operator()(const Key& k) const { return static_cast<size_t>(hash::bytes64(k.data(), sizeof(Key))); }
};

// The descriptors and the chosen algorithm of one call shape.
struct Plan {
  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    const cublaslt::Api& api = cublaslt::api();
    if (d) api.matrixLayoutDestroy(d);
    if (b) api.matrixLayoutDestroy(b);
    if (a) api.matrixLayoutDestroy(a);
    if (desc) api.matmulDescDestroy(desc);
  }
};

std::string describe(const LinearArgs& a, const detail::LinearDims& d, int64_t wsBytes) {
  auto one = [](const char* n, const TensorView& t) {
    return std::string(n) + " " + t.shapeString() + " " + dtypeName(t.dtype) + " (row stride " +
           std::to_string(leading(t)) + ", " + std::to_string(alignmentOf(t.data)) + "-byte aligned)";
  };
  return "y = x weight^T with M = " + std::to_string(d.M) + ", N = " + std::to_string(d.N) +
         ", K = " + std::to_string(d.K) + ": " + one("x", a.x) + ", " + one("weight", a.weight) + ", " +
         one("y", a.y) + (a.bias.defined() ? ", bias" : "") + ", workspace " + std::to_string(wsBytes) + " bytes";
}

std::unique_ptr<Plan> makePlan(const LinearArgs& a, const detail::LinearDims& d, CUcontext ctx, int64_t wsBytes) {
  const cublaslt::Api& api = cublaslt::api();
  auto plan = std::make_unique<Plan>();
  plan->handle = handleFor(ctx);
  // fp32 accumulation for every input dtype; fp32 inputs stay fp32 (CUBLAS_COMPUTE_32F: no TF32).
  cublaslt::check(api.matmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "linear: cublasLtMatmulDescCreate");
  auto setDesc = [&](cublasLtMatmulDescAttributes_t attr, const auto& v, const char* what) {
    cublaslt::check(api.matmulDescSetAttribute(plan->desc, attr, &v, sizeof v), what);
  };
  const cublasOperation_t transA = CUBLAS_OP_T, transB = CUBLAS_OP_N;
  setDesc(CUBLASLT_MATMUL_DESC_TRANSA, transA, "linear: cublasLtMatmulDescSetAttribute(TRANSA)");
  setDesc(CUBLASLT_MATMUL_DESC_TRANSB, transB, "linear: cublasLtMatmulDescSetAttribute(TRANSB)");
  if (a.bias.defined()) {
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    setDesc(CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue, "linear: cublasLtMatmulDescSetAttribute(EPILOGUE)");
    const void* bias = a.bias.data;  // set again by every call; the heuristic needs it set
    setDesc(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias, "linear: cublasLtMatmulDescSetAttribute(BIAS_POINTER)");
  }
  const auto rows = [](int64_t v) { return static_cast<uint64_t>(v); };
  cublaslt::check(api.matrixLayoutCreate(&plan->a, cudaType(a.weight.dtype), rows(d.K), rows(d.N), leading(a.weight)),
                  "linear: cublasLtMatrixLayoutCreate(weight)");
  cublaslt::check(api.matrixLayoutCreate(&plan->b, cudaType(a.x.dtype), rows(d.K), rows(d.M), leading(a.x)),
                  "linear: cublasLtMatrixLayoutCreate(x)");
  cublaslt::check(api.matrixLayoutCreate(&plan->d, cudaType(a.y.dtype), rows(d.N), rows(d.M), leading(a.y)),
                  "linear: cublasLtMatrixLayoutCreate(y)");

  cublasLtMatmulPreference_t pref = nullptr;
  cublaslt::check(api.preferenceCreate(&pref), "linear: cublasLtMatmulPreferenceCreate");
  std::unique_ptr<void, void (*)(void*)> prefGuard(
      pref, [](void* p) { cublaslt::api().preferenceDestroy(static_cast<cublasLtMatmulPreference_t>(p)); });
  auto setPref = [&](cublasLtMatmulPreferenceAttributes_t attr, const auto& v, const char* what) {
    cublaslt::check(api.preferenceSetAttribute(pref, attr, &v, sizeof v), what);
  };
  // With a bias epilogue, no workspace: cuBLASLt's split-K kernels with a bias give wrong sums
  // for some shapes (bf16 (13, 200) x (77, 200) split 264 ways: 8% off) and race in shared memory
  // under compute-sanitizer's racecheck, on an H100 with CUDA 13.
  const uint64_t maxWs = a.bias.defined() ? 0 : static_cast<uint64_t>(wsBytes);
  setPref(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, maxWs, "linear: cublasLtMatmulPreferenceSetAttribute(workspace)");
  // Split-K partial sums in fp32 only: the in-place and output-type schemes would add them up in
  // y's dtype (bf16), rounding the accumulation.
  const uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
  setPref(CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, schemes,
          "linear: cublasLtMatmulPreferenceSetAttribute(REDUCTION_SCHEME_MASK)");
  const uint32_t alignW = alignmentOf(a.weight.data), alignX = alignmentOf(a.x.data), alignY = alignmentOf(a.y.data);
  setPref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignW, "linear: cublasLtMatmulPreferenceSetAttribute(alignment A)");
  setPref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignX, "linear: cublasLtMatmulPreferenceSetAttribute(alignment B)");
  setPref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignY, "linear: cublasLtMatmulPreferenceSetAttribute(alignment C)");
  setPref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignY, "linear: cublasLtMatmulPreferenceSetAttribute(alignment D)");

  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const std::string what = "linear: cublasLtMatmulAlgoGetHeuristic for " + describe(a, d, wsBytes);
  cublaslt::check(api.algoGetHeuristic(plan->handle, plan->desc, plan->a, plan->b, plan->d, plan->d, pref, 1, &result,
                                       &found),
                  what.c_str());
  if (found < 1 || result.state != CUBLAS_STATUS_SUCCESS)
    throw Error(Error::Kind::Cuda, "linear: cuBLASLt has no algorithm for " + describe(a, d, wsBytes));
  plan->algo = result.algo;
  return plan;
}

const Plan& planFor(const LinearArgs& a, const detail::LinearDims& d, int64_t wsBytes) {
  const CUcontext ctx = driver::ensureContext();
  const Key key{reinterpret_cast<int64_t>(ctx),
                d.M,
                d.N,
                d.K,
                leading(a.x),
                leading(a.weight),
                leading(a.y),
                static_cast<int64_t>(a.x.dtype),
                static_cast<int64_t>(a.y.dtype),
                a.bias.defined(),
                alignmentOf(a.x.data),
                alignmentOf(a.weight.data),
                alignmentOf(a.y.data),
                wsBytes};
  // Per thread: a plan's descriptor takes each call's bias pointer, so threads must not share one.
  thread_local std::unordered_map<Key, std::unique_ptr<Plan>, KeyHash> plans;
  auto it = plans.find(key);
  if (it == plans.end()) it = plans.emplace(key, makePlan(a, d, ctx, wsBytes)).first;
  return *it->second;
}

}  // namespace

int64_t linear_workspace_size(const LinearArgs& a) {
  detail::checkLinearArgs(a, DeviceKind::CUDA, "linear_workspace_size");
  return kWorkspaceBytes / 4;
}

void linear(const LinearArgs& a, Stream stream) {
  const detail::LinearDims d = detail::checkLinearArgs(a, DeviceKind::CUDA, "linear");
  detail::checkLinearWorkspace(a, "linear");
  if (d.M == 0 || d.N == 0) return;
  const int64_t wsBytes = a.workspace.defined() ? std::min(a.workspace.numel() * 4, kWorkspaceBytes) : 0;
  const Plan& p = planFor(a, d, wsBytes);
  const cublaslt::Api& api = cublaslt::api();
  if (a.bias.defined()) {
    const void* bias = a.bias.data;
    cublaslt::check(api.matmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias),
                    "linear: cublasLtMatmulDescSetAttribute(BIAS_POINTER)");
  }
  const float one = 1.0f, zero = 0.0f;  // host scalars (the default pointer mode), fp32 as the scale type
  cublaslt::check(api.matmul(p.handle, p.desc, &one, a.weight.data, p.a, a.x.data, p.b, &zero, a.y.data, p.d, a.y.data,
                             p.d, &p.algo, wsBytes ? a.workspace.data : nullptr, static_cast<size_t>(wsBytes),
                             static_cast<cudaStream_t>(stream)),
                  "linear: cublasLtMatmul");
}

}  // namespace ssmjit
