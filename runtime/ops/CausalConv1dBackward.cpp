// causal_conv1d_backward: the arguments are checked at the edge (CausalConv1dCheck), then three
// launches on the caller's stream (kernels_dsl/conv/CausalConv1d.h): dx with per-program partial sums
// of dweight / dbias into the caller's workspace; the per-sequence kernel when there are
// sequences to check or state gradients to write (after dx: it adds the final states' gradient
// to dx); the fixed-order reduction of the partial sums.
#include <cuda.h>

#include <string>
#include <vector>

#include "compiler/IntMath.h"
#include "kernels_dsl/Dsl.h"
#include "kernels_dsl/conv/CausalConv1d.h"
#include "runtime/DeviceStatus.h"
#include "runtime/ops/ArgCheck.h"
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

using detail::ConvBackwardDims;
using detail::KernelCall;

constexpr const char* kOp = "causal_conv1d_backward";
// The meta values (block sizes) do not depend on the arch; the workspace query needs no device.
constexpr const char* kPlanArch = "sm_90a";

using kernels::kConvBwd;
using kernels::kConvBwdReduce;
using kernels::kConvBwdStates;
constexpr auto u = detail::gridDim;

// How the dx kernel cuts each row into chunks (kernels::convBackwardChunks), and what that takes.
using ChunkPlan = kernels::ConvBwdChunks;
int64_t partials(const ConvBackwardDims& d, const ChunkPlan& p) { return d.L == 0 ? 0 : d.batch * p.nchunks; }
int64_t workspaceSize(const ConvBackwardDims& d, const ChunkPlan& p) { return partials(d, p) * (d.W + 1) * d.D; }
ChunkPlan planChunks(const ConvBackwardDims& d, int64_t bd, int64_t bt) {
  return kernels::convBackwardChunks(d.L, d.D, d.batch, d.channelLast, bd, bt);
}

// The kernels index the workspace only below `workspace` elements, whatever its size.
bool wideOffsets(const CausalConv1dBackwardArgs& a, int64_t workspace) {
  return !detail::fits32({&a.x, &a.dout, &a.dx, &a.weight, &a.bias, &a.initial_states, &a.dinitial_states,
                          &a.dfinal_states, &a.seq_pos}) ||
         workspace > INT32_MAX;
}

void bindBackward(KernelCall& c, const CausalConv1dBackwardArgs& a, const ConvBackwardDims& d, const ChunkPlan& p,
                  void* err, bool wide) {
  detail::bindConvInputs<kConvBwd>(c, a, d, err);
  c.tensor(kConvBwd.tensor("dout"), a.dout, detail::convRows(d));
  c.tensor(kConvBwd.tensor("dx"), a.dx, detail::convRows(d));
  c.tensor(kConvBwd.tensor("ws"), a.workspace);
  c.size(kConvBwd.size("tiles"), p.tiles);
  c.size(kConvBwd.size("nchunks"), p.nchunks);
  c.meta("meta:index_bits", wide ? 64 : 32);
}

void bindReduce(KernelCall& c, const CausalConv1dBackwardArgs& a, const ConvBackwardDims& d, const ChunkPlan& p,
                bool wide) {
  constexpr const dsl::Signature& S = kConvBwdReduce;
  c.tensor(S.tensor("ws"), a.workspace);
  c.tensor(S.tensor("dweight"), a.dweight);
  c.tensor(S.tensor("dbias"), a.dbias);
  c.size(S.size("D"), d.D);
  c.size(S.size("partials"), partials(d, p));
  c.flag(S.flag("has_dbias"), a.dbias.defined());
  c.meta("meta:width", d.W);
  c.meta("meta:index_bits", wide ? 64 : 32);
}

// The per-sequence launch runs when there is something to check or write.
bool needsStatesLaunch(const CausalConv1dBackwardArgs& a, const ConvBackwardDims& d) {
  return d.nseq > 0 &&
         (d.packedCu || a.initial_state_indices.defined() || a.dinitial_states.defined() || a.dfinal_states.defined());
}

void bindStates(KernelCall& c, const CausalConv1dBackwardArgs& a, const ConvBackwardDims& d, void* err, bool wide) {
  constexpr const dsl::Signature& S = kConvBwdStates;
  const TensorView &is = a.initial_states, &gi = a.dinitial_states, &gf = a.dfinal_states;
  c.tensor(S.tensor("x"), a.x, detail::convRows(d));
  c.tensor(S.tensor("weight"), a.weight);
  c.tensor(S.tensor("bias"), a.bias);
  c.tensor(S.tensor("dout"), a.dout, detail::convRows(d));
  c.tensor(S.tensor("dx"), a.dx, detail::convRows(d));
  c.tensor(S.tensor("init"), is);
  c.tensor(S.tensor("dinit"), gi);
  c.tensor(S.tensor("dfinal"), gf);
  detail::bindConvSequences<S>(c, a, d, d.dfinalSlots, err);
  c.flag(S.flag("has_bias"), a.bias.defined());
  c.flag(S.flag("silu"), a.silu);
  c.flag(S.flag("has_init"), is.defined());
  c.flag(S.flag("has_dinit"), gi.defined());
  c.flag(S.flag("has_dfinal"), gf.defined());
  c.meta("meta:width", d.W);
  c.meta("meta:index_bits", wide ? 64 : 32);
}

// The dx kernel's tile sizes, as its meta chooser sets them, for the chunk plan.
// Its meta chooser reads only the streamed dtypes, the width, the layout and whether the row is
// packed (and SSMJIT_META, fixed for the process), so the tile sizes are remembered per thread by
// those: building and completing a Specialization on every call cost ~7 us of host time.
ChunkPlan planFor(const CausalConv1dBackwardArgs& a, const ConvBackwardDims& d) {
  struct Tiles {
    int64_t key = -1, bd = 0, bt = 0;
  };
  thread_local Tiles memo[4];
  thread_local int next = 0;
  const int64_t key = ((((static_cast<int64_t>(a.x.dtype) * 8 + static_cast<int64_t>(a.dout.dtype)) * 8 +
                         static_cast<int64_t>(a.dx.dtype)) *
                            16 +
                        d.W) *
                       4) +
                      (d.channelLast ? 1 : 0) + (d.packedCu ? 2 : 0);
  for (const Tiles& t : memo)
    if (t.key == key) return planChunks(d, t.bd, t.bt);
  KernelCall c(kConvBwd);
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
  return workspaceSize(d, planFor(a, d));
}

void causal_conv1d_backward(const CausalConv1dBackwardArgs& a, Stream stream) {
  const ConvBackwardDims d = detail::checkConv1dBackwardArgs(a, DeviceKind::CUDA, kOp);
  if (d.D == 0) return;
  const ChunkPlan p = planFor(a, d);
  checkWorkspace(a, workspaceSize(d, p));
  const bool wide = wideOffsets(a, workspaceSize(d, p));
  const CUstream s = static_cast<CUstream>(stream);
  const detail::CompileAhead ahead(
      [&](const std::string& arch) { return detail::convBackwardSpecializations(a, arch); });
  if (partials(d, p) > 0) {
    KernelCall c(kConvBwd);
    bindBackward(c, a, d, p, deviceStatusRecord(), wide);
    const unsigned grid[3] = {u(cdiv(d.D, c.metaValue("meta:BLOCK_D"))), u(p.nchunks), u(d.batch)};
    c.launch(grid, s);
  }
  if (needsStatesLaunch(a, d)) {
    KernelCall c(kConvBwdStates);
    bindStates(c, a, d, deviceStatusRecord(), wide);
    const unsigned grid[3] = {u(cdiv(d.D, c.metaValue("meta:BLOCK_D"))), u(d.nseq), 1};
    c.launch(grid, s);
  }
  KernelCall c(kConvBwdReduce);
  bindReduce(c, a, d, p, wide);
  const unsigned grid[3] = {u(cdiv(d.D, c.metaValue("meta:BLOCK_D"))), u(d.W + (a.dbias.defined() ? 1 : 0)),
                            1};  // no dbias, no column for it
  c.launch(grid, s);
}

std::vector<Specialization> detail::convBackwardSpecializations(const CausalConv1dBackwardArgs& a,
                                                                const std::string& arch) {
  const ConvBackwardDims d = checkConv1dBackwardArgs(a, a.x.device, kOp);
  const ChunkPlan p = planFor(a, d);
  const bool wide = wideOffsets(a, workspaceSize(d, p));
  std::vector<Specialization> out;
  KernelCall b(kConvBwd);
  bindBackward(b, a, d, p, nullptr, wide);
  out.push_back(b.specialization(arch));
  if (needsStatesLaunch(a, d)) {
    KernelCall c(kConvBwdStates);
    bindStates(c, a, d, nullptr, wide);
    out.push_back(c.specialization(arch));
  }
  KernelCall r(kConvBwdReduce);
  bindReduce(r, a, d, p, wide);
  out.push_back(r.specialization(arch));
  return out;
}

}  // namespace ssmjit
