// gated_rms_norm_backward: the arguments are checked once, here at the edge (RmsNormCheck), then
// two kernels (kernels_dsl/norm/RmsNormBackward.h) run on the caller's stream: dx, dz and each
// program's partial sums of dweight into the workspace, then their sum in a fixed order.
#include <cuda.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels_dsl/norm/RmsNormBackward.h"
#include "runtime/ops/ArgCheck.h"
#include "runtime/ops/KernelCall.h"
#include "runtime/ops/RmsNormCheck.h"
#include "runtime/ops/RmsNormSpec.h"
#include "ssmjit/ops.h"

namespace ssmjit {
namespace {

using detail::KernelCall;
using kernels::kRmsNormBwd;
using kernels::kRmsNormBwdReduce;

constexpr const char* kOp = "gated_rms_norm_backward";

// Programs along the rows, per group: about 512 in all, enough to fill the GPU with the row tiles'
// loads in flight, and few enough that dweight's partial sums stay a small pass.
int64_t rowPrograms(const detail::NormDims& d) {
  return std::min<int64_t>(d.T, std::max<int64_t>(1, 512 / d.groups()));
}

// The workspace: one row of dweight's partial sums a program.
int64_t workspaceFloats(const detail::NormDims& d) { return rowPrograms(d) * d.D; }

// The partial sums' rows in the workspace; without one (a specialisation's fake call), at a
// 256-byte-aligned stand-in address, which only binds its alignment class.
TensorView partials(const GatedRmsNormBackwardArgs& a, const detail::NormDims& d, int64_t programs) {
  void* data = a.workspace.defined() ? a.workspace.data : reinterpret_cast<void*>(uintptr_t{1} << 47);
  const TensorView& x = a.forward.x;
  return TensorView::contiguous(data, DType::F32, {programs, d.D}, x.device, x.deviceId);
}

void bindMain(KernelCall& c, const GatedRmsNormBackwardArgs& a, const detail::NormDims& d, const TensorView& ws,
              int64_t programs) {
  constexpr const dsl::Signature& S = kRmsNormBwd;
  const GatedRmsNormArgs& f = a.forward;
  c.tensor(S.tensor("x"), f.x);
  c.tensor(S.tensor("z"), f.z);
  c.tensor(S.tensor("weight"), f.weight);
  c.tensor(S.tensor("dout"), a.dout);
  c.tensor(S.tensor("dx"), a.dx);
  c.tensor(S.tensor("dz"), a.dz);
  c.tensor(S.tensor("ws"), ws);
  c.size(S.size("T"), d.T);
  c.size(S.size("group_size"), d.groupSize);
  c.size(S.size("row_programs"), programs);
  c.scalar(S.scalar("eps"), f.eps);
  c.flag(S.flag("has_z"), f.z.defined());
  c.flag(S.flag("norm_before_gate"), f.norm_before_gate);
  c.meta("meta:index_bits", detail::fits32({&f.x, &f.z, &f.weight, &a.dout, &a.dx, &a.dz, &ws}) ? 32 : 64);
}

void bindReduce(KernelCall& c, const GatedRmsNormBackwardArgs& a, const detail::NormDims& d, const TensorView& ws,
                int64_t programs) {
  constexpr const dsl::Signature& S = kRmsNormBwdReduce;
  c.tensor(S.tensor("ws"), ws);
  c.tensor(S.tensor("dweight"), a.dweight);
  c.size(S.size("D"), d.D);
  c.size(S.size("partials"), programs);
}

detail::NormDims check(const GatedRmsNormBackwardArgs& a, DeviceKind device) {
  return detail::checkGatedRmsNormBackwardArgs(a, device, kOp);
}

}  // namespace

int64_t gated_rms_norm_backward_workspace_size(const GatedRmsNormBackwardArgs& a) {
  return workspaceFloats(check(a, DeviceKind::CUDA));
}

void gated_rms_norm_backward(const GatedRmsNormBackwardArgs& a, Stream stream) {
  const detail::NormDims d = check(a, DeviceKind::CUDA);
  detail::checkWorkspace(kOp, a.workspace, a.forward.x, "forward.x", workspaceFloats(d),
                         "gated_rms_norm_backward_workspace_size");
  if (d.T == 0 || d.D == 0) return;
  KernelCall main(kRmsNormBwd);
  const TensorView ws = partials(a, d, rowPrograms(d));
  bindMain(main, a, d, ws, rowPrograms(d));
  // No more programs than row tiles: every program has rows, and the sum reads only their rows.
  const int64_t bt = main.metaValue("meta:BLOCK_T");
  const int64_t programs = std::min(rowPrograms(d), (d.T + bt - 1) / bt);
  main.value(kRmsNormBwd.size("row_programs")).i64 = programs;
  const unsigned grid[3] = {static_cast<unsigned>(programs), static_cast<unsigned>(d.groups()), 1};
  main.launch(grid, static_cast<CUstream>(stream));
  KernelCall reduce(kRmsNormBwdReduce);
  bindReduce(reduce, a, d, ws, programs);
  const int64_t bd = reduce.metaValue("meta:BLOCK_D");
  const unsigned rgrid[3] = {static_cast<unsigned>((d.D + bd - 1) / bd), 1, 1};
  reduce.launch(rgrid, static_cast<CUstream>(stream));
}

std::vector<Specialization> detail::gatedRmsNormBackwardSpecializations(const GatedRmsNormBackwardArgs& a,
                                                                        const std::string& arch) {
  const NormDims d = checkGatedRmsNormBackwardArgs(a, a.forward.x.device, kOp);
  const TensorView ws = partials(a, d, rowPrograms(d));
  KernelCall main(kRmsNormBwd), reduce(kRmsNormBwdReduce);
  bindMain(main, a, d, ws, rowPrograms(d));
  bindReduce(reduce, a, d, ws, rowPrograms(d));
  return {main.specialization(arch), reduce.specialization(arch)};
}

}  // namespace ssmjit
