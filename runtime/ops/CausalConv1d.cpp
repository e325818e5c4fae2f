// causal_conv1d and causal_conv1d_update: the arguments are checked once, here at the edge
// (CausalConv1dCheck), then mapped onto the generic kernels' layouts (kernels_dsl/CausalConv1d.h),
// specialised and launched on the caller's stream. The forward is one launch (which also checks
// cu_seqlens), plus a small per-sequence launch after it when final states or initial slot indices
// are given (it checks the slots and writes the final states: after the forward, whose reads of
// the initial states it may overwrite in place).
#include <cuda.h>

#include <algorithm>
#include <string>
#include <vector>

#include "kernels_dsl/CausalConv1d.h"
#include "kernels_dsl/Dsl.h"
#include "runtime/DeviceStatus.h"
#include "runtime/ops/CausalConv1dCheck.h"
#include "runtime/ops/CausalConv1dSpec.h"
#include "runtime/ops/ConvBinding.h"
#include "runtime/ops/KernelCall.h"
#include "ssmjit/error.h"
#include "ssmjit/ops.h"

namespace ssmjit {
namespace {

using detail::ArgIndex;
using detail::KernelCall;
using detail::fits32;
using detail::strideOr0;
constexpr auto u = detail::gridDim;
bool wideOffsets(const CausalConv1dArgs& a) {
  return !fits32({&a.x, &a.out, &a.weight, &a.bias, &a.initial_states, &a.final_states, &a.seq_pos});
}
// The per-sequence launch runs when there is something to write or slots to check (the forward
// checks cu_seqlens itself).
bool needsFinalStateLaunch(const CausalConv1dArgs& a) {
  return a.final_states.defined() || a.initial_state_indices.defined();
}

const ArgSchema kFwdSchema{kernels::kConvFwdArgNames, kernels::kConvFwdNumArgs};
const ArgSchema kFinalSchema{kernels::kConvFinalStateArgNames, kernels::kConvFinalStateNumArgs};
const ArgSchema kUpdateSchema{kernels::kConvUpdateArgNames, kernels::kConvUpdateNumArgs};

void bindForward(KernelCall& c, const CausalConv1dArgs& a, const detail::ConvDims& d, void* err) {
  thread_local const ArgIndex A{kFwdSchema.names, kFwdSchema.count};
  detail::bindConvInputs(c, A, a, d, err);
  c.pointer(A("out"), a.out, DType::F32, true);
  detail::bindConvRows(c, A, a.out, d, "s_out_b", "s_out_t", "s_out_d");
  c.meta("meta:index_bits", wideOffsets(a) ? 64 : 32);
}

void bindFinalState(KernelCall& c, const CausalConv1dArgs& a, const detail::ConvDims& d, void* err) {
  thread_local const ArgIndex A{kFinalSchema.names, kFinalSchema.count};
  const TensorView &is = a.initial_states, &fs = a.final_states;
  c.pointer(A("x"), a.x, DType::F32, true);
  c.pointer(A("init"), is, DType::F32, true);
  c.pointer(A("final"), fs, DType::F32, true);
  c.pointer(A("cu"), a.cu_seqlens, DType::I32, false);
  c.pointer(A("init_idx"), a.initial_state_indices, DType::I32, false);
  c.pointer(A("final_idx"), a.final_state_indices, DType::I32, false);
  c.pointer(A("err"), err, DType::I64);
  c.size(A("D"), d.D, true);
  c.size(A("L"), d.L, false);
  c.count(A("nseq"), d.nseq);
  c.count(A("nslots_init"), d.initSlots);
  c.count(A("nslots_final"), d.finalSlots);
  detail::bindConvRows(c, A, a.x, d, "s_x_b", "s_x_t", "s_x_d");
  detail::bindStateStrides(c, A, is, "s_init_slot", "s_init_d", "s_init_k");
  detail::bindStateStrides(c, A, fs, "s_final_slot", "s_final_d", "s_final_k");
  c.stride(A("s_cu"), strideOr0(a.cu_seqlens, 0));
  c.stride(A("s_init_idx"), strideOr0(a.initial_state_indices, 0));
  c.stride(A("s_final_idx"), strideOr0(a.final_state_indices, 0));
  c.flag(A("has_cu"), d.packedCu);
  c.flag(A("has_init"), is.defined());
  c.flag(A("has_init_idx"), a.initial_state_indices.defined());
  c.flag(A("has_final"), fs.defined());
  c.flag(A("has_final_idx"), a.final_state_indices.defined());
  c.meta("meta:width", d.W);
  c.meta("meta:index_bits", wideOffsets(a) ? 64 : 32);
}

}  // namespace

void causal_conv1d(const CausalConv1dArgs& a, Stream stream) {
  const detail::ConvDims d = detail::checkConv1dArgs(a, DeviceKind::CUDA, "causal_conv1d");
  if (d.batch == 0 || d.L == 0 || d.D == 0) return;
  const CUstream s = static_cast<CUstream>(stream);
  void* err = deviceStatusRecord();
  {
    KernelCall c(kernels::kConvFwdKernel, kFwdSchema);
    bindForward(c, a, d, err);
    const int64_t bd = c.metaValue("meta:BLOCK_D"), chunk = c.metaValue("meta:BLOCK_T") * c.metaValue("meta:tiles");
    if ((d.L + chunk - 1) / chunk > 65535)  // grid y: one program per chunk of the row
      throw Error(Error::Kind::InvalidArgument,
                  "causal_conv1d: x has " + std::to_string(d.L) + " tokens a row, expected at most " +
                      std::to_string(65535 * chunk) + " (65535 chunks of " + std::to_string(chunk) + ")");
    const unsigned grid[3] = {u((d.D + bd - 1) / bd), u((d.L + chunk - 1) / chunk), u(d.batch)};
    c.launch(grid, s);
  }
  if (!needsFinalStateLaunch(a)) return;
  KernelCall c(kernels::kConvFinalStateKernel, kFinalSchema);
  bindFinalState(c, a, d, err);
  const int64_t bd = c.metaValue("meta:BLOCK_D");
  const unsigned grid[3] = {u((d.D + bd - 1) / bd), u(d.nseq), 1};
  c.launch(grid, s);
}

namespace {
void bindUpdate(KernelCall& c, const CausalConv1dUpdateArgs& a, const detail::ConvUpdateDims& d, void* err) {
  thread_local const ArgIndex A{kUpdateSchema.names, kUpdateSchema.count};
  c.pointer(A("state"), a.conv_state, DType::F32, true);
  c.pointer(A("x"), a.x, DType::F32, true);
  c.pointer(A("weight"), a.weight, DType::F32, true);
  c.pointer(A("bias"), a.bias, DType::F32, true);
  c.pointer(A("out"), a.out, DType::F32, true);
  c.pointer(A("state_idx"), a.state_indices, DType::I32, false);
  c.pointer(A("err"), err, DType::I64);
  c.size(A("D"), d.D, true);
  c.size(A("L"), d.L, true);
  c.count(A("batch"), d.batch);
  c.count(A("nslots"), d.S);
  const TensorView& st = a.conv_state;
  c.stride(A("s_state_slot"), st.strides[0]);
  c.stride(A("s_state_d"), st.strides[1]);
  c.stride(A("s_state_k"), st.strides[2]);
  c.stride(A("s_x_b"), a.x.strides[0]);
  c.stride(A("s_x_t"), d.L > 1 ? a.x.strides[1] : 0);
  c.stride(A("s_x_d"), a.x.strides[2]);
  c.stride(A("s_w_d"), a.weight.strides[0]);
  c.stride(A("s_w_k"), a.weight.strides[1]);
  c.stride(A("s_bias_d"), strideOr0(a.bias, 0));
  c.stride(A("s_out_b"), a.out.strides[0]);
  c.stride(A("s_out_t"), d.L > 1 ? a.out.strides[1] : 0);
  c.stride(A("s_out_d"), a.out.strides[2]);
  c.stride(A("s_idx_b"), strideOr0(a.state_indices, 0));
  c.flag(A("has_bias"), a.bias.defined());
  c.flag(A("silu"), a.silu);
  c.flag(A("has_state_idx"), a.state_indices.defined());
  c.flag(A("commit"), a.commit);
  c.meta("meta:width", d.W);
  c.meta("meta:index_bits", fits32({&a.conv_state, &a.x, &a.out, &a.weight, &a.bias}) ? 32 : 64);
}
}  // namespace

void causal_conv1d_update(const CausalConv1dUpdateArgs& a, Stream stream) {
  const detail::ConvUpdateDims d = detail::checkConv1dUpdateArgs(a, DeviceKind::CUDA, "causal_conv1d_update");
  if (d.batch == 0 || d.D == 0) return;
  KernelCall c(kernels::kConvUpdateKernel, kUpdateSchema);
  bindUpdate(c, a, d, deviceStatusRecord());
  const int64_t bd = c.metaValue("meta:BLOCK_D");
  const unsigned grid[3] = {u((d.D + bd - 1) / bd), u(d.batch), 1};
  c.launch(grid, static_cast<CUstream>(stream));
}

std::vector<Specialization> detail::convSpecializations(const CausalConv1dArgs& a, const std::string& arch) {
  const ConvDims d = checkConv1dArgs(a, a.x.device, "causal_conv1d");
  std::vector<Specialization> out;
  KernelCall f(kernels::kConvFwdKernel, kFwdSchema);
  bindForward(f, a, d, nullptr);
  out.push_back(f.specialization(arch));
  if (needsFinalStateLaunch(a)) {
    KernelCall c(kernels::kConvFinalStateKernel, kFinalSchema);
    bindFinalState(c, a, d, nullptr);
    out.push_back(c.specialization(arch));
  }
  return out;
}

Specialization detail::convUpdateSpecialization(const CausalConv1dUpdateArgs& a, const std::string& arch) {
  const ConvUpdateDims d = checkConv1dUpdateArgs(a, a.x.device, "causal_conv1d_update");
  KernelCall c(kernels::kConvUpdateKernel, kUpdateSchema);
  bindUpdate(c, a, d, nullptr);
  return c.specialization(arch);
}

}  // namespace ssmjit
