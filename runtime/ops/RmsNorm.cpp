// rms_norm and gated_rms_norm: the arguments are checked once, here at the edge (RmsNormCheck),
// then both ops launch the one RMSNorm kernel (kernels_dsl/norm/RmsNorm.h) on the caller's stream:
// rms_norm as a single group with the residual add, gated_rms_norm with groups and the gate.
#include <cuda.h>

#include <string>

#include "kernels_dsl/norm/RmsNorm.h"
#include "runtime/ops/KernelCall.h"
#include "runtime/ops/RmsNormCheck.h"
#include "runtime/ops/RmsNormSpec.h"
#include "ssmjit/ops.h"

namespace ssmjit {
namespace {

using detail::KernelCall;
using kernels::kRmsNorm;

// The kernel's tensors and options, whichever op called.
struct NormLaunch {
  TensorView x, residual, residualOut, z, weight, out;
  float eps = 0;
  bool normBeforeGate = false;
};

// The same tensor (the check allows in place only as exactly the same view).
bool same(const TensorView& a, const TensorView& b) { return a.defined() && a.data == b.data; }

NormLaunch launchOf(const RmsNormArgs& a) { return {a.x, a.residual, a.residual_out, {}, a.weight, a.out, a.eps}; }
NormLaunch launchOf(const GatedRmsNormArgs& a) {
  return {a.x, {}, {}, a.z, a.weight, a.out, a.eps, a.norm_before_gate};
}

void bind(KernelCall& c, const NormLaunch& n, const detail::NormDims& d) {
  constexpr const dsl::Signature& S = kRmsNorm;
  c.tensor(S.tensor("x"), n.x);
  c.tensor(S.tensor("residual"), n.residual);
  // In place, an output is written through its input's pointer (RmsNorm.h): its own is absent.
  const bool outIsX = same(n.out, n.x), resOutIsRes = same(n.residualOut, n.residual);
  c.tensor(S.tensor("residual_out"), resOutIsRes ? TensorView{} : n.residualOut);
  c.tensor(S.tensor("z"), n.z);
  c.tensor(S.tensor("weight"), n.weight);
  c.tensor(S.tensor("out"), outIsX ? TensorView{} : n.out);
  c.size(S.size("T"), d.T);
  c.size(S.size("group_size"), d.groupSize);
  c.scalar(S.scalar("eps"), n.eps);
  c.flag(S.flag("has_residual"), n.residual.defined());
  c.flag(S.flag("has_residual_out"), n.residualOut.defined());
  c.flag(S.flag("has_z"), n.z.defined());
  c.flag(S.flag("norm_before_gate"), n.normBeforeGate);
  c.flag(S.flag("out_is_x"), outIsX);
  c.flag(S.flag("residual_out_is_residual"), resOutIsRes);
  c.meta("meta:index_bits", detail::fits32({&n.x, &n.residual, &n.residualOut, &n.z, &n.weight, &n.out}) ? 32 : 64);
}

void launch(const NormLaunch& n, const detail::NormDims& d, Stream stream) {
  if (d.T == 0 || d.D == 0) return;
  KernelCall c(kRmsNorm);
  bind(c, n, d);
  const int64_t bt = c.metaValue("meta:BLOCK_T");
  const unsigned grid[3] = {static_cast<unsigned>((d.T + bt - 1) / bt), static_cast<unsigned>(d.groups()), 1};
  c.launch(grid, static_cast<CUstream>(stream));
}

Specialization specialization(const NormLaunch& n, const detail::NormDims& d, const std::string& arch) {
  KernelCall c(kRmsNorm);
  bind(c, n, d);
  return c.specialization(arch);
}

}  // namespace

void rms_norm(const RmsNormArgs& a, Stream stream) {
  launch(launchOf(a), detail::checkRmsNormArgs(a, DeviceKind::CUDA, "rms_norm"), stream);
}

void gated_rms_norm(const GatedRmsNormArgs& a, Stream stream) {
  launch(launchOf(a), detail::checkGatedRmsNormArgs(a, DeviceKind::CUDA, "gated_rms_norm"), stream);
}

Specialization detail::rmsNormSpecialization(const RmsNormArgs& a, const std::string& arch) {
  return specialization(launchOf(a), checkRmsNormArgs(a, a.x.device, "rms_norm"), arch);
}

Specialization detail::gatedRmsNormSpecialization(const GatedRmsNormArgs& a, const std::string& arch) {
  return specialization(launchOf(a), checkGatedRmsNormArgs(a, a.x.device, "gated_rms_norm"), arch);
}

}  // namespace ssmjit
