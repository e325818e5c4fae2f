// selective_state_update and selective_state_update_tokens: one implementation for both ops and
// both model forms. The arguments are checked once, here at the edge and before anything touches
// the GPU; then the call is bound to the generic kernel's signature (kernels_dsl/
// SelectiveStateUpdate.h) through KernelCall, specialised, and launched on the caller's stream.
//
// Hot path: a call that differs from one of this thread's last calls in its data pointers only
// (CallSlot) copies that call's argument values, sets the pointers and launches: no check, no
// binding. Otherwise the check, the binding and KernelCall's memo of recent bindings, one
// cuLaunchKernel: no allocation, no hashing of strings; the Specialization is built (and the
// loader's cache consulted) only when the bindings change. detail::ssuSpecialization
// (SelectiveStateUpdateSpec.h) runs the same binding step for drivers that name the op's kernel
// without launching it.
#include <cuda.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

#include "compiler/IntMath.h"
#include "compiler/Specialization.h"
#include "kernels_dsl/ssu/SelectiveStateUpdate.h"
#include "runtime/DeviceStatus.h"
#include "runtime/Driver.h"
#include "runtime/LoadedKernel.h"
#include "runtime/OpSpecializations.h"
#include "runtime/ops/ArgCheck.h"
#include "runtime/ops/HeadBinding.h"
#include "runtime/ops/KernelCall.h"
#include "runtime/ops/SelectiveStateUpdateCheck.h"
#include "runtime/ops/SelectiveStateUpdateSpec.h"
#include "ssmjit/error.h"
#include "ssmjit/ops.h"

namespace ssmjit {
namespace detail {
namespace {

// The check (the Checker and its helpers are in ArgCheck.h).

constexpr int64_t kMaxGrid = 65535;  // gridDim.y (heads) and gridDim.z (batch)

}  // namespace

SsuDims checkSsuArgs(const SelectiveStateUpdateArgs& a, bool tokens, DeviceKind device, const char* op) {
  Checker c(op, device);
  SsuDims d;
  d.tokens = tokens;

  c.required("state", a.state);
  if (a.state.ndim != 3 && a.state.ndim != 4)
    c.fail("state has rank " + std::to_string(a.state.ndim) + " (shape " + a.state.shapeString() +
           "), expected rank 3 (slots, dim, dstate) for Mamba-1 or 4 (slots, nheads, headdim, "
           "dstate) for Mamba-2");
  d.mamba2 = a.state.ndim == 4;
  c.setForm(d.mamba2 ? " (Mamba-2 form: state has rank 4)" : " (Mamba-1 form: state has rank 3)");
  c.setDeviceId(a.state.deviceId);
  d.S = a.state.shape[0];
  if (d.mamba2) {
    d.H = a.state.shape[1];
    d.P = a.state.shape[2];
    d.N = a.state.shape[3];
  } else {
    d.P = a.state.shape[1];
    d.N = a.state.shape[2];
  }
  if (d.H < 1 || d.P < 1 || d.N < 1)
    c.fail("state has shape " + a.state.shapeString() + ", expected every dim but slots (dim 0) >= 1");
  if (d.H > kMaxGrid)
    c.fail("state has nheads = " + std::to_string(d.H) + " (dim 1), expected at most " + std::to_string(kMaxGrid) +
           " (one grid y row per head)");

  // x fixes batch and the number of tokens; every other tensor is checked against them.
  const char* pName = d.mamba2 ? "headdim" : "dim";
  c.required("x", a.x);
  {
    Dim e[4];
    int n = 0;
    e[n++] = {-1, "batch"};
    if (tokens) e[n++] = {-1, "tokens"};
    if (d.mamba2) e[n++] = {-1, "nheads"};
    e[n++] = {-1, pName};
    c.rank("x", a.x, e, n);
  }
  d.batch = a.x.shape[0];
  if (tokens) {
    d.L = a.x.shape[1];
    if (d.L < 1 || d.L > kMaxTokens)
      c.fail("x has " + std::to_string(d.L) + " tokens (dim 1 of shape " + a.x.shapeString() +
             "), expected 1 <= L <= " + std::to_string(kMaxTokens) + " (kMaxTokens)");
  }
  if (d.batch > kMaxGrid)
    c.fail("x has batch = " + std::to_string(d.batch) + " (dim 0 of shape " + a.x.shapeString() +
           "), expected at most " + std::to_string(kMaxGrid) + " (one grid z row per sequence)");

  // The groups come from B: ngroups must divide nheads.
  c.required("B", a.B);
  if (d.mamba2) {
    Dim e[4];
    int n = 0;
    e[n++] = {d.batch, "batch"};
    if (tokens) e[n++] = {d.L, "tokens"};
    e[n++] = {-1, "ngroups"};
    e[n++] = {d.N, "dstate"};
    c.rank("B", a.B, e, n);
    d.G = a.B.shape[n - 2];
    if (d.G < 1 || d.H % d.G != 0)
      c.fail("B has shape " + a.B.shapeString() + " [" + dimNames(e, n) + "]: dim " + std::to_string(n - 2) +
             " (ngroups) is " + std::to_string(d.G) + ", expected a divisor of nheads H = " + std::to_string(d.H) +
             " (state dim 1)");
  }

  // Expected shapes, built front to back: [batch][tokens] then the per-form trailing dims.
  auto lead = [&](Dim* e, int& n) {
    e[n++] = {d.batch, "batch"};
    if (tokens) e[n++] = {d.L, "tokens"};
  };
  Dim eX[4], eDt[3], eBC[4], eA[2], eHead[1], eIdx[1], eDst[2];
  int nX = 0, nDt = 0, nBC = 0, nA = 0, nHead = 0, nIdx = 0, nDst = 0;
  lead(eX, nX);
  lead(eDt, nDt);
  lead(eBC, nBC);
  lead(eDst, nDst);
  eIdx[nIdx++] = {d.batch, "batch"};
  if (d.mamba2) {
    eX[nX++] = {d.H, "nheads"};
    eX[nX++] = {d.P, "headdim"};
    eDt[nDt++] = {d.H, "nheads"};
    eBC[nBC++] = {d.G, "ngroups"};
    eBC[nBC++] = {d.N, "dstate"};
    eA[nA++] = {d.H, "nheads"};
    eHead[nHead++] = {d.H, "nheads"};
  } else {
    eX[nX++] = {d.P, "dim"};
    eDt[nDt++] = {d.P, "dim"};
    eBC[nBC++] = {d.N, "dstate"};
    eA[nA++] = {d.P, "dim"};
    eA[nA++] = {d.N, "dstate"};
    eHead[nHead++] = {d.P, "dim"};
  }
  Dim eState[4];
  int nState = 0;
  eState[nState++] = {d.S, "slots"};
  if (d.mamba2) eState[nState++] = {d.H, "nheads"};
  eState[nState++] = {d.P, pName};
  eState[nState++] = {d.N, "dstate"};

  c.tensor("state", a.state, eState, nState, kFloat16Or32, false);
  c.tensor("x", a.x, eX, nX, kFloat16Or32, false);
  c.required("dt", a.dt);
  c.tensor("dt", a.dt, eDt, nDt, kFloat16Or32, false);
  c.required("A", a.A);
  c.tensor("A", a.A, eA, nA, kF32Only, true);
  c.tensor("B", a.B, eBC, nBC, kFloat16Or32, false);
  c.required("C", a.C);
  c.tensor("C", a.C, eBC, nBC, kFloat16Or32, false);
  c.optional("D", a.D, eHead, nHead, kF32Only, true);
  c.optional("z", a.z, eX, nX, kFloat16Or32, false);
  c.optional("dt_bias", a.dt_bias, eHead, nHead, kF32Only, true);
  c.required("out", a.out);
  c.tensor("out", a.out, eX, nX, kFloat16Or32, false);
  c.optional("state_batch_indices", a.state_batch_indices, eIdx, nIdx, kIndexTypes, false);

  if (!a.state_batch_indices.defined() && d.S != d.batch)
    c.fail("state has " + std::to_string(d.S) + " slots (dim 0 of shape " + a.state.shapeString() +
           "), expected batch = " + std::to_string(d.batch) +
           " when state_batch_indices is not given (sequence b uses slot b)");

  const int sw = static_cast<int>(a.state_write);
  if (sw < 0 || sw > 2)
    c.fail("state_write is " + std::to_string(sw) + ", expected Final (0), None (1) or PerToken (2)");
  if (a.state_write == StateWrite::PerToken) {
    if (!a.dst_state_indices.defined())
      c.fail("dst_state_indices is required with state_write = PerToken, got none (expected " + dimSizes(eDst, nDst) +
             " [" + dimNames(eDst, nDst) + "], int32 or int64)");
    c.tensor("dst_state_indices", a.dst_state_indices, eDst, nDst, kIndexTypes, false);
  } else if (a.dst_state_indices.defined()) {
    c.fail(std::string("dst_state_indices is given (shape ") + a.dst_state_indices.shapeString() +
           "), expected none: state_write is " + (a.state_write == StateWrite::Final ? "Final" : "None") +
           " and only PerToken writes to destination slots");
  }

  if (std::isnan(a.dt_min) || std::isnan(a.dt_max))
    c.fail("dt_min = " + std::to_string(a.dt_min) + ", dt_max = " + std::to_string(a.dt_max) +
           ": expected numbers (dt_max <= dt_min disables the clamp)");
  return d;
}

}  // namespace detail

// -----------------------------------------------------------------------------------------------
// The launch.
namespace {

using detail::KernelCall;
using kernels::kSsu;

// The tensors of a call, in the signature's order (the status record `err` comes last).
constexpr int kSsuTensors = 12;
constexpr dsl::TensorId kTensorIds[kSsuTensors] = {
    kSsu.tensor("state"),   kSsu.tensor("x"),   kSsu.tensor("dt"),        kSsu.tensor("A"),
    kSsu.tensor("B"),       kSsu.tensor("C"),   kSsu.tensor("D"),         kSsu.tensor("z"),
    kSsu.tensor("dt_bias"), kSsu.tensor("out"), kSsu.tensor("state_idx"), kSsu.tensor("dst_idx")};
static_assert(kSsu.tensors.n == kSsuTensors + 1 &&
                  std::tuple_size_v<decltype(opspec::ssuViews(std::declval<SelectiveStateUpdateArgs&>()))> ==
                      kSsuTensors,
              "ssuViews lists every tensor but err");
constexpr bool isData(int i) { return kSsu.tensors[kTensorIds[i].tensor].role == dsl::PtrRole::Data; }
// A kernel axis's letter: its name's first (SelectiveStateUpdate.h; "slot" is s).
constexpr char axisLetter(dsl::TensorId t, int j) { return kSsu.tensors[t.tensor].axes[j][0]; }
// The size of the axis a letter names.
int64_t axisSize(char ax, const detail::SsuDims& d) {
  switch (ax) {
    case 'b':
      return d.batch;
    case 's':
      return d.S;
    case 'l':
      return d.L;
    case 'h':
      return d.H;
    case 'p':
      return d.P;
    case 'n':
      return d.N;
    case 'g':
      return d.G;
  }
  throw Error(Error::Kind::Internal, std::string("selective_state_update: unknown axis letter '") + ax + "'");
}

// The view's axis for each kernel axis of tensor `t`, matched by letter. A kernel axis the view
// lacks takes stride 0, and so does a bound axis of size 1: it is never stepped along, whatever
// the view says, so equal calls get equal specialisations (e.g. G = 1, or L = 1 in the tokens op).
// Batch and slot strides are taken as given.
detail::Axes axesOf(dsl::TensorId t, const TensorView& v, const char* viewAxes, const detail::SsuDims& d) {
  detail::Axes m;
  m.fill(detail::kNoAxis);
  if (!v.defined()) return m;
  for (int j = 0; j < t.rank; ++j) {
    const char ax = axisLetter(t, j);
    if (ax != 'b' && ax != 's' && axisSize(ax, d) == 1) continue;
    for (int i = 0; viewAxes[i]; ++i)
      if (viewAxes[i] == ax) m[j] = i;
  }
  return m;
}

// Whether 32-bit indexing covers one tensor as bound: every stride, and the largest element offset
// a program can form. Sizes of the tiled axes are rounded up to their tile (tiles are powers of
// two with BLOCK_P <= nextPow2(P) and BLOCK_N = max(4, nextPow2(N))), since masked lanes still
// compute their offsets.
bool offsetsFit32(dsl::TensorId t, KernelCall& c, const detail::SsuDims& d) {
  __int128 reach = 0;
  for (int j = 0; j < t.rank; ++j) {
    const char ax = axisLetter(t, j);
    const int64_t size = ax == 'p' ? nextPow2(d.P) : ax == 'n' ? std::max<int64_t>(4, nextPow2(d.N)) : axisSize(ax, d);
    const int64_t stride = c.value(t.firstStride + j).i64;
    if (stride > INT32_MAX) return false;  // passed as an int32 parameter with 32-bit indexing
    if (size > 0) reach += static_cast<__int128>(size - 1) * stride;
  }
  return reach <= INT32_MAX;
}

// Binds a checked call: shared by the launch and by ssuSpecialization(); inlined so that the
// launch pays no call for it. An absent tensor is never read: it binds its class's dtype and zero
// strides, and the specialisation depends only on its flag.
[[gnu::always_inline]] inline void bind(KernelCall& c, const SelectiveStateUpdateArgs& a, bool tokens,
                                        const detail::SsuDims& d, void* err) {
  constexpr const dsl::Signature& S = kSsu;
  // Each tensor's axes by letter, per form (the kernel's are in SelectiveStateUpdate.h).
  const bool m2 = d.mamba2;
  const char* xAxes = m2 ? (tokens ? "blhp" : "bhp") : (tokens ? "blp" : "bp");
  const char* dtAxes = m2 ? (tokens ? "blh" : "bh") : xAxes;  // Mamba-2: no p axis, s_dt_p = 0
  const char* bcAxes = m2 ? (tokens ? "blgn" : "bgn") : (tokens ? "bln" : "bn");
  const char* headAxes = m2 ? "h" : "p";  // D, dt_bias (and A for Mamba-2)
  const char* viewAxes[kSsuTensors] = {
      m2 ? "shpn" : "spn", xAxes, dtAxes, m2 ? "h" : "pn", bcAxes, bcAxes, headAxes, xAxes, headAxes, xAxes, "b",
      tokens ? "bl" : "b"};
  const auto ts = opspec::ssuViews(a);
  bool fits = true;
  for (int i = 0; i < kSsuTensors; ++i) {
    c.tensor(kTensorIds[i], *ts[i], axesOf(kTensorIds[i], *ts[i], viewAxes[i], d));
    fits = fits && offsetsFit32(kTensorIds[i], c, d);
  }
  // The device status record is int64[4] by contract (DeviceStatus.h).
  c.pointer(S.tensor("err"), err, DType::I64);
  detail::bindHeads<S>(c, d, {a.D, a.dt_bias, a.z, a.state_batch_indices, a.dt_softplus, a.dt_min, a.dt_max});
  c.flag(S.flag("per_head"), m2);
  c.mode(S.mode("state_write"), static_cast<int64_t>(a.state_write));
  c.meta("meta:index_bits", fits ? 32 : 64);
}

// Everything of a TensorView but its data pointer, compared as bytes: no padding in it.
constexpr size_t kViewMetaOffset = offsetof(TensorView, dtype);
static_assert(kViewMetaOffset == sizeof(void*) && sizeof(TensorView) == sizeof(void*) + sizeof(DType) + sizeof(int) +
                                                                            2 * TensorView::kMaxDims * sizeof(int64_t) +
                                                                            sizeof(DeviceKind) + sizeof(int),
              "TensorView's metadata is compared with memcmp: it must have no padding");

// The last calls of this thread, as checked and bound: a call that differs from one of them in
// its data pointers only (same shapes, strides, dtypes, devices, flags and scalars; the same
// tensors absent; data pointers of the same alignment classes, index arrays aligned to their
// element) passes the same check and binds the same kernel, so it copies the slot's argument
// values, sets its pointers and launches. The serving hot path: a step's layers call with equal
// shapes on other buffers. Anything else takes the full path and fills a slot.
struct CallSlot {
  CUcontext ctx = nullptr;  // null: empty
  bool tokens = false;
  SelectiveStateUpdateArgs meta;    // the call's arguments (data pointers are not compared)
  int64_t align[kSsuTensors] = {};  // alignment class of each data pointer
  ArgValue v[kSsu.count()] = {};
  const LoadedKernel* kernel = nullptr;
  unsigned grid[3] = {};
};
constexpr int kCallSlots = 4;

bool sameButPointers(const CallSlot& m, const SelectiveStateUpdateArgs& a, bool tokens, CUcontext ctx) {
  if (m.ctx != ctx || m.tokens != tokens || m.meta.dt_softplus != a.dt_softplus ||
      m.meta.state_write != a.state_write || std::memcmp(&m.meta.dt_min, &a.dt_min, sizeof(float)) != 0 ||
      std::memcmp(&m.meta.dt_max, &a.dt_max, sizeof(float)) != 0)
    return false;
  const auto mine = opspec::ssuViews(m.meta), theirs = opspec::ssuViews(a);
  for (int i = 0; i < kSsuTensors; ++i) {
    const TensorView &x = *mine[i], &y = *theirs[i];
    if (x.defined() != y.defined() ||
        std::memcmp(reinterpret_cast<const char*>(&x) + kViewMetaOffset,
                    reinterpret_cast<const char*>(&y) + kViewMetaOffset, sizeof(TensorView) - kViewMetaOffset) != 0)
      return false;
    if (isData(i)) {
      if (detail::alignClass(y.data) != m.align[i]) return false;
    } else if (reinterpret_cast<uintptr_t>(y.data) % static_cast<uintptr_t>(dtypeBytes(y.dtype)) != 0) {
      return false;  // the full check names the misaligned index array
    }
  }
  return true;
}

void launchSsu(const SelectiveStateUpdateArgs& a, bool tokens, Stream stream) {
  thread_local CallSlot calls[kCallSlots];
  thread_local unsigned callNext = 0;
  // Slots fill only after a launch, so an empty table never touches the driver before the check
  // (bad arguments are reported as such where there is no GPU).
  CUcontext ctx = callNext ? driver::ensureContext() : nullptr;
  for (CallSlot& c : calls) {
    if (!c.ctx || !sameButPointers(c, a, tokens, ctx)) continue;
    ArgValue v[kSsu.count()];
    std::memcpy(v, c.v, sizeof v);
    const auto ts = opspec::ssuViews(a);
    for (int i = 0; i < kSsuTensors; ++i) v[kTensorIds[i].pointer].ptr = ts[i]->data;
    launchKernel(*c.kernel, v, c.grid, static_cast<CUstream>(stream));
    return;
  }

  const char* op = tokens ? "selective_state_update_tokens" : "selective_state_update";
  const detail::SsuDims d = detail::checkSsuArgs(a, tokens, DeviceKind::CUDA, op);
  if (d.batch == 0) return;  // nothing to compute; the GPU is not touched

  KernelCall call(kSsu);
  bind(call, a, tokens, d, deviceStatusRecord());
  const detail::SsuGrid g = detail::ssuGrid(d, call.metaValue("meta:BLOCK_P"));
  const unsigned grid[3] = {static_cast<unsigned>(g.x), static_cast<unsigned>(g.y), static_cast<unsigned>(g.z)};
  call.launch(grid, static_cast<CUstream>(stream));

  CallSlot& c = calls[callNext++ % kCallSlots];
  c.ctx = driver::ensureContext();
  c.tokens = tokens;
  c.meta = a;
  const auto ts = opspec::ssuViews(a);
  for (int i = 0; i < kSsuTensors; ++i) c.align[i] = isData(i) ? detail::alignClass(ts[i]->data) : 0;
  std::memcpy(c.v, call.values(), sizeof c.v);
  c.kernel = &call.kernel();
  std::memcpy(c.grid, grid, sizeof grid);
}

}  // namespace

void selective_state_update(const SelectiveStateUpdateArgs& args, Stream stream) {
  launchSsu(args, /*tokens=*/false, stream);
}

void selective_state_update_tokens(const SelectiveStateUpdateArgs& args, Stream stream) {
  launchSsu(args, /*tokens=*/true, stream);
}

Specialization detail::ssuSpecialization(const SelectiveStateUpdateArgs& args, bool tokens, const std::string& arch) {
  const char* op = tokens ? "selective_state_update_tokens" : "selective_state_update";
  const detail::SsuDims d = detail::checkSsuArgs(args, tokens, args.state.device, op);
  KernelCall call(kSsu);
  bind(call, args, tokens, d, nullptr);
  return call.specialization(arch);
}

}  // namespace ssmjit
