// linear and linear_backward: the arguments are checked once, here at the edge (LinearCheck), and
// each product is one cuBLASLt matmul (Gemm.h), stated in column-major terms:
//   y = x W^T:      y^T (N, M) = W (N, K) x^T (K, M)      A = W's bytes (K, N) transposed, B = x's (K, M)
//   dx = dy W:      dx^T (K, M) = W^T (K, N) dy^T (N, M)  A = W's bytes (K, N), B = dy's (N, M)
//   dW = dy^T x:    dW^T (K, N) = x^T (K, M) dy (M, N)    A = x's bytes (K, M), B = dy's (N, M) transposed
//   dbias = 1^T dy: dbias (N, 1) = dy^T (N, M) 1 (M, 1)   A = dy's bytes (N, M), B = a column of ones
// The bias epilogue adds a vector of D's row count (N) to every column: bias[n] to y[m, n].
#include <cuda.h>

#include <algorithm>
#include <cstdint>
#include <utility>

#include "runtime/Driver.h"
#include "runtime/ops/ArgCheck.h"
#include "runtime/ops/Gemm.h"
#include "runtime/ops/LinearCheck.h"
#include "ssmjit/ops.h"

namespace ssmjit {
namespace {

using detail::columnMajor;
using detail::Gemm;
using detail::GemmMatrix;

// The workspace's first bytes, up to the GEMMs' share: (pointer, bytes), or none.
std::pair<void*, int64_t> gemmWorkspace(const TensorView& ws, int64_t floats) {
  if (!ws.defined()) return {nullptr, 0};
  return {ws.data, std::min(floats * 4, detail::kGemmWorkspaceBytes)};
}

// The bytes of one in dtype t, as a 16-bit or 32-bit fill pattern.
unsigned onePattern(DType t) { return t == DType::F32 ? 0x3F800000u : t == DType::F16 ? 0x3C00u : 0x3F80u; }

// The column of M ones dbias's product reads, after the GEMMs' share of the workspace.
int64_t onesOffsetFloats() { return detail::kGemmWorkspaceBytes / 4; }
int64_t onesFloats(int64_t M, DType t) { return (M * dtypeBytes(t) + 3) / 4; }

// Zeros over a (rows, cols) or (cols,) view with unit inner stride, a memset a row.
void zeroRows(const TensorView& t, Stream stream) {
  if (!t.defined()) return;
  const int64_t rows = t.ndim == 2 ? t.shape[0] : 1, stride = t.ndim == 2 ? t.strides[0] : 0;
  const size_t rowBytes = static_cast<size_t>(t.shape[t.ndim - 1] * dtypeBytes(t.dtype));
  for (int64_t r = 0; r < rows; ++r) {
    const auto at = reinterpret_cast<CUdeviceptr>(static_cast<char*>(t.data) + r * stride * dtypeBytes(t.dtype));
    driver::check(driver::api().cuMemsetD8Async(at, 0, rowBytes, static_cast<CUstream>(stream)),
                  "linear_backward: cuMemsetD8Async");
  }
}

}  // namespace

int64_t linear_workspace_size(const LinearArgs& a) {
  detail::checkLinearArgs(a, DeviceKind::CUDA, "linear_workspace_size");
  return detail::kGemmWorkspaceBytes / 4;
}

void linear(const LinearArgs& a, Stream stream) {
  const detail::LinearDims d = detail::checkLinearArgs(a, DeviceKind::CUDA, "linear");
  detail::checkLinearWorkspace(a, "linear");
  if (d.M == 0 || d.N == 0) return;
  Gemm g;
  g.a = columnMajor(a.weight);  // (K, N)
  g.transA = true;
  g.b = columnMajor(a.x);  // (K, M)
  g.d = columnMajor(a.y);  // (N, M)
  g.bias = a.bias.defined() ? a.bias.data : nullptr;
  const auto [ws, bytes] = gemmWorkspace(a.workspace, a.workspace.defined() ? a.workspace.numel() : 0);
  detail::gemm(g, ws, bytes, stream, "linear");
}

int64_t linear_backward_workspace_size(const LinearBackwardArgs& a) {
  const detail::LinearDims d = detail::checkLinearBackwardArgs(a, DeviceKind::CUDA, "linear_backward_workspace_size");
  return onesOffsetFloats() + (a.dbias.defined() ? onesFloats(d.M, a.dy.dtype) : 0);
}

void linear_backward(const LinearBackwardArgs& a, Stream stream) {
  constexpr const char* kOp = "linear_backward";
  const detail::LinearDims d = detail::checkLinearBackwardArgs(a, DeviceKind::CUDA, kOp);
  detail::checkWorkspace(kOp, a.workspace, a.x, "x", linear_backward_workspace_size(a),
                         "linear_backward_workspace_size");
  detail::checkGemmWorkspaceAlignment(a.workspace, kOp);
  if (d.N == 0 || d.K == 0) return;
  const auto [ws, bytes] = gemmWorkspace(a.workspace, onesOffsetFloats());
  const driver::Api& api = driver::api();
  if (d.M == 0) {  // sums over no rows: zeros
    zeroRows(a.dweight, stream);
    zeroRows(a.dbias, stream);
    return;
  }
  if (a.dx.defined()) {
    Gemm g;
    g.a = columnMajor(a.weight);  // (K, N)
    g.b = columnMajor(a.dy);      // (N, M)
    g.d = columnMajor(a.dx);      // (K, M)
    detail::gemm(g, ws, bytes, stream, kOp);
  }
  if (a.dweight.defined()) {
    Gemm g;
    g.a = columnMajor(a.x);   // (K, M)
    g.b = columnMajor(a.dy);  // (N, M), transposed
    g.transB = true;
    g.d = columnMajor(a.dweight);  // (K, N)
    detail::gemm(g, ws, bytes, stream, kOp);
  }
  if (a.dbias.defined()) {
    char* ones = static_cast<char*>(a.workspace.data) + onesOffsetFloats() * 4;
    const auto at = reinterpret_cast<CUdeviceptr>(ones);
    const auto cs = static_cast<CUstream>(stream);
    if (a.dy.dtype == DType::F32)
      driver::check(api.cuMemsetD32Async(at, onePattern(a.dy.dtype), static_cast<size_t>(d.M), cs),
                    "linear_backward: cuMemsetD32Async");
    else
      driver::check(
          api.cuMemsetD16Async(at, static_cast<unsigned short>(onePattern(a.dy.dtype)), static_cast<size_t>(d.M), cs),
          "linear_backward: cuMemsetD16Async");
    Gemm g;
    g.a = columnMajor(a.dy);  // (N, M)
    g.b = GemmMatrix{ones, a.dy.dtype, d.M, 1, d.M};
    g.d = GemmMatrix{a.dbias.data, a.dbias.dtype, d.N, 1, d.N};
    detail::gemm(g, ws, bytes, stream, kOp);
  }
}

}  // namespace ssmjit
