// mamba2_decode_step: the arguments are checked once, here at the edge (Mamba2DecodeStepCheck),
// then bound to the generic kernel (kernels_dsl/Mamba2DecodeStep.h), specialised and launched on
// the caller's stream: one launch per step, whatever the parts.
#include <cuda.h>

#include "kernels_dsl/Mamba2DecodeStep.h"
#include "runtime/DeviceStatus.h"
#include "runtime/ops/KernelCall.h"
#include "runtime/ops/Mamba2DecodeStepCheck.h"
#include "runtime/ops/Mamba2DecodeStepSpec.h"
#include "ssmjit/ops.h"

namespace ssmjit {
namespace {

using detail::ArgIndex;
using detail::KernelCall;

const ArgSchema kSchema{kernels::kDecodeStepArgNames, kernels::kDecodeStepNumArgs};

using detail::strideOr0;

void bind(KernelCall& c, const Mamba2DecodeState& s, const Mamba2MixerWeights& w, const Mamba2DecodeStepArgs& a,
          const detail::DecodeStepDims& d, void* err) {
  thread_local const ArgIndex A{kSchema.names, kSchema.count};
  c.pointer(A("conv_state"), s.conv_state, DType::F32, true);
  c.pointer(A("ssm_state"), s.ssm_state, DType::F32, true);
  c.pointer(A("xbc_cache"), s.xbc_cache, DType::F32, true);
  c.pointer(A("dt_cache"), s.dt_cache, DType::F32, true);
  c.pointer(A("conv_w"), w.conv_weight, DType::F32, true);
  c.pointer(A("conv_b"), w.conv_bias, DType::F32, true);
  c.pointer(A("A"), w.A, DType::F32, true);
  c.pointer(A("D"), w.D, DType::F32, true);
  c.pointer(A("dt_bias"), w.dt_bias, DType::F32, true);
  c.pointer(A("xbc"), a.xBC, DType::F32, true);
  c.pointer(A("dt"), a.dt, DType::F32, true);
  c.pointer(A("z"), a.z, DType::F32, true);
  c.pointer(A("y"), a.y, DType::F32, true);
  c.pointer(A("state_idx"), a.state_indices, DType::I32, false);
  c.pointer(A("accepted"), a.num_accepted, DType::I32, false);
  c.pointer(A("cached"), s.cached_tokens, DType::I32, false);
  c.pointer(A("arrivals"), s.arrivals, DType::I32, false);
  c.pointer(A("err"), err, DType::I64);
  c.count(A("batch"), d.batch);
  c.count(A("nslots"), d.S);
  c.size(A("H"), d.H, true);
  c.size(A("P"), d.P, true);
  c.size(A("N"), d.N, true);
  c.size(A("G"), d.G, true);
  c.size(A("L"), d.L, true);
  c.size(A("Lc"), d.Lc, true);  // the staged token tiles cover Lc + L
  c.count(A("hpp"), 1);  // set at launch (headsPerProgram)
  c.v[A("dt_min")].f32 = w.dt_min;
  c.v[A("dt_max")].f32 = w.dt_max;
  const TensorView &cs = s.conv_state, &ss = s.ssm_state, &xc = s.xbc_cache, &dc = s.dt_cache;
  c.stride(A("s_cs_slot"), cs.strides[0]);
  c.stride(A("s_cs_c"), cs.strides[1]);
  c.stride(A("s_cs_k"), cs.strides[2]);
  c.stride(A("s_ss_slot"), ss.strides[0]);
  c.stride(A("s_ss_h"), ss.strides[1]);
  c.stride(A("s_ss_p"), ss.strides[2]);
  c.stride(A("s_ss_n"), ss.strides[3]);
  c.stride(A("s_xc_slot"), xc.strides[0]);
  c.stride(A("s_xc_t"), xc.strides[1]);
  c.stride(A("s_xc_c"), xc.strides[2]);
  c.stride(A("s_dc_slot"), dc.strides[0]);
  c.stride(A("s_dc_t"), dc.strides[1]);
  c.stride(A("s_dc_h"), dc.strides[2]);
  c.stride(A("s_w_c"), w.conv_weight.strides[0]);
  c.stride(A("s_w_k"), w.conv_weight.strides[1]);
  c.stride(A("s_cb_c"), strideOr0(w.conv_bias, 0));
  c.stride(A("s_A_h"), w.A.strides[0]);
  c.stride(A("s_D_h"), strideOr0(w.D, 0));
  c.stride(A("s_dtb_h"), strideOr0(w.dt_bias, 0));
  c.stride(A("s_xbc_b"), strideOr0(a.xBC, 0));
  c.stride(A("s_xbc_t"), d.L > 1 ? a.xBC.strides[1] : 0);
  c.stride(A("s_xbc_c"), strideOr0(a.xBC, 2));
  c.stride(A("s_dt_b"), strideOr0(a.dt, 0));
  c.stride(A("s_dt_t"), d.L > 1 ? a.dt.strides[1] : 0);
  c.stride(A("s_dt_h"), strideOr0(a.dt, 2));
  c.stride(A("s_z_b"), strideOr0(a.z, 0));
  c.stride(A("s_z_t"), d.L > 1 ? strideOr0(a.z, 1) : 0);
  c.stride(A("s_z_h"), strideOr0(a.z, 2));
  c.stride(A("s_z_p"), strideOr0(a.z, 3));
  c.stride(A("s_y_b"), strideOr0(a.y, 0));
  c.stride(A("s_y_t"), d.L > 1 ? a.y.strides[1] : 0);
  c.stride(A("s_y_h"), strideOr0(a.y, 2));
  c.stride(A("s_y_p"), strideOr0(a.y, 3));
  c.stride(A("s_idx_b"), strideOr0(a.state_indices, 0));
  c.stride(A("s_acc_b"), strideOr0(a.num_accepted, 0));
  c.stride(A("s_cached"), s.cached_tokens.strides[0]);
  c.flag(A("has_conv_bias"), w.conv_bias.defined());
  c.flag(A("has_D"), w.D.defined());
  c.flag(A("has_z"), a.z.defined());
  c.flag(A("has_dt_bias"), w.dt_bias.defined());
  c.flag(A("dt_softplus"), w.dt_softplus);
  c.flag(A("has_clamp"), w.dt_max > w.dt_min);
  c.flag(A("has_state_idx"), a.state_indices.defined());
  c.flag(A("replay"), d.replay);
  c.flag(A("verify"), d.verify);
  c.meta("meta:width", d.W);
  c.meta("meta:large_batch", d.batch * d.H >= kernels::kDecodeLargeBatchHeads);
  c.meta("meta:index_bits", detail::fits32({&s.conv_state, &s.ssm_state, &s.xbc_cache, &s.dt_cache, &w.conv_weight,
                                            &a.xBC, &a.dt, &a.z, &a.y})
                                ? 32
                                : 64);
}

// Heads per program: each program stages its group's B and C conv (and the dt of its heads) once
// for its heads, so past a few rows several heads share one staging, while the launch keeps at
// least `minPrograms`: 128, or 512 with the large-batch tiles (5 programs an SM). hpp divides H / G
// (the heads share a group) and stays within the kernel's kMaxHeadsPerProgram (8; its div class is
// then 1, so one specialisation serves every batch). At batch 1 one head a program is fastest; from
// batch 4 sharing the staging wins.
int64_t headsPerProgram(const detail::DecodeStepDims& d, int64_t programsPerHead, int64_t minPrograms) {
  int64_t hpp = 1;
  for (int64_t cand = 2; cand <= kernels::kMaxHeadsPerProgram; ++cand)
    if ((d.H / d.G) % cand == 0 && d.batch * programsPerHead * (d.H / cand) >= minPrograms) hpp = cand;
  return hpp;
}

}  // namespace

void mamba2_decode_step(const Mamba2DecodeState& s, const Mamba2MixerWeights& w, const Mamba2DecodeStepArgs& a,
                        Stream stream) {
  const detail::DecodeStepDims d = detail::checkDecodeStepArgs(s, w, a, DeviceKind::CUDA, "mamba2_decode_step");
  if (d.batch == 0) return;
  KernelCall c(kernels::kDecodeStepKernel, kSchema);
  bind(c, s, w, a, d, deviceStatusRecord());
  const int64_t bp = c.metaValue("meta:BLOCK_P"),
                hpp = headsPerProgram(d, (d.P + bp - 1) / bp, c.metaValue("meta:large_batch") ? 512 : 128);
  thread_local const ArgIndex A{kSchema.names, kSchema.count};
  c.v[A("hpp")].i64 = hpp;
  const unsigned grid[3] = {static_cast<unsigned>((d.P + bp - 1) / bp), static_cast<unsigned>(d.H / hpp),
                            static_cast<unsigned>(d.batch)};
  c.launch(grid, static_cast<CUstream>(stream));
}

Specialization detail::decodeStepSpecialization(const Mamba2DecodeState& s, const Mamba2MixerWeights& w,
                                                const Mamba2DecodeStepArgs& a, const std::string& arch) {
  const DecodeStepDims d = checkDecodeStepArgs(s, w, a, s.ssm_state.device, "mamba2_decode_step");
  KernelCall c(kernels::kDecodeStepKernel, kSchema);
  bind(c, s, w, a, d, nullptr);
  return c.specialization(arch);
}

}  // namespace ssmjit
