// causal_conv1d and causal_conv1d_update: the arguments are checked once, here at the edge
// (CausalConv1dCheck), then mapped onto the generic kernels' layouts (kernels_dsl/conv/CausalConv1d.h),
// specialised and launched on the caller's stream. The forward is one launch (which also checks
// cu_seqlens), plus a small per-sequence launch after it when final states or initial slot indices
// are given (it checks the slots and writes the final states: after the forward, whose reads of
// the initial states it may overwrite in place).
#include <cuda.h>

#include <algorithm>
#include <string>
#include <vector>

#include "kernels_dsl/Dsl.h"
#include "kernels_dsl/conv/CausalConv1d.h"
#include "runtime/DeviceStatus.h"
#include "runtime/ops/BackwardStandIn.h"
#include "runtime/ops/CausalConv1dCheck.h"
#include "runtime/ops/CausalConv1dSpec.h"
#include "runtime/ops/CompileAhead.h"
#include "runtime/ops/ConvBinding.h"
#include "runtime/ops/KernelCall.h"
#include "runtime/ops/SequenceBinding.h"
#include "ssmjit/error.h"
#include "ssmjit/ops.h"

namespace ssmjit {
namespace {

using detail::fits32;
using detail::KernelCall;
using kernels::kConvFinalState;
using kernels::kConvFwd;
using kernels::kConvUpdate;
constexpr auto u = detail::gridDim;
bool wideOffsets(const CausalConv1dArgs& a) {
  return !fits32({&a.x, &a.out, &a.weight, &a.bias, &a.initial_states, &a.final_states, &a.seq_pos});
}
// The per-sequence launch runs when there is something to write or slots to check (the forward
// checks cu_seqlens itself).
bool needsFinalStateLaunch(const CausalConv1dArgs& a) {
  return a.final_states.defined() || a.initial_state_indices.defined();
}

void bindForward(KernelCall& c, const CausalConv1dArgs& a, const detail::ConvDims& d, void* err) {
  detail::bindConvInputs<kConvFwd>(c, a, d, err);
  c.tensor(kConvFwd.tensor("out"), a.out, detail::convRows(d));
  c.meta("meta:index_bits", wideOffsets(a) ? 64 : 32);
}

void bindFinalState(KernelCall& c, const CausalConv1dArgs& a, const detail::ConvDims& d, void* err) {
  constexpr const dsl::Signature& S = kConvFinalState;
  const TensorView &is = a.initial_states, &fs = a.final_states;
  c.tensor(S.tensor("x"), a.x, detail::convRows(d));
  c.tensor(S.tensor("init"), is);
  c.tensor(S.tensor("final"), fs);
  detail::bindConvSequences<S>(c, a, d, d.finalSlots, err);
  c.flag(S.flag("has_init"), is.defined());
  c.flag(S.flag("has_final"), fs.defined());
  c.meta("meta:width", d.W);
  c.meta("meta:index_bits", wideOffsets(a) ? 64 : 32);
}

}  // namespace

void causal_conv1d(const CausalConv1dArgs& a, Stream stream) {
  const detail::ConvDims d = detail::checkConv1dArgs(a, DeviceKind::CUDA, "causal_conv1d");
  if (d.batch == 0 || d.L == 0 || d.D == 0) return;
  const CUstream s = static_cast<CUstream>(stream);
  void* err = deviceStatusRecord();
  const detail::CompileAhead ahead([&](const std::string& arch) { return detail::convSpecializations(a, arch); },
                                   [&](const std::string& arch) { return detail::backwardAlongside(a, arch); });
  {
    KernelCall c(kConvFwd);
    bindForward(c, a, d, err);
    const int64_t bd = c.metaValue("meta:BLOCK_D"), chunk = c.metaValue("meta:BLOCK_T") * c.metaValue("meta:tiles");
    if ((d.L + chunk - 1) / chunk > 65535)  // grid y: one program per chunk of the row
      throw Error(Error::Kind::InvalidArgument, "causal_conv1d: x has " + std::to_string(d.L) +
                                                    " tokens a row, expected at most " + std::to_string(65535 * chunk) +
                                                    " (65535 chunks of " + std::to_string(chunk) + ")");
    const unsigned grid[3] = {u((d.D + bd - 1) / bd), u((d.L + chunk - 1) / chunk), u(d.batch)};
    c.launch(grid, s);
  }
  if (!needsFinalStateLaunch(a)) return;
  KernelCall c(kConvFinalState);
  bindFinalState(c, a, d, err);
  const int64_t bd = c.metaValue("meta:BLOCK_D");
  const unsigned grid[3] = {u((d.D + bd - 1) / bd), u(d.nseq), 1};
  c.launch(grid, s);
}

namespace {
void bindUpdate(KernelCall& c, const CausalConv1dUpdateArgs& a, const detail::ConvUpdateDims& d, void* err) {
  constexpr const dsl::Signature& S = kConvUpdate;
  // One token: the time stride is never stepped, 0 binds it out of the code.
  const detail::Axes rows{0, d.L > 1 ? 1 : detail::kNoAxis, 2};
  c.tensor(S.tensor("state"), a.conv_state);
  c.tensor(S.tensor("x"), a.x, rows);
  c.tensor(S.tensor("weight"), a.weight);
  c.tensor(S.tensor("bias"), a.bias);
  c.tensor(S.tensor("out"), a.out, rows);
  c.tensor(S.tensor("state_idx"), a.state_indices);
  c.pointer(S.tensor("err"), err, DType::I64);
  c.size(S.size("D"), d.D);
  c.size(S.size("L"), d.L);
  c.size(S.size("batch"), d.batch);
  c.size(S.size("nslots"), d.S);
  c.flag(S.flag("has_bias"), a.bias.defined());
  c.flag(S.flag("silu"), a.silu);
  c.flag(S.flag("has_state_idx"), a.state_indices.defined());
  c.flag(S.flag("commit"), a.commit);
  c.meta("meta:width", d.W);
  c.meta("meta:index_bits", fits32({&a.conv_state, &a.x, &a.out, &a.weight, &a.bias}) ? 32 : 64);
}
}  // namespace

void causal_conv1d_update(const CausalConv1dUpdateArgs& a, Stream stream) {
  const detail::ConvUpdateDims d = detail::checkConv1dUpdateArgs(a, DeviceKind::CUDA, "causal_conv1d_update");
  if (d.batch == 0 || d.D == 0) return;
  KernelCall c(kConvUpdate);
  bindUpdate(c, a, d, deviceStatusRecord());
  const int64_t bd = c.metaValue("meta:BLOCK_D");
  const unsigned grid[3] = {u((d.D + bd - 1) / bd), u(d.batch), 1};
  c.launch(grid, static_cast<CUstream>(stream));
}

std::vector<Specialization> detail::convSpecializations(const CausalConv1dArgs& a, const std::string& arch) {
  const ConvDims d = checkConv1dArgs(a, a.x.device, "causal_conv1d");
  std::vector<Specialization> out;
  KernelCall f(kConvFwd);
  bindForward(f, a, d, nullptr);
  out.push_back(f.specialization(arch));
  if (needsFinalStateLaunch(a)) {
    KernelCall c(kConvFinalState);
    bindFinalState(c, a, d, nullptr);
    out.push_back(c.specialization(arch));
  }
  return out;
}

Specialization detail::convUpdateSpecialization(const CausalConv1dUpdateArgs& a, const std::string& arch) {
  const ConvUpdateDims d = checkConv1dUpdateArgs(a, a.x.device, "causal_conv1d_update");
  KernelCall c(kConvUpdate);
  bindUpdate(c, a, d, nullptr);
  return c.specialization(arch);
}

}  // namespace ssmjit
