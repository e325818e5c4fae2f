// The tensor- and sequence-parallel Mamba-2 layer (mamba2_parallel.h): the local layer of the
// shard between the collectives, its buffers carved from the caller's workspace.
#include <string>

#include "runtime/model/Mamba2Sharding.h"
#include "runtime/model/OverlappedAllReduce.h"
#include "ssmjit/error.h"
#include "ssmjit/mamba2_parallel.h"

namespace ssmjit {
namespace {

constexpr int64_t kAlign = 256;
int64_t alignUp(int64_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

[[noreturn]] void fail(const char* op, const std::string& msg) {
  throw Error(Error::Kind::InvalidArgument, std::string(op) + ": " + msg);
}

// Two (T, hidden) row buffers at a workspace's front and the float32 rest after them (`sizeFn`
// names the workspace's size in errors). Without a workspace the rows sit at `standIn`, sized and
// checked but never dereferenced, and there is no rest.
struct RowBuffers {
  TensorView first, second, rest;
  int64_t rowsBytes = 0;  // each buffer, aligned
};

RowBuffers rowBuffers(const char* op, const TensorView& ws, const TensorView& like, int64_t T, int64_t hidden,
                      uintptr_t standIn, const char* sizeFn) {
  RowBuffers r;
  r.rowsBytes = alignUp(T * hidden * dtypeBytes(like.dtype));
  char* base = static_cast<char*>(ws.data);
  auto rowsAt = [&](int64_t byteOffset) {
    void* at = base ? base + byteOffset : reinterpret_cast<void*>(standIn + byteOffset);
    return TensorView::contiguous(at, like.dtype, {T, hidden}, DeviceKind::CUDA, like.deviceId);
  };
  r.first = rowsAt(0);
  r.second = rowsAt(r.rowsBytes);
  if (base) {
    const int64_t floats = ws.numel() - 2 * r.rowsBytes / 4;
    if (floats < 0)
      fail(op, "workspace has " + std::to_string(ws.numel()) + " float32 elements, expected at least " +
                   std::to_string(2 * r.rowsBytes / 4) + " for the two row buffers and the rest (" + sizeFn + "())");
    r.rest = TensorView::contiguous(base + 2 * r.rowsBytes, DType::F32, {floats}, DeviceKind::CUDA, ws.deviceId);
  }
  return r;
}

// Under sequence parallelism: the gathered rows (T, hidden) and the local layer's partial output
// (T, hidden) at the workspace's front, the local layer's own workspace after them.
struct SpPlan {
  Mamba2LayerArgs inner;
  int64_t rowsBytes = 0;  // each of the two (T, hidden) buffers, aligned
};

SpPlan spPlan(const char* op, const Mamba2Dims& full, const Mamba2LayerArgs& a, int ranks) {
  for (auto [name, t] : {std::pair{"hidden", &a.hidden}, std::pair{"out", &a.out}})
    if (!t->defined() || t->ndim != 2 || t->shape[1] != full.hidden || t->strides[1] != 1 ||
        t->strides[0] != full.hidden)
      fail(op, std::string(name) + " is " + (t->defined() ? t->shapeString() : "undefined") +
                   ", expected this rank's rows as a contiguous (T/t, " + std::to_string(full.hidden) + ") tensor");
  if (a.out.shape[0] != a.hidden.shape[0] || a.out.dtype != a.hidden.dtype)
    fail(op, "out is " + a.out.shapeString() + ", expected hidden's shape " + a.hidden.shapeString() + " and dtype");
  SpPlan p;
  const RowBuffers r = rowBuffers(op, a.workspace, a.hidden, a.hidden.shape[0] * ranks, full.hidden, uintptr_t{1} << 46,
                                  "mamba2_tp_layer_workspace_size");
  p.rowsBytes = r.rowsBytes;
  p.inner = a;
  p.inner.hidden = r.first;
  p.inner.out = r.second;
  p.inner.workspace = r.rest;
  return p;
}

void run(const char* op, const Mamba2Dims& full, const Mamba2LayerWeights& w, const Mamba2LayerState& s,
         const Mamba2LayerArgs& a, Communicator& comm, bool sp, bool prefill, Stream stream) {
  const Mamba2Dims local = mamba2_tp_shard_dims(full, comm.size());
  auto layer = [&](const Mamba2LayerArgs& args) {
    if (prefill)
      mamba2_layer_prefill(local, w, s, args, stream);
    else
      mamba2_layer_decode(local, w, s, args, stream);
  };
  if (!sp && prefill) {
    detail::mamba2TpLayerPrefill(local, w, s, a, comm, stream);
    return;
  }
  if (!sp) {
    layer(a);
    comm.allReduceSum(a.out, stream);
    return;
  }
  const SpPlan p = spPlan(op, full, a, comm.size());
  comm.allGather(a.hidden, p.inner.hidden, stream);
  layer(p.inner);
  comm.reduceScatterSum(p.inner.out, a.out, stream);
}

// The backward under sequence parallelism: this rank's rows of dout all-gathered and the local
// backward's dhidden (T, hidden) at the workspace's front, the local backward's workspace after
// them; `forward` as the prefill's spPlan carved it from the forward's workspace.
struct SpBackwardPlan {
  Mamba2LayerBackwardArgs inner;
  int64_t rowsBytes = 0;
};

SpBackwardPlan spBackwardPlan(const char* op, const Mamba2Dims& full, const Mamba2LayerBackwardArgs& a, int ranks) {
  const SpPlan f = spPlan(op, full, a.forward, ranks);
  SpBackwardPlan p;
  p.inner = a;
  p.inner.forward = f.inner;
  const RowBuffers r = rowBuffers(op, a.workspace, a.forward.hidden, f.inner.hidden.shape[0], full.hidden,
                                  uintptr_t{5} << 45, "mamba2_tp_layer_backward_workspace_size");
  p.rowsBytes = r.rowsBytes;
  p.inner.dout = r.first;
  p.inner.grads.dhidden = r.second;
  p.inner.workspace = r.rest;
  return p;
}

}  // namespace

Mamba2Dims mamba2_tp_shard_dims(const Mamba2Dims& full, int ranks) {
  return model::planMamba2Shard(full, 0, ranks).local;
}

int64_t mamba2_tp_layer_workspace_size(const Mamba2Dims& full, const Mamba2LayerWeights& w, const Mamba2LayerState& s,
                                       const Mamba2LayerArgs& a, bool prefill, const Communicator& comm, bool sp) {
  const Mamba2Dims local = mamba2_tp_shard_dims(full, comm.size());
  if (!sp)
    return mamba2_layer_workspace_size(local, w, s, a, prefill ? Mamba2LayerMode::Prefill : Mamba2LayerMode::Decode);
  Mamba2LayerArgs sized = a;
  sized.workspace = {};
  const SpPlan p = spPlan("mamba2_tp_layer_workspace_size", full, sized, comm.size());
  return 2 * p.rowsBytes / 4 + mamba2_layer_workspace_size(
                                   local, w, s, p.inner, prefill ? Mamba2LayerMode::Prefill : Mamba2LayerMode::Decode);
}

void mamba2_tp_layer_prefill(const Mamba2Dims& full, const Mamba2LayerWeights& w, const Mamba2LayerState& s,
                             const Mamba2LayerArgs& a, Communicator& comm, bool sp, Stream stream) {
  run("mamba2_tp_layer_prefill", full, w, s, a, comm, sp, true, stream);
}

void mamba2_tp_layer_decode(const Mamba2Dims& full, const Mamba2LayerWeights& w, const Mamba2LayerState& s,
                            const Mamba2LayerArgs& a, Communicator& comm, bool sp, Stream stream) {
  run("mamba2_tp_layer_decode", full, w, s, a, comm, sp, false, stream);
}

}  // namespace ssmjit

namespace ssmjit {

int64_t mamba2_tp_layer_backward_workspace_size(const Mamba2Dims& full, const Mamba2LayerWeights& w,
                                                const Mamba2LayerState& s, const Mamba2LayerBackwardArgs& a,
                                                const Communicator& comm, bool sp) {
  const Mamba2Dims local = mamba2_tp_shard_dims(full, comm.size());
  if (!sp) return mamba2_layer_backward_workspace_size(local, w, s, a);
  Mamba2LayerBackwardArgs sized = a;
  sized.workspace = {};
  const SpBackwardPlan p = spBackwardPlan("mamba2_tp_layer_backward_workspace_size", full, sized, comm.size());
  return 2 * p.rowsBytes / 4 + mamba2_layer_backward_workspace_size(local, w, s, p.inner);
}

void mamba2_tp_layer_backward(const Mamba2Dims& full, const Mamba2LayerWeights& w, const Mamba2LayerState& s,
                              const Mamba2LayerBackwardArgs& a, Communicator& comm, bool sp, Stream stream) {
  const Mamba2Dims local = mamba2_tp_shard_dims(full, comm.size());
  if (!sp) {
    mamba2_layer_backward(local, w, s, a, stream);
    comm.allReduceSum(a.grads.dhidden, stream);
    return;
  }
  const SpBackwardPlan p = spBackwardPlan("mamba2_tp_layer_backward", full, a, comm.size());
  comm.allGather(a.dout, p.inner.dout, stream);
  mamba2_layer_backward(local, w, s, p.inner, stream);
  comm.reduceScatterSum(p.inner.grads.dhidden, a.grads.dhidden, stream);
}

}  // namespace ssmjit
