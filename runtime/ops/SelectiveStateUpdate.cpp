// selective_state_update and selective_state_update_tokens: one implementation for both ops and
// both model forms. The arguments are checked once, here at the edge and before anything touches
// the GPU; then the call is mapped onto the generic kernel's layout (see
// kernels_dsl/SelectiveStateUpdate.h), specialised, and launched on the caller's stream.
//
// Hot path: a call that differs from one of this thread's last calls in its data pointers only
// (CallSlot) copies that call's argument values, sets the pointers and launches: no check, no
// binding. Otherwise the check, the ArgValue array, the list of bindings compared with a
// per-thread memo of recent bindings, one cuLaunchKernel. No allocation, no hashing of strings;
// the Specialization is built (and the loader's cache consulted) only when the bindings change.
// detail::ssuSpecialization (SelectiveStateUpdateSpec.h) runs the same binding step for drivers
// that name the op's kernel without launching it.
#include <cuda.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

#include "compiler/IntMath.h"
#include "compiler/Specialization.h"
#include "kernels_dsl/Registry.h"
#include "kernels_dsl/SelectiveStateUpdate.h"
#include "runtime/DeviceStatus.h"
#include "runtime/Driver.h"
#include "runtime/LoadedKernel.h"
#include "runtime/ops/ArgCheck.h"
#include "runtime/ops/KernelCall.h"  // detail::alignClass, detail::divClass
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

SsuDims checkSsuArgs(const SelectiveStateUpdateArgs& a, bool tokens, DeviceKind device,
                     const char* op) {
  Checker c(op, device);
  SsuDims d;
  d.tokens = tokens;

  c.required("state", a.state);
  if (a.state.ndim != 3 && a.state.ndim != 4)
    c.fail("state has rank " + std::to_string(a.state.ndim) + " (shape " +
           a.state.shapeString() +
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
    c.fail("state has nheads = " + std::to_string(d.H) + " (dim 1), expected at most " +
           std::to_string(kMaxGrid) + " (one grid y row per head)");

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
      c.fail("B has shape " + a.B.shapeString() + " [" + dimNames(e, n) + "]: dim " +
             std::to_string(n - 2) + " (ngroups) is " + std::to_string(d.G) +
             ", expected a divisor of nheads H = " + std::to_string(d.H) + " (state dim 1)");
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
    c.fail("state has " + std::to_string(d.S) + " slots (dim 0 of shape " +
           a.state.shapeString() + "), expected batch = " + std::to_string(d.batch) +
           " when state_batch_indices is not given (sequence b uses slot b)");

  const int sw = static_cast<int>(a.state_write);
  if (sw < 0 || sw > 2)
    c.fail("state_write is " + std::to_string(sw) + ", expected Final (0), None (1) or PerToken (2)");
  if (a.state_write == StateWrite::PerToken) {
    if (!a.dst_state_indices.defined())
      c.fail("dst_state_indices is required with state_write = PerToken, got none (expected " +
             dimSizes(eDst, nDst) + " [" + dimNames(eDst, nDst) + "], int32 or int64)");
    c.tensor("dst_state_indices", a.dst_state_indices, eDst, nDst, kIndexTypes, false);
  } else if (a.dst_state_indices.defined()) {
    c.fail(std::string("dst_state_indices is given (shape ") + a.dst_state_indices.shapeString() +
           "), expected none: state_write is " +
           (a.state_write == StateWrite::Final ? "Final" : "None") +
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

// Argument indices in kSsuArgNames order; the static_asserts below keep the two lists in step.
#define SSMJIT_SSU_ARGS(X)                                                                          \
  X(state) X(x) X(dt) X(A) X(B) X(C) X(D) X(z) X(dt_bias) X(out) X(state_idx) X(dst_idx) X(err)     \
  X(batch) X(nslots) X(H) X(P) X(N) X(G) X(L) X(dt_min) X(dt_max)                                   \
  X(s_state_slot) X(s_state_h) X(s_state_p) X(s_state_n)                                            \
  X(s_x_b) X(s_x_l) X(s_x_h) X(s_x_p)                                                               \
  X(s_dt_b) X(s_dt_l) X(s_dt_h) X(s_dt_p)                                                           \
  X(s_A_h) X(s_A_p) X(s_A_n)                                                                        \
  X(s_B_b) X(s_B_l) X(s_B_g) X(s_B_n)                                                               \
  X(s_C_b) X(s_C_l) X(s_C_g) X(s_C_n)                                                               \
  X(s_D_h) X(s_D_p)                                                                                 \
  X(s_z_b) X(s_z_l) X(s_z_h) X(s_z_p)                                                               \
  X(s_dtb_h) X(s_dtb_p)                                                                             \
  X(s_out_b) X(s_out_l) X(s_out_h) X(s_out_p)                                                       \
  X(s_idx_b) X(s_dst_b) X(s_dst_l)                                                                  \
  X(has_D) X(has_z) X(has_dt_bias) X(dt_softplus) X(has_clamp) X(has_state_idx) X(per_head)         \
  X(state_write)

enum Arg : int {
#define SSMJIT_X(n) a_##n,
  SSMJIT_SSU_ARGS(SSMJIT_X)
#undef SSMJIT_X
  a_count
};

constexpr bool sameName(const char* a, const char* b) {
  while (*a && *a == *b) ++a, ++b;
  return *a == *b;
}

static_assert(a_count == kernels::kSsuNumArgs, "Arg enum out of step with kSsuArgNames");
#define SSMJIT_X(n) \
  static_assert(sameName(kernels::kSsuArgNames[a_##n], #n), "Arg enum out of step: " #n);
SSMJIT_SSU_ARGS(SSMJIT_X)
#undef SSMJIT_X
#undef SSMJIT_SSU_ARGS

// Binding names, built once: "<arg>", "div:<arg>", "dtype:<arg>", "align:<arg>". A binding
// refers to its name by address, so two calls bind the same names iff the pointers are equal.
struct BindingNames {
  std::string plain[kernels::kSsuNumArgs], div[kernels::kSsuNumArgs],
      dtype[kernels::kSsuNumArgs], align[kernels::kSsuNumArgs];
  std::string indexBits = "meta:index_bits";
  BindingNames() {
    for (int i = 0; i < kernels::kSsuNumArgs; ++i) {
      plain[i] = kernels::kSsuArgNames[i];
      div[i] = "div:" + plain[i];
      dtype[i] = "dtype:" + plain[i];
      align[i] = "align:" + plain[i];
    }
  }
};

struct Binding {
  const std::string* name;
  int64_t value;
};
static_assert(sizeof(Binding) == sizeof(void*) + sizeof(int64_t), "Binding is compared with memcmp");
constexpr int kMaxBindings = 96;

// The last few calls of this thread: their bindings, context and loaded kernel. The
// specialisation (and so the kernel) is a function of the bindings and the context's arch, so an
// equal list means the same kernel, found without building the Specialization, hashing it or
// taking the loader's lock. Loaded kernels are never unloaded (LoadedKernel.h), so the pointers
// stay valid.
struct MemoSlot {
  CUcontext ctx = nullptr;
  const LoadedKernel* kernel = nullptr;
  int64_t blockP = 0;
  int count = 0;
  Binding bindings[kMaxBindings];
};
constexpr int kMemoSlots = 4;

// Kernel axes: b batch, l token, h head, p head dim (Mamba-1: channel), n state, g group,
// s slot. A tensor's axes are listed by letter; kernel axes it lacks get stride 0.
struct Layout {
  const char* kernelAxes;  // the kernel's axes for this argument, in stride-argument order
  int firstStride;         // Arg index of its first stride
};

void mapStrides(const TensorView& t, const char* tensorAxes, const Layout& lay,
                const detail::SsuDims& d, ArgValue* v) {
  for (int k = 0; lay.kernelAxes[k]; ++k) {
    const char ax = lay.kernelAxes[k];
    int64_t s = 0;
    if (t.defined())
      for (int i = 0; tensorAxes[i]; ++i)
        if (tensorAxes[i] == ax) s = t.strides[i];
    // A static axis of size 1 is never stepped along: its stride is 0 whatever the view says,
    // so equal calls get equal specialisations (e.g. G = 1, or L = 1 in the tokens op).
    int64_t size = 0;
    switch (ax) {
      case 'l': size = d.L; break;
      case 'h': size = d.H; break;
      case 'p': size = d.P; break;
      case 'n': size = d.N; break;
      case 'g': size = d.G; break;
      default: size = 0; break;  // b and s stay dynamic: their strides are taken as given
    }
    if (size == 1) s = 0;
    v[lay.firstStride + k].i64 = s;
  }
}

// Whether 32-bit indexing covers one argument: every stride, and the largest element offset a
// program can form. Sizes of the tiled axes are rounded up to their tile (tiles are powers of two
// with BLOCK_P <= nextPow2(P) and BLOCK_N = max(4, nextPow2(N))), since masked lanes still compute
// their offsets.
bool offsetsFit32(const Layout& lay, const detail::SsuDims& d, const ArgValue* v) {
  __int128 reach = 0;
  for (int k = 0; lay.kernelAxes[k]; ++k) {
    int64_t size = 1;
    switch (lay.kernelAxes[k]) {
      case 'b': size = d.batch; break;
      case 'l': size = d.L; break;
      case 'h': size = d.H; break;
      case 'p': size = nextPow2(d.P); break;
      case 'n': size = std::max<int64_t>(4, nextPow2(d.N)); break;
      case 'g': size = d.G; break;
      case 's': size = d.S; break;
    }
    const int64_t stride = v[lay.firstStride + k].i64;
    if (stride > INT32_MAX) return false;  // passed as an int32 parameter with 32-bit indexing
    if (size > 0) reach += static_cast<__int128>(size - 1) * stride;
  }
  return reach <= INT32_MAX;
}

// The kernel's layout of each argument.
constexpr Layout kState{"shpn", a_s_state_slot}, kX{"blhp", a_s_x_b}, kDt{"blhp", a_s_dt_b},
    kA{"hpn", a_s_A_h}, kB{"blgn", a_s_B_b}, kC{"blgn", a_s_C_b}, kD{"hp", a_s_D_h},
    kZ{"blhp", a_s_z_b}, kDtb{"hp", a_s_dtb_h}, kOut{"blhp", a_s_out_b}, kIdx{"b", a_s_idx_b},
    kDst{"bl", a_s_dst_b};

// The tensors of a call in kSsuArgNames order (a_state .. a_dst_idx).
constexpr int kSsuTensors = a_dst_idx - a_state + 1;
std::array<const TensorView*, kSsuTensors> tensorsOf(const SelectiveStateUpdateArgs& a) {
  return {&a.state, &a.x, &a.dt, &a.A, &a.B, &a.C, &a.D, &a.z, &a.dt_bias, &a.out, &a.state_batch_indices,
          &a.dst_state_indices};
}
static_assert(kSsuTensors == 12, "tensorsOf lists every tensor argument");

// The argument values of a checked call (all but the status record, set at launch) and its
// bindings: everything the specialisation depends on, in a fixed order. No allocation. Shared by
// the launch and by ssuSpecialization(); inlined so that the launch pays no call for it.
[[gnu::always_inline]] inline void bindSsu(const SelectiveStateUpdateArgs& a, bool tokens,
                                          const detail::SsuDims& d, ArgValue* v, Binding* bind,
                                          int& nb) {
  // ----- argument values, in kSsuArgNames order
  const bool hasIdx = a.state_batch_indices.defined();
  v[a_state].ptr = a.state.data;
  v[a_x].ptr = a.x.data;
  v[a_dt].ptr = a.dt.data;
  v[a_A].ptr = a.A.data;
  v[a_B].ptr = a.B.data;
  v[a_C].ptr = a.C.data;
  v[a_D].ptr = a.D.data;
  v[a_z].ptr = a.z.data;
  v[a_dt_bias].ptr = a.dt_bias.data;
  v[a_out].ptr = a.out.data;
  v[a_state_idx].ptr = a.state_batch_indices.data;
  v[a_dst_idx].ptr = a.dst_state_indices.data;
  v[a_batch].i64 = d.batch;
  v[a_nslots].i64 = d.S;
  v[a_H].i64 = d.H;
  v[a_P].i64 = d.P;
  v[a_N].i64 = d.N;
  v[a_G].i64 = d.G;
  v[a_L].i64 = d.L;
  const bool clamp = a.dt_max > a.dt_min;
  v[a_dt_min].f32 = a.dt_min;
  v[a_dt_max].f32 = a.dt_max;

  // Each tensor's axes by letter; the kernel's layouts are in SelectiveStateUpdate.h.
  const bool m2 = d.mamba2;
  const char* xAxes = m2 ? (tokens ? "blhp" : "bhp") : (tokens ? "blp" : "bp");
  const char* dtAxes = m2 ? (tokens ? "blh" : "bh") : xAxes;
  const char* bcAxes = m2 ? (tokens ? "blgn" : "bgn") : (tokens ? "bln" : "bn");
  const char* headAxes = m2 ? "h" : "p";  // D, dt_bias (and A for Mamba-2)
  mapStrides(a.state, m2 ? "shpn" : "spn", kState, d, v);
  mapStrides(a.x, xAxes, kX, d, v);
  mapStrides(a.dt, dtAxes, kDt, d, v);  // Mamba-2: no p axis, so s_dt_p = 0 (dt per head)
  mapStrides(a.A, m2 ? "h" : "pn", kA, d, v);
  mapStrides(a.B, bcAxes, kB, d, v);
  mapStrides(a.C, bcAxes, kC, d, v);
  mapStrides(a.D, headAxes, kD, d, v);
  mapStrides(a.z, xAxes, kZ, d, v);
  mapStrides(a.dt_bias, headAxes, kDtb, d, v);
  mapStrides(a.out, xAxes, kOut, d, v);
  mapStrides(a.state_batch_indices, "b", kIdx, d, v);
  mapStrides(a.dst_state_indices, tokens ? "bl" : "b", kDst, d, v);

  v[a_has_D].i64 = a.D.defined();
  v[a_has_z].i64 = a.z.defined();
  v[a_has_dt_bias].i64 = a.dt_bias.defined();
  v[a_dt_softplus].i64 = a.dt_softplus;
  v[a_has_clamp].i64 = clamp;
  v[a_has_state_idx].i64 = hasIdx;
  v[a_per_head].i64 = m2;
  v[a_state_write].i64 = static_cast<int64_t>(a.state_write);

  // ----- the bindings: everything the specialisation depends on, in a fixed order
  static const BindingNames names;
  nb = 0;
  auto set = [&](const std::string& name, int64_t value) { bind[nb++] = Binding{&name, value}; };
  for (int i : {a_H, a_P, a_N, a_G, a_L, a_has_D, a_has_z, a_has_dt_bias, a_dt_softplus,
                a_has_clamp, a_has_state_idx, a_per_head, a_state_write})
    set(names.plain[i], v[i].i64);
  // Storage dtypes; an absent tensor is never read, so it binds a fixed dtype and the
  // specialisation depends only on its flag.
  const auto ptrs = tensorsOf(a);
  for (int i = a_state; i <= a_dst_idx; ++i) {
    const TensorView& t = *ptrs[i - a_state];
    const DType dflt = i >= a_state_idx ? DType::I32 : DType::F32;
    set(names.dtype[i], static_cast<int64_t>(t.defined() ? t.dtype : dflt));
  }
  // The device status record is int64[4] by contract (DeviceStatus.h).
  set(names.dtype[a_err], static_cast<int64_t>(DType::I64));
  // Alignment classes of data pointers only: index arrays and the status record are metadata
  // whose addresses vary between calls; specialising on them would recompile mid-serving.
  for (int i = a_state; i <= a_out; ++i) set(names.align[i], detail::alignClass(v[i].ptr));
  // Strides: 0 and 1 bind (they change the code: broadcast, contiguous); others stay dynamic
  // with a divisibility class.
  for (int i = a_s_state_slot; i <= a_s_dst_l; ++i) {
    const int64_t s = v[i].i64;
    if (s == 0 || s == 1)
      set(names.plain[i], s);
    else
      set(names.div[i], detail::divClass(s));
  }
  bool fits = true;
  for (const Layout* l : {&kState, &kX, &kDt, &kA, &kB, &kC, &kD, &kZ, &kDtb, &kOut, &kIdx, &kDst})
    fits = fits && offsetsFit32(*l, d, v);
  set(names.indexBits, fits ? 32 : 64);
}

// The specialisation of a list of bindings on `arch`, completed (meta values chosen).
Specialization specializationOf(const Binding* bind, int nb, std::string arch) {
  Specialization spec;
  spec.kernel = kernels::kSsuKernel;
  spec.arch = std::move(arch);
  // Names are distinct by construction: append directly (set() would search for each).
  spec.values.reserve(static_cast<size_t>(nb) + 8);
  for (int i = 0; i < nb; ++i) spec.values.emplace_back(*bind[i].name, bind[i].value);
  dsl::completeSpecialization(spec);
  return spec;
}

// Everything of a TensorView but its data pointer, compared as bytes: no padding in it.
constexpr size_t kViewMetaOffset = offsetof(TensorView, dtype);
static_assert(kViewMetaOffset == sizeof(void*) &&
                  sizeof(TensorView) == sizeof(void*) + sizeof(DType) + sizeof(int) +
                                            2 * TensorView::kMaxDims * sizeof(int64_t) + sizeof(DeviceKind) + sizeof(int),
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
  SelectiveStateUpdateArgs meta;  // the call's arguments (data pointers are not compared)
  int64_t align[kSsuTensors] = {};  // alignment class of each data pointer
  ArgValue v[kernels::kSsuNumArgs] = {};
  const LoadedKernel* kernel = nullptr;
  unsigned grid[3] = {};
};
constexpr int kCallSlots = 4;

bool sameButPointers(const CallSlot& m, const SelectiveStateUpdateArgs& a, bool tokens, CUcontext ctx) {
  if (m.ctx != ctx || m.tokens != tokens || m.meta.dt_softplus != a.dt_softplus ||
      m.meta.state_write != a.state_write || std::memcmp(&m.meta.dt_min, &a.dt_min, sizeof(float)) != 0 ||
      std::memcmp(&m.meta.dt_max, &a.dt_max, sizeof(float)) != 0)
    return false;
  const auto mine = tensorsOf(m.meta), theirs = tensorsOf(a);
  for (int i = 0; i < kSsuTensors; ++i) {
    const TensorView &x = *mine[i], &y = *theirs[i];
    if (x.defined() != y.defined() ||
        std::memcmp(reinterpret_cast<const char*>(&x) + kViewMetaOffset,
                    reinterpret_cast<const char*>(&y) + kViewMetaOffset, sizeof(TensorView) - kViewMetaOffset) != 0)
      return false;
    if (a_state + i <= a_out) {
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
    ArgValue v[kernels::kSsuNumArgs];
    std::memcpy(v, c.v, sizeof v);
    const auto ts = tensorsOf(a);
    for (int i = 0; i < kSsuTensors; ++i) v[a_state + i].ptr = ts[i]->data;
    launchKernel(*c.kernel, v, c.grid, static_cast<CUstream>(stream));
    return;
  }

  const char* op = tokens ? "selective_state_update_tokens" : "selective_state_update";
  const detail::SsuDims d = detail::checkSsuArgs(a, tokens, DeviceKind::CUDA, op);
  if (d.batch == 0) return;  // nothing to compute; the GPU is not touched

  ArgValue v[kernels::kSsuNumArgs];
  Binding bind[kMaxBindings];
  int nb = 0;
  bindSsu(a, tokens, d, v, bind, nb);

  // ----- the kernel: a memo hit, or specialise, compile/load (cached) and remember
  ctx = driver::ensureContext();
  thread_local MemoSlot memo[kMemoSlots];
  thread_local unsigned memoNext = 0;
  const MemoSlot* hit = nullptr;
  for (const MemoSlot& m : memo) {
    if (m.kernel && m.ctx == ctx && m.count == nb &&
        std::memcmp(m.bindings, bind, sizeof(Binding) * static_cast<size_t>(nb)) == 0) {
      hit = &m;
      break;
    }
  }
  if (!hit) {
    const Specialization spec = specializationOf(bind, nb, driver::currentArch());
    static const ArgSchema schema{kernels::kSsuArgNames, kernels::kSsuNumArgs};
    const LoadedKernel& k = loadedKernel(spec, schema);
    MemoSlot& m = memo[memoNext++ % kMemoSlots];
    m.ctx = ctx;
    m.kernel = &k;
    m.blockP = spec.get("meta:BLOCK_P");
    m.count = nb;
    std::memcpy(m.bindings, bind, sizeof(Binding) * static_cast<size_t>(nb));
    hit = &m;
  }

  v[a_err].ptr = deviceStatusRecord();
  const detail::SsuGrid g = detail::ssuGrid(d, hit->blockP);
  const unsigned grid[3] = {static_cast<unsigned>(g.x), static_cast<unsigned>(g.y),
                            static_cast<unsigned>(g.z)};
  launchKernel(*hit->kernel, v, grid, static_cast<CUstream>(stream));

  CallSlot& c = calls[callNext++ % kCallSlots];
  c.ctx = ctx;
  c.tokens = tokens;
  c.meta = a;
  const auto ts = tensorsOf(a);
  for (int i = 0; i < kSsuTensors; ++i) c.align[i] = a_state + i <= a_out ? detail::alignClass(ts[i]->data) : 0;
  std::memcpy(c.v, v, sizeof v);
  c.kernel = hit->kernel;
  std::memcpy(c.grid, grid, sizeof grid);
}

}  // namespace

void selective_state_update(const SelectiveStateUpdateArgs& args, Stream stream) {
  launchSsu(args, /*tokens=*/false, stream);
}

void selective_state_update_tokens(const SelectiveStateUpdateArgs& args, Stream stream) {
  launchSsu(args, /*tokens=*/true, stream);
}

Specialization detail::ssuSpecialization(const SelectiveStateUpdateArgs& args, bool tokens,
                                         const std::string& arch) {
  const char* op = tokens ? "selective_state_update_tokens" : "selective_state_update";
  const detail::SsuDims d = detail::checkSsuArgs(args, tokens, args.state.device, op);
  ArgValue v[kernels::kSsuNumArgs];
  Binding bind[kMaxBindings];
  int nb = 0;
  bindSsu(args, tokens, d, v, bind, nb);
  return specializationOf(bind, nb, arch);
}

}  // namespace ssmjit
