// ssd: the Mamba-2 SSD chunked scan forward (ssmjit/ops.h). The arguments are checked here (a
// minimal check of shapes, dtypes and devices), then every SSD kernel (kernels_dsl/ssd/Ssd.h) is
// bound through the one signature they share and launched in order on the caller's stream:
// chunk_cumsum, bmm, chunk_state, state_passing, then chunk_scan (not without out: states only).
#include <cuda.h>

#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "kernels_dsl/Registry.h"
#include "kernels_dsl/ssd/Ssd.h"
#include "runtime/DeviceStatus.h"
#include "runtime/ops/ArgCheck.h"
#include "runtime/ops/KernelCall.h"
#include "runtime/ops/SelectiveScanCheck.h"
#include "runtime/ops/SsdSpec.h"
#include "ssmjit/error.h"
#include "ssmjit/ops.h"

namespace ssmjit {
namespace {

using detail::Axes;
using detail::Checker;
using detail::Dim;
using detail::KernelCall;
using detail::kNoAxis;

constexpr const char* kOp = "ssd";
std::string str(int64_t v) { return std::to_string(v); }

struct SsdDims {
  int64_t batch = 0, L = 0, H = 0, P = 0, G = 0, N = 0, nseq = 0, Q = 0;
  int64_t initSlots = 0, finalSlots = 0, blkSlots = 0, kmax = 0;
  bool packed = false;
};

// States (S, H, P, N) and their slot indices (nseq,); returns the slots.
int64_t checkStates(const Checker& c, const char* name, const TensorView& t, const char* idxName, const TensorView& idx,
                    const SsdDims& d) {
  if (idx.defined() && !t.defined())
    c.fail(std::string(idxName) + " is given (shape " + idx.shapeString() + "), expected none: " + name +
           " is not given");
  if (!t.defined()) return 0;
  Dim e[4] = {{-1, "slots"}, {d.H, "nheads"}, {d.P, "headdim"}, {d.N, "dstate"}};
  c.rank(name, t, e, 4);
  e[0].size = t.shape[0];
  c.tensor(name, t, e, 4, detail::kFloat16Or32, false);
  const Dim eIdx[1] = {{d.nseq, "nseq"}};
  c.optional(idxName, idx, eIdx, 1, detail::kIndexTypes, false);
  if (!idx.defined() && t.shape[0] < d.nseq)
    c.fail(std::string(name) + " has " + str(t.shape[0]) + " slots (shape " + t.shapeString() +
           "), expected at least nseq = " + str(d.nseq) + " (without " + idxName + ", sequence i uses slot i)");
  return t.shape[0];
}

SsdDims check(const SsdArgs& a, DeviceKind device) {
  Checker c(kOp, device);
  SsdDims d;
  c.required("x", a.x);
  Dim eX[4] = {{-1, "batch"}, {-1, "seqlen"}, {-1, "nheads"}, {-1, "headdim"}};
  c.rank("x", a.x, eX, 4);
  c.setDeviceId(a.x.deviceId, "x");
  d.batch = a.x.shape[0], d.L = a.x.shape[1], d.H = a.x.shape[2], d.P = a.x.shape[3];
  for (int k = 0; k < 4; ++k) eX[k].size = a.x.shape[k];
  c.tensor("x", a.x, eX, 4, detail::kFloat16Or32, false);
  if (d.P < 1 || d.P > kMaxSsdHeadDim)
    c.fail("x has headdim " + str(d.P) + " (shape " + a.x.shapeString() +
           "), expected 1 <= P <= " + str(kMaxSsdHeadDim));
  c.optional("z", a.z, eX, 4, detail::kFloat16Or32, false);
  c.optional("out", a.out, eX, 4, detail::kFloat16Or32, false);
  for (auto [name, t] : {std::pair<const char*, const TensorView*>{"x", &a.x}, {"z", &a.z}})
    if (a.out.defined() && t->defined() && t->data == a.out.data)
      c.fail(std::string("out has data pointer ") + detail::hexPtr(a.out.data) + ", the same as " + name +
             "'s, expected a separate tensor");
  const Dim eDt[3] = {eX[0], eX[1], eX[2]};
  c.required("dt", a.dt);
  c.tensor("dt", a.dt, eDt, 3, detail::kFloat16Or32, false);
  const Dim eH[1] = {{d.H, "nheads"}};
  c.required("A", a.A);
  c.tensor("A", a.A, eH, 1, detail::kF32Only, true);
  c.optional("dt_bias", a.dt_bias, eH, 1, detail::kF32Only, true);
  if (a.D.defined()) {
    const Dim eD[2] = {{d.H, "nheads"}, {d.P, "headdim"}};
    if (a.D.ndim != 1 && a.D.ndim != 2)
      c.fail("D has shape " + a.D.shapeString() + ", expected (nheads,) or (nheads, headdim)");
    c.tensor("D", a.D, eD, a.D.ndim, detail::kF32Only, true);
  }
  Dim eB[4] = {eX[0], eX[1], {-1, "ngroups"}, {-1, "dstate"}};
  c.required("B", a.B);
  c.rank("B", a.B, eB, 4);
  d.G = a.B.shape[2], d.N = a.B.shape[3];
  eB[2].size = d.G, eB[3].size = d.N;
  c.tensor("B", a.B, eB, 4, detail::kFloat16Or32, false);
  c.required("C", a.C);
  c.tensor("C", a.C, eB, 4, detail::kFloat16Or32, false);
  if (d.G < 1 || d.H % d.G != 0)
    c.fail("B has " + str(d.G) + " groups (dim 2 of shape " + a.B.shapeString() +
           "), expected G >= 1 dividing H = " + str(d.H));
  if (d.N < 1 || d.N > kMaxSsdState)
    c.fail("B has dstate " + str(d.N) + " (shape " + a.B.shapeString() + "), expected 1 <= N <= " + str(kMaxSsdState));
  if (a.chunk_size != 64 && a.chunk_size != 128 && a.chunk_size != 256)
    c.fail("chunk_size is " + str(a.chunk_size) + ", expected 64, 128 or 256");
  d.Q = a.chunk_size;
  d.packed = a.cu_seqlens.defined();
  d.nseq = d.batch;
  if (d.packed) {
    if (d.batch != 1)
      c.fail("cu_seqlens is given and x has batch " + str(d.batch) + ", expected batch 1 (one packed row)");
    if (a.cu_seqlens.ndim != 1 || a.cu_seqlens.shape[0] < 2)
      c.fail("cu_seqlens has shape " + a.cu_seqlens.shapeString() + ", expected (nseq + 1,) with nseq >= 1");
    const Dim eCu[1] = {{a.cu_seqlens.shape[0], "nseq + 1"}};
    c.tensor("cu_seqlens", a.cu_seqlens, eCu, 1, detail::kIndexTypes, false);
    d.nseq = a.cu_seqlens.shape[0] - 1;
  }
  d.initSlots = checkStates(c, "initial_states", a.initial_states, "initial_state_indices", a.initial_state_indices, d);
  d.finalSlots = checkStates(c, "final_states", a.final_states, "final_state_indices", a.final_state_indices, d);
  if (a.block_state_tokens < 0 || a.block_state_tokens % d.Q != 0)
    c.fail("block_state_tokens is " + str(a.block_state_tokens) + ", expected 0 or a multiple of chunk_size " +
           str(d.Q));
  if (a.block_state_tokens > 0) {
    c.required("block_states", a.block_states);
    c.required("block_state_indices", a.block_state_indices);
    Dim e[4] = {{-1, "slots"}, {d.H, "nheads"}, {d.P, "headdim"}, {d.N, "dstate"}};
    c.rank("block_states", a.block_states, e, 4);
    e[0].size = a.block_states.shape[0];
    c.tensor("block_states", a.block_states, e, 4, detail::kFloat16Or32, false);
    Dim eI[2] = {{d.nseq, "nseq"}, {-1, "kmax"}};
    c.rank("block_state_indices", a.block_state_indices, eI, 2);
    eI[1].size = a.block_state_indices.shape[1];
    c.tensor("block_state_indices", a.block_state_indices, eI, 2, detail::kIndexTypes, false);
    d.blkSlots = a.block_states.shape[0], d.kmax = eI[1].size;
    if (!d.packed && d.kmax < d.L / a.block_state_tokens)
      c.fail("block_state_indices has " + str(d.kmax) + " columns, expected at least " +
             str(d.L / a.block_state_tokens) + " (blocks of " + str(a.block_state_tokens) + " tokens in seqlen " +
             str(d.L) + ")");
  } else if (a.block_states.defined() || a.block_state_indices.defined()) {
    c.fail("block_states or block_state_indices is given with block_state_tokens 0, expected none");
  }
  const Dim eY[2] = {{d.nseq, "nseq"}, {d.H, "nheads"}};
  c.optional("sequence_decay", a.sequence_decay, eY, 2, detail::kF32Only, false);
  return d;
}

// The call's chunk slots and workspace (Ssd.h).
struct SsdPlan {
  kernels::SsdWorkspaceLayout ws;
  int64_t searchSteps = 0;
};
SsdPlan plan(const SsdDims& d) {
  SsdPlan p;
  const int64_t slots = d.packed ? d.nseq + d.L / d.Q : d.batch * ((d.L + d.Q - 1) / d.Q);
  p.ws = kernels::ssdWorkspaceLayout(slots, d.H, d.G, d.P, d.N, d.Q);
  while ((int64_t{1} << p.searchSteps) < d.nseq) ++p.searchSteps;
  if (d.packed) ++p.searchSteps;
  return p;
}

// The workspace holds the chunk table (int32 words) at its start: 16-byte alignment as any
// float32 tensor of the kernels.
void checkWorkspace(const SsdArgs& a, const SsdPlan& p) {
  detail::checkScanWorkspace(kOp, a.workspace, a.x, p.ws.total, "ssd_workspace_size",
                             "per-chunk dt, cumsums, states and C.B");
}

// Binds every argument of the SSD kernels' shared signature for kernel `sig`.
void bind(KernelCall& c, const dsl::Signature& S, const SsdArgs& a, const SsdDims& d, const SsdPlan& p, void* err) {
  const Axes rows{d.batch > 1 ? 0 : kNoAxis, 1, 2, 3};
  c.tensor(S.tensor("x"), a.x, rows);
  c.tensor(S.tensor("dt"), a.dt, rows);
  c.tensor(S.tensor("A"), a.A);
  c.tensor(S.tensor("B"), a.B, rows);
  c.tensor(S.tensor("C"), a.C, rows);
  c.tensor(S.tensor("Dv"), a.D, a.D.ndim == 2 ? detail::kSameAxes : Axes{0, kNoAxis});
  c.tensor(S.tensor("z"), a.z, rows);
  c.tensor(S.tensor("dtb"), a.dt_bias);
  c.tensor(S.tensor("out"), a.out, rows);
  c.tensor(S.tensor("init"), a.initial_states);
  c.tensor(S.tensor("final"), a.final_states);
  c.tensor(S.tensor("blk"), a.block_states);
  c.tensor(S.tensor("decay"), a.sequence_decay);
  c.tensor(S.tensor("ws"), a.workspace);
  c.pointer(S.tensor("chunks"), a.workspace.data, DType::I32);
  c.tensor(S.tensor("cu"), a.cu_seqlens);
  c.tensor(S.tensor("init_idx"), a.initial_state_indices);
  c.tensor(S.tensor("final_idx"), a.final_state_indices);
  c.tensor(S.tensor("blk_idx"), a.block_state_indices);
  c.pointer(S.tensor("err"), err, DType::I64);
  c.size(S.size("H"), d.H);
  c.size(S.size("P"), d.P);
  c.size(S.size("N"), d.N);
  c.size(S.size("hpg"), d.H / d.G);
  c.size(S.size("L"), d.L);
  c.size(S.size("nseq"), d.nseq);
  c.size(S.size("search_steps"), p.searchSteps);
  c.size(S.size("nslots_init"), d.initSlots);
  c.size(S.size("nslots_final"), d.finalSlots);
  c.size(S.size("nslots_blk"), d.blkSlots);
  c.size(S.size("blk_tokens"), a.block_state_tokens);
  c.size(S.size("kmax"), d.kmax);
  c.size(S.size("o_dt"), p.ws.oDt);
  c.size(S.size("o_cum"), p.ws.oCum);
  c.size(S.size("o_st"), p.ws.oSt);
  c.size(S.size("o_cb"), p.ws.oCb);
  const bool clamp = a.dt_max > a.dt_min;
  c.scalar(S.scalar("dt_min"), clamp ? a.dt_min : 0.0f);
  c.scalar(S.scalar("dt_max"), clamp ? a.dt_max : 0.0f);
  c.flag(S.flag("has_cu"), d.packed);
  c.flag(S.flag("has_D"), a.D.defined());
  c.flag(S.flag("has_z"), a.z.defined());
  c.flag(S.flag("has_dtb"), a.dt_bias.defined());
  c.flag(S.flag("softplus"), a.dt_softplus);
  c.flag(S.flag("has_clamp"), clamp);
  c.flag(S.flag("has_init"), a.initial_states.defined());
  c.flag(S.flag("has_init_idx"), a.initial_state_indices.defined());
  c.flag(S.flag("has_final"), a.final_states.defined());
  c.flag(S.flag("has_final_idx"), a.final_state_indices.defined());
  c.flag(S.flag("has_blk"), a.block_state_tokens > 0);
  c.flag(S.flag("has_decay"), a.sequence_decay.defined());
  c.meta("meta:chunk", d.Q);
  const bool wide =
      !detail::fits32({&a.x, &a.dt, &a.z, &a.out, &a.B, &a.C, &a.initial_states, &a.final_states, &a.block_states}) ||
      p.ws.total >= (int64_t{1} << 31);
  c.meta("meta:index_bits", wide ? 64 : 32);
}

// Every launch of the call in order, bound, with its grid.
template <class F>
void forEachLaunch(const SsdArgs& a, const SsdDims& d, const SsdPlan& p, void* err, F&& f) {
  const int64_t S = p.ws.slots, nb = d.Q / kernels::kSsdTokenBlock;
  auto cdivU = [](int64_t x, int64_t y) { return static_cast<unsigned>((x + y - 1) / y); };
  {
    KernelCall c(kernels::kSsdChunkCumsum);
    bind(c, kernels::kSsdChunkCumsum, a, d, p, err);
    f(c, [&](KernelCall& k) {
      return std::array<unsigned, 3>{unsigned(S), cdivU(d.H, k.metaValue("meta:BLOCK_H")), 1};
    });
  }
  if (a.out.defined()) {
    KernelCall c(kernels::kSsdBmm);
    bind(c, kernels::kSsdBmm, a, d, p, err);
    f(c, [&](KernelCall&) { return std::array<unsigned, 3>{unsigned(S), unsigned(d.G), unsigned(nb * nb)}; });
  }
  {
    KernelCall c(kernels::kSsdChunkState);
    bind(c, kernels::kSsdChunkState, a, d, p, err);
    f(c, [&](KernelCall& k) {
      return std::array<unsigned, 3>{unsigned(S), unsigned(d.H),
                                     cdivU(d.P, k.metaValue("meta:BLOCK_P")) * cdivU(d.N, k.metaValue("meta:BLOCK_N"))};
    });
  }
  {
    KernelCall c(kernels::kSsdStatePassing);
    bind(c, kernels::kSsdStatePassing, a, d, p, err);
    f(c, [&](KernelCall& k) {
      return std::array<unsigned, 3>{cdivU(d.P * d.N, k.metaValue("meta:BLOCK")), unsigned(d.H), unsigned(d.nseq)};
    });
  }
  if (a.out.defined()) {
    KernelCall c(kernels::kSsdChunkScan);
    bind(c, kernels::kSsdChunkScan, a, d, p, err);
    f(c, [&](KernelCall& k) {
      return std::array<unsigned, 3>{unsigned(S), unsigned(d.H),
                                     unsigned(nb) * cdivU(d.P, k.metaValue("meta:BLOCK_P"))};
    });
  }
}

}  // namespace

int64_t ssd_workspace_size(const SsdArgs& a) { return plan(check(a, a.x.device)).ws.total; }

void ssd(const SsdArgs& a, Stream stream) {
  const SsdDims d = check(a, DeviceKind::CUDA);
  const SsdPlan p = plan(d);
  checkWorkspace(a, p);
  if (d.L == 0 || d.H == 0 || d.nseq == 0) return;
  if (d.nseq > 65535 || d.H > 65535)
    throw Error(Error::Kind::InvalidArgument, std::string(kOp) + ": " + str(d.nseq) + " sequences and " + str(d.H) +
                                                  " heads, expected at most 65535 of each (grid limits)");
  const CUstream s = static_cast<CUstream>(stream);
  forEachLaunch(a, d, p, deviceStatusRecord(), [&](KernelCall& c, auto grid) {
    const std::array<unsigned, 3> g = grid(c);
    const unsigned dims[3] = {g[0], g[1], g[2]};
    c.launch(dims, s);
  });
}

std::vector<Specialization> detail::ssdSpecializations(const SsdArgs& a, const std::string& arch) {
  const SsdDims d = check(a, a.x.device);
  const SsdPlan p = plan(d);
  std::vector<Specialization> out;
  forEachLaunch(a, d, p, nullptr, [&](KernelCall& c, auto) {
    Specialization sp = c.specialization(arch);
    if (std::find(out.begin(), out.end(), sp) == out.end()) out.push_back(std::move(sp));
  });
  return out;
}

}  // namespace ssmjit
