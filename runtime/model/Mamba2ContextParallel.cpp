// The context-parallel Mamba-2 layer prefill (mamba2_parallel.h): the layer's own prefill with
// two hooks, a conv halo from the previous rank and the SSD's context-parallel forward
// (ssd_parallel.h). Its extra buffers sit at the workspace's front, the layer's workspace after
// them.
#include <cuda.h>

#include <string>
#include <vector>

#include "runtime/Driver.h"
#include "runtime/model/Mamba2CpPart.h"
#include "runtime/model/Mamba2LayerHooks.h"
#include "runtime/parallel/SsdContextParallel.h"
#include "ssmjit/error.h"
#include "ssmjit/mamba2_parallel.h"

namespace ssmjit {
namespace {

constexpr const char* kOp = "mamba2_cp_layer_prefill";
constexpr int64_t kAlign = 256;
int64_t alignUp(int64_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

[[noreturn]] void fail(const std::string& msg) {
  throw Error(Error::Kind::InvalidArgument, std::string(kOp) + ": " + msg);
}

// Byte offsets of the extra buffers in the workspace: the part's index arrays, the conv's halo,
// what the SSD's forward keeps (its incoming state and decay) and the SSD's context-parallel
// extras.
struct Extras {
  int64_t halo = 0, incoming = 0, decay = 0, ssd = 0, layer = 0;
};

Extras extrasOf(const Mamba2Dims& d, DType act, const detail::CpPart& p, int ranks) {
  const int64_t H = d.heads, PN = d.head_dim * d.state;
  Extras x;
  x.halo = alignUp(static_cast<int64_t>(p.ints.size()) * 4);
  x.incoming = x.halo + alignUp((d.conv_width - 1) * d.inProjRows() * dtypeBytes(act));
  x.decay = x.incoming + alignUp(H * PN * 4);
  x.ssd = x.decay + alignUp(H * 4);
  x.layer = x.ssd + detail::ssdCpForwardExtrasBytes(p.nloc, H, PN, ranks);
  return x;
}

struct Bufs {
  char* base;
  int device;
  TensorView at(int64_t byteOffset, DType t, std::initializer_list<int64_t> shape) const {
    return TensorView::contiguous(base + byteOffset, t, shape, DeviceKind::CUDA, device);
  }
};

// The layer's own call on this rank's tokens; its workspace after the extras (none when sizing).
Mamba2LayerArgs layerArgs(const Mamba2CpPrefillArgs& a, const detail::CpPart& p, const Extras& x, const Bufs& b,
                          int64_t workspaceFloats) {
  Mamba2LayerArgs l;
  l.hidden = a.hidden;
  l.out = a.out;
  l.cu_seqlens = b.at(0, DType::I32, {p.nloc + 1});
  l.state_indices = b.at((p.nloc + 1) * 4, DType::I32, {p.nloc});
  if (workspaceFloats > 0) l.workspace = b.at(x.layer, DType::F32, {workspaceFloats - x.layer / 4});
  return l;
}

void* standIn() { return reinterpret_cast<void*>(uintptr_t{1} << 45); }

}  // namespace

int64_t mamba2_cp_layer_prefill_workspace_size(const Mamba2Dims& d, const Mamba2LayerWeights& w,
                                               const Mamba2LayerState& s, const Mamba2CpPrefillArgs& a,
                                               const Communicator& comm) {
  const detail::CpPart p = detail::cpPartOf(d, a, comm.rank(), comm.size());
  const Extras x = extrasOf(d, a.hidden.dtype, p, comm.size());
  const Bufs b{static_cast<char*>(standIn()), a.hidden.deviceId};
  return x.layer / 4 + mamba2_layer_workspace_size(d, w, s, layerArgs(a, p, x, b, 0), Mamba2LayerMode::Prefill);
}

void mamba2_cp_layer_prefill(const Mamba2Dims& d, const Mamba2LayerWeights& w, const Mamba2LayerState& s,
                             const Mamba2CpPrefillArgs& a, Communicator& comm, Stream stream) {
  const int rank = comm.rank(), ranks = comm.size();
  const detail::CpPart p = detail::cpPartOf(d, a, rank, ranks);
  const Extras x = extrasOf(d, a.hidden.dtype, p, ranks);
  if (!a.workspace.defined() || a.workspace.dtype != DType::F32 || a.workspace.numel() * 4 < x.layer)
    fail("workspace is too small or not float32, expected mamba2_cp_layer_prefill_workspace_size() floats");
  const Bufs b{static_cast<char*>(a.workspace.data), a.workspace.deviceId};
  const Mamba2LayerArgs layer = layerArgs(a, p, x, b, a.workspace.numel());
  const auto cs = static_cast<CUstream>(stream);
  const driver::Api& api = driver::api();
  driver::check(api.cuMemcpyHtoDAsync(reinterpret_cast<CUdeviceptr>(b.base), p.ints.data(), p.ints.size() * 4, cs),
                "mamba2_cp_layer_prefill: uploading the part's indices");
  const TensorView firstIdx = b.at((2 * p.nloc + 1) * 4, DType::I32, {p.nloc});
  const DType act = a.hidden.dtype;
  const int64_t R = d.inProjRows(), Wm = d.conv_width - 1;

  detail::Mamba2PrefillHooks hooks;
  hooks.beforeConv = [&](CausalConv1dArgs& conv, const TensorView& zxbcdt) {
    // The last W - 1 rows of in_proj's output go to the next rank; the previous rank's arrive as
    // the conv's initial state of the sequence continuing here, (1, convDim, W - 1) in place.
    const int64_t bytes = dtypeBytes(act);
    const TensorView send = TensorView::contiguous(static_cast<char*>(zxbcdt.data) + (p.Tr - Wm) * R * bytes, act,
                                                   {Wm * R}, DeviceKind::CUDA, zxbcdt.deviceId);
    const TensorView recv = b.at(x.halo, act, {Wm * R});
    const bool toNext = rank + 1 < ranks, fromPrev = rank > 0;
    comm.sendRecv(toNext ? send : TensorView{}, toNext ? rank + 1 : -1, fromPrev ? recv : TensorView{},
                  fromPrev ? rank - 1 : -1, stream);
    if (!fromPrev) return;
    TensorView halo = b.at(x.halo + d.dInner() * bytes, act, {1, d.convDim(), Wm});
    halo.strides[0] = Wm * R;
    halo.strides[1] = 1;
    halo.strides[2] = R;
    conv.initial_states = halo;
    conv.initial_state_indices = firstIdx;
  };
  hooks.ssd = [&](SsdArgs& q) {
    SsdCpCarry carry;
    carry.incoming = b.at(x.incoming, DType::F32, {d.heads, d.head_dim, d.state});
    carry.decay = b.at(x.decay, DType::F32, {d.heads});
    detail::ssdCpForward(q, SsdCpPart{p.firstContinues, p.lastContinues}, carry, comm, b.base + x.ssd, stream);
  };
  detail::mamba2LayerPrefill(d, w, s, layer, stream, hooks);
}

}  // namespace ssmjit
