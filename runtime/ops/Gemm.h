// One cuBLASLt matmul in column-major terms, the engine behind linear and linear_backward: each
// thread keeps, per call shape, the descriptors and the algorithm the heuristic chose, so a repeated
// call costs a hash lookup and one cublasLtMatmul (nothing allocated or synchronised: capturable).
// Internal to the runtime.
//
// Row-major to column-major: cuBLASLt's matrices are column-major, and a row-major (R, C) matrix
// with row stride ld is, to cuBLASLt, the column-major (C, R) matrix with leading dimension ld (its
// transpose, in the same bytes). Each op states its product in those terms.
#pragma once
#include <cstdint>

#include "ssmjit/tensor.h"

namespace ssmjit::detail {

// A column-major matrix as stored: rows x cols with leading dimension ld (>= rows).
struct GemmMatrix {
  const void* data = nullptr;
  DType dtype = DType::F32;
  int64_t rows = 0, cols = 0, ld = 0;
};

// D = op(A) op(B) (+ bias[i] on every column of row i of D), fp32 accumulation (no TF32), with
// split-K partial sums in fp32 only. With a bias no workspace is used (cuBLASLt's split-K kernels
// with a bias epilogue are wrong for some shapes).
struct Gemm {
  GemmMatrix a, b, d;
  bool transA = false, transB = false;
  const void* bias = nullptr;  // D's dtype, D's rows, 16-byte aligned
};

// `what` names the op in errors; workspace may be null (then wsBytes 0), else 256-byte aligned.
void gemm(const Gemm& g, void* workspace, int64_t wsBytes, void* stream, const char* what);

// The largest workspace the heuristic is offered: cuBLAS's own default on Hopper.
constexpr int64_t kGemmWorkspaceBytes = int64_t{32} << 20;

// A row-major (R, C) matrix's leading dimension: its row stride, or C for a single row (whose
// stride is never stepped; cuBLASLt wants ld >= the column-major row count).
inline int64_t leadingOf(const TensorView& t) { return t.shape[0] > 1 ? t.strides[0] : t.shape[1]; }

// The row-major (R, C) view `t` as cuBLASLt sees it: column-major (C, R).
inline GemmMatrix columnMajor(const TensorView& t) { return {t.data, t.dtype, t.shape[1], t.shape[0], leadingOf(t)}; }

}  // namespace ssmjit::detail
