#include "runtime/ops/BackwardStandIn.h"

#include <algorithm>
#include <cstdint>

namespace ssmjit::detail {
namespace {

// Stand-in number k of `v`: its view at an address k x 2^44 bytes on, so the alignment class
// stays v's and no two stand-ins (nor any real buffer of one device) overlap.
TensorView standIn(const TensorView& v, int k) {
  if (!v.defined()) return {};
  TensorView s = v;
  s.data = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(v.data) + (static_cast<uintptr_t>(k) << 44));
  return s;
}

// A contiguous float32 workspace of `elements` at a 256-byte aligned stand-in address.
TensorView workspaceStandIn(const TensorView& like, int64_t elements) {
  return TensorView::contiguous(reinterpret_cast<void*>(uintptr_t{31} << 44), DType::F32,
                                {std::max<int64_t>(1, elements)}, like.device, like.deviceId);
}

}  // namespace

SelectiveScanBackwardArgs scanBackwardStandIn(const SelectiveScanArgs& f) {
  SelectiveScanBackwardArgs b;
  b.forward = f;
  b.dout = standIn(f.out, 1);
  b.du = standIn(f.u, 2);
  b.ddelta = standIn(f.delta, 3);
  b.dA = standIn(f.A, 4);
  b.dB = standIn(f.B, 5);
  b.dC = standIn(f.C, 6);
  b.dD = standIn(f.D, 7);
  b.dz = standIn(f.z, 8);
  b.ddelta_bias = standIn(f.delta_bias, 9);
  b.workspace = workspaceStandIn(f.u, selective_scan_backward_workspace_size(b));
  return b;
}

SsdBackwardArgs ssdBackwardStandIn(const SsdArgs& f) {
  SsdBackwardArgs b;
  b.forward = f;
  b.dout = standIn(f.out, 1);
  b.dx = standIn(f.x, 2);
  b.ddt = standIn(f.dt, 3);
  b.dA = standIn(f.A, 4);
  b.dB = standIn(f.B, 5);
  b.dC = standIn(f.C, 6);
  b.dD = standIn(f.D, 7);
  b.dz = standIn(f.z, 8);
  b.ddt_bias = standIn(f.dt_bias, 9);
  b.workspace = workspaceStandIn(f.x, ssd_backward_workspace_size(b));
  return b;
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

}  // namespace ssmjit::detail
