// The cuBLASLt matmul engine (Gemm.h): per thread and call shape, the descriptors and the
// heuristic's algorithm, kept for the process.
#include "runtime/ops/Gemm.h"

#include <cublasLt.h>
#include <cuda.h>

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "compiler/Hash.h"
#include "runtime/Cublaslt.h"
#include "runtime/Driver.h"
#include "ssmjit/error.h"

namespace ssmjit::detail {
namespace {

cudaDataType_t cudaType(DType t) { return t == DType::F32 ? CUDA_R_32F : t == DType::F16 ? CUDA_R_16F : CUDA_R_16BF; }

// The largest power of two up to 256 dividing the address: the heuristic's minimum alignments
// (its default, 256, would exclude every algorithm for a less aligned pointer or slice).
uint32_t alignmentOf(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t c = 256;
  while (c > 1 && a % c != 0) c >>= 1;
  return c;
}

// One cuBLASLt handle per context, created at its first call and kept for the process.
cublasLtHandle_t handleFor(CUcontext ctx) {
  static std::mutex mutex;
  static std::unordered_map<CUcontext, cublasLtHandle_t> handles;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = handles.find(ctx);
  if (it != handles.end()) return it->second;
  cublasLtHandle_t h = nullptr;
  cublaslt::check(cublaslt::api().create(&h), "cublasLtCreate");
  handles.emplace(ctx, h);
  return h;
}

// Everything a call's plan depends on, as words (hashed and compared whole).
using Key = std::array<int64_t, 20>;
struct KeyHash {
  size_t operator()(const Key& k) const { return static_cast<size_t>(hash::bytes64(k.data(), sizeof(Key))); }
};

Key keyOf(CUcontext ctx, const Gemm& g, int64_t wsBytes) {
  return {reinterpret_cast<int64_t>(ctx),
          g.a.rows,
          g.a.cols,
          g.a.ld,
          static_cast<int64_t>(g.a.dtype),
          alignmentOf(g.a.data),
          g.b.rows,
          g.b.cols,
          g.b.ld,
          static_cast<int64_t>(g.b.dtype),
          alignmentOf(g.b.data),
          g.d.rows,
          g.d.cols,
          g.d.ld,
          static_cast<int64_t>(g.d.dtype),
          alignmentOf(g.d.data),
          g.transA,
          g.transB,
          g.bias != nullptr,
          wsBytes};
}

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

std::string describe(const Gemm& g, int64_t wsBytes) {
  auto one = [](const char* n, const GemmMatrix& m, bool t) {
    return std::string(n) + (t ? "^T" : "") + " column-major " + std::to_string(m.rows) + " x " +
           std::to_string(m.cols) + " " + dtypeName(m.dtype) + " (ld " + std::to_string(m.ld) + ", " +
           std::to_string(alignmentOf(m.data)) + "-byte aligned)";
  };
  return "D = op(A) op(B) with " + one("A", g.a, g.transA) + ", " + one("B", g.b, g.transB) + ", " +
         one("D", g.d, false) + (g.bias ? ", bias" : "") + ", workspace " + std::to_string(wsBytes) + " bytes";
}

std::unique_ptr<Plan> makePlan(const Gemm& g, CUcontext ctx, int64_t wsBytes, const std::string& what) {
  const cublaslt::Api& api = cublaslt::api();
  auto plan = std::make_unique<Plan>();
  plan->handle = handleFor(ctx);
  auto check = [&](cublasStatus_t s, const char* call) { cublaslt::check(s, (what + ": " + call).c_str()); };
  // fp32 accumulation for every input dtype; fp32 inputs stay fp32 (CUBLAS_COMPUTE_32F: no TF32).
  check(api.matmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
  auto setDesc = [&](cublasLtMatmulDescAttributes_t attr, const auto& v, const char* call) {
    check(api.matmulDescSetAttribute(plan->desc, attr, &v, sizeof v), call);
  };
  const cublasOperation_t transA = g.transA ? CUBLAS_OP_T : CUBLAS_OP_N, transB = g.transB ? CUBLAS_OP_T : CUBLAS_OP_N;
  setDesc(CUBLASLT_MATMUL_DESC_TRANSA, transA, "cublasLtMatmulDescSetAttribute(TRANSA)");
  setDesc(CUBLASLT_MATMUL_DESC_TRANSB, transB, "cublasLtMatmulDescSetAttribute(TRANSB)");
  if (g.bias) {
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    setDesc(CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue, "cublasLtMatmulDescSetAttribute(EPILOGUE)");
    const void* bias = g.bias;  // set again by every call; the heuristic needs it set
    setDesc(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias, "cublasLtMatmulDescSetAttribute(BIAS_POINTER)");
  }
  auto layout = [&](cublasLtMatrixLayout_t* l, const GemmMatrix& m, const char* call) {
    check(api.matrixLayoutCreate(l, cudaType(m.dtype), static_cast<uint64_t>(m.rows), static_cast<uint64_t>(m.cols),
                                 m.ld),
          call);
  };
  layout(&plan->a, g.a, "cublasLtMatrixLayoutCreate(A)");
  layout(&plan->b, g.b, "cublasLtMatrixLayoutCreate(B)");
  layout(&plan->d, g.d, "cublasLtMatrixLayoutCreate(D)");

  cublasLtMatmulPreference_t pref = nullptr;
  check(api.preferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
  std::unique_ptr<void, void (*)(void*)> prefGuard(
      pref, [](void* p) { cublaslt::api().preferenceDestroy(static_cast<cublasLtMatmulPreference_t>(p)); });
  auto setPref = [&](cublasLtMatmulPreferenceAttributes_t attr, const auto& v, const char* call) {
    check(api.preferenceSetAttribute(pref, attr, &v, sizeof v), call);
  };
  // With a bias epilogue, no workspace: cuBLASLt's split-K kernels with a bias give wrong sums
  // for some shapes (bf16 (13, 200) x (77, 200) split 264 ways: 8% off) and race in shared memory
  // under compute-sanitizer's racecheck, on an H100 with CUDA 13.
  const uint64_t maxWs = g.bias ? 0 : static_cast<uint64_t>(wsBytes);
  setPref(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, maxWs, "cublasLtMatmulPreferenceSetAttribute(workspace)");
  // Split-K partial sums in fp32 only: the in-place and output-type schemes would add them up in
  // D's dtype (bf16), rounding the accumulation.
  const uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
  setPref(CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, schemes,
          "cublasLtMatmulPreferenceSetAttribute(REDUCTION_SCHEME_MASK)");
  const uint32_t alignA = alignmentOf(g.a.data), alignB = alignmentOf(g.b.data), alignD = alignmentOf(g.d.data);
  setPref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignA, "cublasLtMatmulPreferenceSetAttribute(alignment A)");
  setPref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignB, "cublasLtMatmulPreferenceSetAttribute(alignment B)");
  setPref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignD, "cublasLtMatmulPreferenceSetAttribute(alignment C)");
  setPref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignD, "cublasLtMatmulPreferenceSetAttribute(alignment D)");

  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  check(api.algoGetHeuristic(plan->handle, plan->desc, plan->a, plan->b, plan->d, plan->d, pref, 1, &result, &found),
        ("cublasLtMatmulAlgoGetHeuristic for " + describe(g, wsBytes)).c_str());
  if (found < 1 || result.state != CUBLAS_STATUS_SUCCESS)
    throw Error(Error::Kind::Cuda, what + ": cuBLASLt has no algorithm for " + describe(g, wsBytes));
  plan->algo = result.algo;
  return plan;
}

const Plan& planFor(const Gemm& g, int64_t wsBytes, const char* what) {
  const CUcontext ctx = driver::ensureContext();
  const Key key = keyOf(ctx, g, wsBytes);
  // Per thread: a plan's descriptor takes each call's bias pointer, so threads must not share one.
  thread_local std::unordered_map<Key, std::unique_ptr<Plan>, KeyHash> plans;
  auto it = plans.find(key);
  if (it == plans.end()) it = plans.emplace(key, makePlan(g, ctx, wsBytes, what)).first;
  return *it->second;
}

}  // namespace

void gemm(const Gemm& g, void* workspace, int64_t wsBytes, void* stream, const char* what) {
  if (!workspace) wsBytes = 0;
  const Plan& p = planFor(g, wsBytes, what);
  const cublaslt::Api& api = cublaslt::api();
  // Messages are built only on failure: a decode step's GEMMs allocate nothing.
  auto check = [&](cublasStatus_t s, const char* call) {
    if (s != CUBLAS_STATUS_SUCCESS) cublaslt::check(s, (std::string(what) + ": " + call).c_str());
  };
  if (g.bias) {
    const void* bias = g.bias;
    check(api.matmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias),
          "cublasLtMatmulDescSetAttribute(BIAS_POINTER)");
  }
  const float one = 1.0f, zero = 0.0f;  // host scalars (the default pointer mode), fp32 as the scale type
  check(api.matmul(p.handle, p.desc, &one, g.a.data, p.a, g.b.data, p.b, &zero, g.d.data, p.d,
                   const_cast<void*>(g.d.data), p.d, &p.algo, wsBytes ? workspace : nullptr,
                   static_cast<size_t>(wsBytes), static_cast<cudaStream_t>(stream)),
        "cublasLtMatmul");
}

}  // namespace ssmjit::detail
