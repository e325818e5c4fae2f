#include "runtime/ops/BackwardStandIn.h"

#include <algorithm>
#include <cstdint>

#include "runtime/ops/CausalConv1dSpec.h"
#include "runtime/ops/Gradients.h"
#include "runtime/ops/SelectiveScanSpec.h"
#include "runtime/ops/SsdBackwardSpec.h"

namespace ssmjit::detail {
namespace {

// The address of stand-in number k of `v`: k x 2^44 bytes on, so the alignment class stays v's
// and no two stand-ins (nor any real buffer of one device) overlap.
void* standInAddress(const TensorView& v, int k) {
  return reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(v.data) + (static_cast<uintptr_t>(k) << 44));
}

// Stand-in number k of `v`: its view at that address.
TensorView standIn(const TensorView& v, int k) {
  if (!v.defined()) return {};
  TensorView s = v;
  s.data = standInAddress(v, k);
  return s;
}

// A contiguous float32 workspace of `elements` at a 256-byte aligned stand-in address.
TensorView workspaceStandIn(const TensorView& like, int64_t elements) {
  return TensorView::contiguous(reinterpret_cast<void*>(uintptr_t{31} << 44), DType::F32,
                                {std::max<int64_t>(1, elements)}, like.device, like.deviceId);
}

// The scan's or SSD's: each gradient a stand-in of its input (Gradients.h), the workspace like `x`.
template <class Backward, class Forward>
Backward gradientsStandIn(const Forward& f, const TensorView& x, int64_t (*workspaceSize)(const Backward&)) {
  Backward b;
  b.forward = f;
  setGradientsLikeInputs(b, 1, standInAddress);
  b.workspace = workspaceStandIn(x, workspaceSize(b));
  return b;
}

SelectiveScanBackwardArgs scanBackwardStandIn(const SelectiveScanArgs& f) {
  return gradientsStandIn<SelectiveScanBackwardArgs>(f, f.u, selective_scan_backward_workspace_size);
}

SsdBackwardArgs ssdBackwardStandIn(const SsdArgs& f) {
  return gradientsStandIn<SsdBackwardArgs>(f, f.x, ssd_backward_workspace_size);
}

CausalConv1dBackwardArgs convBackwardStandIn(const CausalConv1dArgs& f) {
  CausalConv1dBackwardArgs b;
  b.x = f.x;
  b.weight = f.weight;
  b.bias = f.bias;
  b.layout = f.layout;
  b.silu = f.silu;
  b.cu_seqlens = f.cu_seqlens;
  b.seq_pos = f.seq_pos;
  b.initial_states = f.initial_states;
  b.initial_state_indices = f.initial_state_indices;
  b.dout = standIn(f.out, 1);
  b.dx = standIn(f.x, 2);
  b.dweight = standIn(f.weight, 3);
  b.dbias = standIn(f.bias, 4);
  b.workspace = workspaceStandIn(f.x, causal_conv1d_backward_workspace_size(b));
  return b;
}

// With compile_backward, the kernels `specializations` names for the stand-in `standIn(f)`.
template <class Forward, class Backward>
std::vector<Specialization> alongside(const Forward& f, const std::string& arch, Backward (*standIn)(const Forward&),
                                      std::vector<Specialization> (*specializations)(const Backward&,
                                                                                     const std::string&)) {
  if (!f.compile_backward) return {};
  return specializations(standIn(f), arch);
}

}  // namespace

std::vector<Specialization> backwardAlongside(const SelectiveScanArgs& f, const std::string& arch) {
  return alongside(f, arch, scanBackwardStandIn, scanBackwardSpecializations);
}

std::vector<Specialization> backwardAlongside(const SsdArgs& f, const std::string& arch) {
  return alongside(f, arch, ssdBackwardStandIn, ssdBackwardSpecializations);
}

std::vector<Specialization> backwardAlongside(const CausalConv1dArgs& f, const std::string& arch) {
  return alongside(f, arch, convBackwardStandIn, convBackwardSpecializations);
}

}  // namespace ssmjit::detail
