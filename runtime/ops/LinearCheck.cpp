// The argument checks of linear (see LinearCheck.h and the contract in ssmjit/ops.h).
// Shapes, dtypes, devices, strides and alignment only: no tensor data is read.
#include "runtime/ops/LinearCheck.h"

#include <string>
#include <utility>

#include "runtime/ops/ArgCheck.h"
#include "ssmjit/error.h"

namespace ssmjit::detail {
namespace {

std::string str(int64_t v) { return std::to_string(v); }

// A matrix operand of cuBLASLt: its inner (last) stride 1, and its row stride at least the row's
// length when it has more than one row (cuBLASLt's leading dimension; rows may not overlap).
void checkRows(const Checker& c, const char* name, const TensorView& t, const char* rowLength) {
  if (t.shape[1] > 1 && t.strides[1] != 1)
    c.fail(std::string(name) + " has strides " + listString(t.strides, 2) + " for shape " + t.shapeString() +
           ", expected a unit inner stride (dim 1 contiguous)");
  if (t.shape[0] > 1 && t.strides[0] < t.shape[1])
    c.fail(std::string(name) + " has row stride " + str(t.strides[0]) + " for shape " + t.shapeString() +
           ", expected a row stride >= " + rowLength + " = " + str(t.shape[1]));
}

// The bytes [first, last) a view reaches (strides >= 0, as checked).
struct Bytes {
  uintptr_t first, last;
};
Bytes bytesOf(const TensorView& t) {
  const auto p = reinterpret_cast<uintptr_t>(t.data);
  return {p, p + static_cast<uintptr_t>(t.span() * dtypeBytes(t.dtype))};
}

void checkNoOverlap(const Checker& c, const char* outName, const TensorView& y, const char* inName,
                    const TensorView& in, const char* why = " is read while ") {
  if (!y.defined() || !in.defined() || y.numel() == 0 || in.numel() == 0) return;
  const Bytes a = bytesOf(y), b = bytesOf(in);
  if (a.first < b.last && b.first < a.last)
    c.fail(std::string(outName) + " (data " + hexPtr(y.data) + ", shape " + y.shapeString() + ") overlaps " + inName +
           " (data " + hexPtr(in.data) + ", shape " + in.shapeString() + "), expected separate memory (" + inName +
           why + outName + " is written)");
}

// x (M, K) and weight (N, K), as linear and its backward take them.
LinearDims checkInputs(Checker& c, const TensorView& x, const TensorView& weight) {
  LinearDims d;
  Dim eX[2] = {{-1, "rows"}, {-1, "in_features"}};
  c.lead("x", x, eX, 2);
  d.M = x.shape[0];
  d.K = x.shape[1];
  eX[0].size = d.M;
  eX[1].size = d.K;
  c.tensor("x", x, eX, 2, kFloat16Or32, false);
  if (d.K < 1) c.fail("x has shape " + x.shapeString() + ", expected at least 1 column (in_features K)");
  checkRows(c, "x", x, "in_features K");

  c.required("weight", weight);
  Dim eW[2] = {{-1, "out_features"}, {d.K, "in_features"}};
  c.rank("weight", weight, eW, 2);
  d.N = weight.shape[0];
  eW[0].size = d.N;
  c.setForm(" (weight is (out_features, in_features) as nn.Linear stores it; in_features from x)");
  c.tensor("weight", weight, eW, 2, kFloat16Or32, false);
  c.setForm("");
  if (weight.dtype != x.dtype)
    c.fail("weight has dtype " + std::string(dtypeName(weight.dtype)) + ", expected x's dtype " + dtypeName(x.dtype));
  checkRows(c, "weight", weight, "in_features K");
  return d;
}

}  // namespace

LinearDims checkLinearArgs(const LinearArgs& a, DeviceKind device, const char* op) {
  Checker c(op, device);
  const LinearDims d = checkInputs(c, a.x, a.weight);

  c.required("y", a.y);
  const Dim eY[2] = {{d.M, "rows"}, {d.N, "out_features"}};
  c.tensor("y", a.y, eY, 2, kF32Only | dtypeBit(a.x.dtype), false);
  checkRows(c, "y", a.y, "out_features N");

  const Dim eB[1] = {{d.N, "out_features"}};
  c.optional("bias", a.bias, eB, 1, kFloat16Or32, false);
  if (a.bias.defined() && a.bias.dtype != a.y.dtype)
    c.fail("bias has dtype " + std::string(dtypeName(a.bias.dtype)) + ", expected y's dtype " + dtypeName(a.y.dtype));
  if (a.bias.defined() && d.N > 1 && a.bias.strides[0] != 1)
    c.fail("bias has stride " + str(a.bias.strides[0]) + ", expected a contiguous vector (stride 1)");
  if (a.bias.defined() && reinterpret_cast<uintptr_t>(a.bias.data) % 16 != 0)
    c.fail("bias has data pointer " + hexPtr(a.bias.data) +
           ", expected a multiple of 16 bytes (cuBLASLt's bias epilogue)");

  checkNoOverlap(c, "y", a.y, "x", a.x);
  checkNoOverlap(c, "y", a.y, "weight", a.weight);
  checkNoOverlap(c, "y", a.y, "bias", a.bias);
  return d;
}

void checkLinearWorkspace(const LinearArgs& a, const char* op) {
  if (!a.workspace.defined()) return;
  checkWorkspace(op, a.workspace, a.x, "x", 0, "linear_workspace_size(args) for every algorithm");
  checkGemmWorkspaceAlignment(a.workspace, op);
}

void checkGemmWorkspaceAlignment(const TensorView& workspace, const char* op) {
  if (workspace.defined() && reinterpret_cast<uintptr_t>(workspace.data) % 256 != 0)
    Checker(op, DeviceKind::CUDA)
        .fail("workspace has data pointer " + hexPtr(workspace.data) +
              ", expected a multiple of 256 bytes (cuBLASLt's workspace alignment)");
}

LinearDims checkLinearBackwardArgs(const LinearBackwardArgs& a, DeviceKind device, const char* op) {
  Checker c(op, device);
  const LinearDims d = checkInputs(c, a.x, a.weight);
  c.required("dy", a.dy);
  const Dim eY[2] = {{d.M, "rows"}, {d.N, "out_features"}};
  c.tensor("dy", a.dy, eY, 2, dtypeBit(a.x.dtype), false);
  checkRows(c, "dy", a.dy, "out_features N");
  if (!a.dx.defined() && !a.dweight.defined() && !a.dbias.defined())
    c.fail("dx, dweight and dbias are all absent, expected at least one gradient to compute");
  const Dim eX[2] = {{d.M, "rows"}, {d.K, "in_features"}};
  c.optional("dx", a.dx, eX, 2, kF32Only | dtypeBit(a.x.dtype), false);
  if (a.dx.defined()) checkRows(c, "dx", a.dx, "in_features K");
  const Dim eW[2] = {{d.N, "out_features"}, {d.K, "in_features"}};
  c.optional("dweight", a.dweight, eW, 2, kF32Only | dtypeBit(a.weight.dtype), false);
  if (a.dweight.defined()) checkRows(c, "dweight", a.dweight, "in_features K");
  const Dim eB[1] = {{d.N, "out_features"}};
  c.optional("dbias", a.dbias, eB, 1, kF32Only | dtypeBit(a.dy.dtype), false);
  if (a.dbias.defined() && d.N > 1 && a.dbias.strides[0] != 1)
    c.fail("dbias has stride " + str(a.dbias.strides[0]) + ", expected a contiguous vector (stride 1)");
  const std::pair<const char*, const TensorView*> outs[] = {
      {"dx", &a.dx}, {"dweight", &a.dweight}, {"dbias", &a.dbias}};
  for (const auto& [name, t] : outs) {
    checkNoOverlap(c, name, *t, "x", a.x);
    checkNoOverlap(c, name, *t, "weight", a.weight);
    checkNoOverlap(c, name, *t, "dy", a.dy);
  }
  checkNoOverlap(c, "dweight", a.dweight, "dx", a.dx, " is written while ");
  checkNoOverlap(c, "dbias", a.dbias, "dx", a.dx, " is written while ");
  checkNoOverlap(c, "dbias", a.dbias, "dweight", a.dweight, " is written while ");
  return d;
}

}  // namespace ssmjit::detail
