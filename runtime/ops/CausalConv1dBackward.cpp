// causal_conv1d_backward: the arguments are checked at the edge (CausalConv1dCheck), then three
// launches on the caller's stream (kernels_dsl/CausalConv1d.h): dx with per-program partial sums
// of dweight / dbias into the caller's workspace; the per-sequence kernel when there are
// sequences to check or state gradients to write (after dx: it adds the final states' gradient
// to dx); the fixed-order reduction of the partial sums.
#include <cuda.h>

#include <algorithm>
#include <string>
#include <vector>

#include "compiler/IntMath.h"
#include "kernels_dsl/CausalConv1d.h"
#include "kernels_dsl/Dsl.h"
#include "runtime/DeviceStatus.h"
#include "runtime/ops/ArgCheck.h"
#include "runtime/ops/CausalConv1dCheck.h"
#include "runtime/ops/CausalConv1dSpec.h"
#include "runtime/ops/ConvBinding.h"
#include "runtime/ops/KernelCall.h"
#include "ssmjit/error.h"
#include "ssmjit/ops.h"

namespace ssmjit {
namespace {

using detail::ArgIndex;
using detail::ConvBackwardDims;
using detail::KernelCall;

constexpr const char* kOp = "causal_conv1d_backward";
// Programs the dx kernel aims for: enough to fill the GPU a few times over; fewer (longer chunks)
// keep the workspace and the reduction small. Channel-first wants more (a packed row is faster at
// ~9 waves than at ~2.5); channel-last rows get slower with more. Constants, so the workspace size
// and the sums' order depend on the shapes only, not on the device.
constexpr int64_t kTargetProgramsChannelFirst = 4096;
constexpr int64_t kTargetProgramsChannelLast = 1024;
// The meta values (block sizes) do not depend on the arch; the workspace query needs no device.
constexpr const char* kPlanArch = "sm_90a";

const ArgSchema kBwdSchema{kernels::kConvBwdArgNames, kernels::kConvBwdNumArgs};
const ArgSchema kReduceSchema{kernels::kConvBwdReduceArgNames, kernels::kConvBwdReduceNumArgs};
const ArgSchema kStatesSchema{kernels::kConvBwdStatesArgNames, kernels::kConvBwdStatesNumArgs};

using detail::strideOr0;
constexpr auto u = detail::gridDim;

// How the dx kernel cuts each row into chunks of `tiles` time tiles (one program each).
struct ChunkPlan {
  int64_t tiles = 0, nchunks = 0;
  int64_t partials(const ConvBackwardDims& d) const { return d.L == 0 ? 0 : d.batch * nchunks; }
  int64_t workspace(const ConvBackwardDims& d) const { return partials(d) * (d.W + 1) * d.D; }
};
ChunkPlan planChunks(const ConvBackwardDims& d, int64_t bd, int64_t bt) {
  ChunkPlan p;
  const int64_t rowTiles = std::max<int64_t>(1, cdiv(d.L, bt));
  const int64_t target = d.channelLast ? kTargetProgramsChannelLast : kTargetProgramsChannelFirst;
  const int64_t perRow = std::max<int64_t>(1, cdiv(target, cdiv(d.D, bd) * std::max<int64_t>(1, d.batch)));
  p.tiles = std::max({std::max<int64_t>(4, 128 / bt), cdiv(rowTiles, perRow), cdiv(rowTiles, 65535)});
  p.nchunks = cdiv(rowTiles, p.tiles);
  return p;
}

// The kernels index the workspace only below `workspace` elements, whatever its size.
bool wideOffsets(const CausalConv1dBackwardArgs& a, int64_t workspace) {
  return !detail::fits32({&a.x, &a.dout, &a.dx, &a.weight, &a.bias, &a.initial_states, &a.dinitial_states,
                          &a.dfinal_states, &a.seq_pos}) ||
         workspace > INT32_MAX;
}

void bindBackward(KernelCall& c, const CausalConv1dBackwardArgs& a, const ConvBackwardDims& d, const ChunkPlan& p,
                  void* err, bool wide) {
  thread_local const ArgIndex A{kBwdSchema.names, kBwdSchema.count};
  detail::bindConvInputs(c, A, a, d, err);
  c.pointer(A("dout"), a.dout, DType::F32, true);
  c.pointer(A("dx"), a.dx, DType::F32, true);
  c.pointer(A("ws"), a.workspace, DType::F32, true);
  c.size(A("tiles"), p.tiles, false);
  c.size(A("nchunks"), p.nchunks, false);
  detail::bindConvRows(c, A, a.dout, d, "s_dy_b", "s_dy_t", "s_dy_d");
  detail::bindConvRows(c, A, a.dx, d, "s_dx_b", "s_dx_t", "s_dx_d");
  c.meta("meta:index_bits", wide ? 64 : 32);
}

void bindReduce(KernelCall& c, const CausalConv1dBackwardArgs& a, const ConvBackwardDims& d, const ChunkPlan& p,
                bool wide) {
  thread_local const ArgIndex A{kReduceSchema.names, kReduceSchema.count};
  c.pointer(A("ws"), a.workspace, DType::F32, true);
  c.pointer(A("dweight"), a.dweight, DType::F32, true);
  c.pointer(A("dbias"), a.dbias, DType::F32, true);
  c.size(A("D"), d.D, true);
  c.size(A("partials"), p.partials(d), false);
  c.stride(A("s_dw_d"), a.dweight.strides[0]);
  c.stride(A("s_dw_k"), a.dweight.strides[1]);
  c.stride(A("s_db_d"), strideOr0(a.dbias, 0));
  c.flag(A("has_dbias"), a.dbias.defined());
  c.meta("meta:width", d.W);
  c.meta("meta:index_bits", wide ? 64 : 32);
}

// The per-sequence launch runs when there is something to check or write.
bool needsStatesLaunch(const CausalConv1dBackwardArgs& a, const ConvBackwardDims& d) {
  return d.nseq > 0 && (d.packedCu || a.initial_state_indices.defined() || a.dinitial_states.defined() ||
                        a.dfinal_states.defined());
}

void bindStates(KernelCall& c, const CausalConv1dBackwardArgs& a, const ConvBackwardDims& d, void* err, bool wide) {
  thread_local const ArgIndex A{kStatesSchema.names, kStatesSchema.count};
  const TensorView &is = a.initial_states, &gi = a.dinitial_states, &gf = a.dfinal_states;
  c.pointer(A("x"), a.x, DType::F32, true);
  c.pointer(A("weight"), a.weight, DType::F32, true);
  c.pointer(A("bias"), a.bias, DType::F32, true);
  c.pointer(A("dout"), a.dout, DType::F32, true);
  c.pointer(A("dx"), a.dx, DType::F32, true);
  c.pointer(A("init"), is, DType::F32, true);
  c.pointer(A("dinit"), gi, DType::F32, true);
  c.pointer(A("dfinal"), gf, DType::F32, true);
  c.pointer(A("cu"), a.cu_seqlens, DType::I32, false);
  c.pointer(A("init_idx"), a.initial_state_indices, DType::I32, false);
  c.pointer(A("final_idx"), a.final_state_indices, DType::I32, false);
  c.pointer(A("err"), err, DType::I64);
  c.size(A("D"), d.D, true);
  c.size(A("L"), d.L, false);
  c.count(A("nseq"), d.nseq);
  c.count(A("nslots_init"), d.initSlots);
  c.count(A("nslots_final"), d.dfinalSlots);
  detail::bindConvRows(c, A, a.x, d, "s_x_b", "s_x_t", "s_x_d");
  detail::bindConvRows(c, A, a.dout, d, "s_dy_b", "s_dy_t", "s_dy_d");
  detail::bindConvRows(c, A, a.dx, d, "s_dx_b", "s_dx_t", "s_dx_d");
  c.stride(A("s_w_d"), a.weight.strides[0]);
  c.stride(A("s_w_k"), a.weight.strides[1]);
  c.stride(A("s_bias_d"), strideOr0(a.bias, 0));
  detail::bindStateStrides(c, A, is, "s_init_slot", "s_init_d", "s_init_k");
  detail::bindStateStrides(c, A, gi, "s_dinit_slot", "s_dinit_d", "s_dinit_k");
  detail::bindStateStrides(c, A, gf, "s_dfinal_slot", "s_dfinal_d", "s_dfinal_k");
  c.stride(A("s_cu"), strideOr0(a.cu_seqlens, 0));
  c.stride(A("s_init_idx"), strideOr0(a.initial_state_indices, 0));
  c.stride(A("s_final_idx"), strideOr0(a.final_state_indices, 0));
  c.flag(A("has_bias"), a.bias.defined());
  c.flag(A("silu"), a.silu);
  c.flag(A("has_cu"), d.packedCu);
  c.flag(A("has_init"), is.defined());
  c.flag(A("has_init_idx"), a.initial_state_indices.defined());
  c.flag(A("has_dinit"), gi.defined());
  c.flag(A("has_dfinal"), gf.defined());
  c.flag(A("has_final_idx"), a.final_state_indices.defined());
  c.meta("meta:width", d.W);
  c.meta("meta:index_bits", wide ? 64 : 32);
}

// The dx kernel's tile sizes, as its meta chooser sets them, for the chunk plan.
// Its meta chooser reads only the streamed dtypes, the width and the layout (and SSMJIT_META, fixed
// for the process), so the tile sizes are remembered per thread by those: building and completing
// a Specialization on every call cost ~7 us of host time.
ChunkPlan planFor(const CausalConv1dBackwardArgs& a, const ConvBackwardDims& d) {
  struct Tiles {
    int64_t key = -1, bd = 0, bt = 0;
  };
  thread_local Tiles memo[4];
  thread_local int next = 0;
  const int64_t key = ((((static_cast<int64_t>(a.x.dtype) * 8 + static_cast<int64_t>(a.dout.dtype)) * 8 +
                         static_cast<int64_t>(a.dx.dtype)) * 16 + d.W) * 2) + (d.channelLast ? 1 : 0);
  for (const Tiles& t : memo)
    if (t.key == key) return planChunks(d, t.bd, t.bt);
  KernelCall c(kernels::kConvBwdKernel, kBwdSchema);
  bindBackward(c, a, d, ChunkPlan{1, 1}, nullptr, false);
  const Specialization s = c.specialization(kPlanArch);
  Tiles& t = memo[next++ % 4];
  t = {key, s.get("meta:BLOCK_D"), s.get("meta:BLOCK_T")};
  return planChunks(d, t.bd, t.bt);
}

void checkWorkspace(const CausalConv1dBackwardArgs& a, int64_t need) {
  detail::Checker c(kOp, DeviceKind::CUDA);
  c.setDeviceId(a.x.deviceId, "x");
  const TensorView& ws = a.workspace;
  if (need > 0 && !ws.defined())
    c.fail("workspace is not given, expected a float32 tensor of at least " + std::to_string(need) +
           " elements (causal_conv1d_backward_workspace_size)");
  if (!ws.defined()) return;
  if (ws.ndim != 1 || ws.shape[0] < need)
    c.fail("workspace has shape " + ws.shapeString() + ", expected (n,) with n >= " + std::to_string(need) +
           " (causal_conv1d_backward_workspace_size)");
  const detail::Dim e[1] = {{ws.shape[0], "n"}};
  c.tensor("workspace", ws, e, 1, detail::kF32Only, false);
  if (ws.shape[0] > 1 && ws.strides[0] != 1)
    c.fail("workspace has stride " + std::to_string(ws.strides[0]) + ", expected 1 (contiguous)");
}

}  // namespace

int64_t causal_conv1d_backward_workspace_size(const CausalConv1dBackwardArgs& a) {
  const ConvBackwardDims d = detail::checkConv1dBackwardArgs(a, a.x.device, kOp);
  return planFor(a, d).workspace(d);
}

void causal_conv1d_backward(const CausalConv1dBackwardArgs& a, Stream stream) {
  const ConvBackwardDims d = detail::checkConv1dBackwardArgs(a, DeviceKind::CUDA, kOp);
  if (d.D == 0) return;
  const ChunkPlan p = planFor(a, d);
  checkWorkspace(a, p.workspace(d));
  const bool wide = wideOffsets(a, p.workspace(d));
  const CUstream s = static_cast<CUstream>(stream);
  if (p.partials(d) > 0) {
    KernelCall c(kernels::kConvBwdKernel, kBwdSchema);
    bindBackward(c, a, d, p, deviceStatusRecord(), wide);
    const unsigned grid[3] = {u(cdiv(d.D, c.metaValue("meta:BLOCK_D"))), u(p.nchunks), u(d.batch)};
    c.launch(grid, s);
  }
  if (needsStatesLaunch(a, d)) {
    KernelCall c(kernels::kConvBwdStatesKernel, kStatesSchema);
    bindStates(c, a, d, deviceStatusRecord(), wide);
    const unsigned grid[3] = {u(cdiv(d.D, c.metaValue("meta:BLOCK_D"))), u(d.nseq), 1};
    c.launch(grid, s);
  }
  KernelCall c(kernels::kConvBwdReduceKernel, kReduceSchema);
  bindReduce(c, a, d, p, wide);
  const unsigned grid[3] = {u(cdiv(d.D, c.metaValue("meta:BLOCK_D"))),
                            u(d.W + (a.dbias.defined() ? 1 : 0)), 1};  // no dbias, no column for it
  c.launch(grid, s);
}

std::vector<Specialization> detail::convBackwardSpecializations(const CausalConv1dBackwardArgs& a,
                                                                const std::string& arch) {
  const ConvBackwardDims d = checkConv1dBackwardArgs(a, a.x.device, kOp);
  const ChunkPlan p = planFor(a, d);
  const bool wide = wideOffsets(a, p.workspace(d));
  std::vector<Specialization> out;
  KernelCall b(kernels::kConvBwdKernel, kBwdSchema);
  bindBackward(b, a, d, p, nullptr, wide);
  out.push_back(b.specialization(arch));
  if (needsStatesLaunch(a, d)) {
    KernelCall c(kernels::kConvBwdStatesKernel, kStatesSchema);
    bindStates(c, a, d, nullptr, wide);
    out.push_back(c.specialization(arch));
  }
  KernelCall r(kernels::kConvBwdReduceKernel, kReduceSchema);
  bindReduce(r, a, d, p, wide);
  out.push_back(r.specialization(arch));
  return out;
}

}  // namespace ssmjit
