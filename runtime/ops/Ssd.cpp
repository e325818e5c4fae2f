// ssd: the Mamba-2 SSD chunked scan forward (ssmjit/ops.h). The arguments are checked by the
// check the CPU reference shares (SsdCheck.h), then every SSD kernel (kernels_dsl/ssd/Ssd.h) is bound
// through the one signature they share and launched in order on the caller's stream:
// chunk_cumsum, bmm, chunk_state (passing the states itself), then chunk_scan (not without out:
// states only); state_passing after chunk_state where the call asks for sequence decays; or one
// of the phases of SsdSpec.h (context parallelism, the backward's recomputation).
#include <cuda.h>

#include <algorithm>
#include <array>
#include <climits>
#include <string>
#include <vector>

#include "kernels_dsl/Registry.h"
#include "kernels_dsl/ssd/Ssd.h"
#include "runtime/DeviceStatus.h"
#include "runtime/ops/ArgCheck.h"
#include "runtime/ops/BackwardStandIn.h"
#include "runtime/ops/CompileAhead.h"
#include "runtime/ops/KernelCall.h"
#include "runtime/ops/SsdBackwardSpec.h"
#include "runtime/ops/SsdBinding.h"
#include "runtime/ops/SsdCheck.h"
#include "runtime/ops/SsdSpec.h"
#include "ssmjit/error.h"
#include "ssmjit/ops.h"

namespace ssmjit {
namespace {

using detail::Axes;
using detail::KernelCall;
using detail::SsdDims;

constexpr const char* kOp = "ssd";
std::string str(int64_t v) { return std::to_string(v); }

// The call's chunk slots and workspace (Ssd.h), and whether chunk_state passes the states
// itself (pass_states: no state_passing launch). It does in a whole call and in the backward's
// recomputation, unless the call asks for sequence decays (state_passing sums them) or
// SSMJIT_META gives ssd_chunk_state pass_states=0; context parallelism's phases keep the chunks'
// states for a second pass and run state_passing.
struct SsdPlan {
  kernels::SsdWorkspaceLayout ws;
  int64_t searchSteps = 0;
  bool passStates = false;
};
bool passesStates(const SsdArgs& a, detail::SsdPhase phase) {
  static const bool off = dsl::metaOverride(kernels::kSsdChunkState.kernel, "meta:pass_states").value_or(1) == 0;
  return !off && (phase == detail::SsdPhase::Whole || phase == detail::SsdPhase::States) && !a.sequence_decay.defined();
}
SsdPlan plan(const SsdArgs& a, const SsdDims& d, detail::SsdPhase phase) {
  SsdPlan p;
  p.passStates = passesStates(a, phase);
  const int64_t Q = d.chunk;
  const int64_t slots = d.packed ? d.nseq + d.L / Q : d.batch * ((d.L + Q - 1) / Q);
  p.ws = kernels::ssdWorkspaceLayout(slots, d.H, d.G, d.P, d.N, Q);
  while ((int64_t{1} << p.searchSteps) < d.nseq) ++p.searchSteps;
  if (d.packed) ++p.searchSteps;
  return p;
}

// A States phase writes no output (the backward reads what it leaves in the workspace).
SsdDims check(const SsdArgs& a, DeviceKind device, detail::SsdPhase phase = detail::SsdPhase::Whole) {
  return detail::checkSsdArgs(a, device, kOp, phase != detail::SsdPhase::States);
}

// The workspace holds the chunk table (int32 words) at its start: 16-byte alignment as any
// float32 tensor of the kernels.
void checkWorkspace(const SsdArgs& a, const SsdPlan& p) {
  detail::checkWorkspace(kOp, a.workspace, a.x, "x", p.ws.total, "ssd_workspace_size",
                         "per-chunk dt, cumsums, states and C.B");
}

// Binds every argument of the SSD kernels' shared signature for kernel `sig`.
void bind(KernelCall& c, const dsl::Signature& S, const SsdArgs& a, const SsdDims& d, const SsdPlan& p, void* err) {
  detail::bindSsdInputs(c, S, a, d);
  const Axes rows = detail::ssdRowAxes(d);
  c.tensor(S.tensor("out"), a.out, rows);
  c.tensor(S.tensor("y"), a.y, rows);
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
  c.size(S.size("nseq"), d.nseq);
  c.size(S.size("search_steps"), p.searchSteps);
  c.size(S.size("nslots_init"), d.initSlots);
  c.size(S.size("nslots_final"), d.finalSlots);
  c.size(S.size("nslots_blk"), d.blockSlots);
  c.size(S.size("blk_tokens"), a.block_state_tokens);
  c.size(S.size("kmax"), d.blocksPerSeq);
  detail::bindSsdForwardOffsets(c, S, p.ws);
  c.flag(S.flag("has_cu"), d.packed);
  c.flag(S.flag("has_init"), a.initial_states.defined());
  c.flag(S.flag("has_init_idx"), a.initial_state_indices.defined());
  c.flag(S.flag("has_final"), a.final_states.defined());
  c.flag(S.flag("has_final_idx"), a.final_state_indices.defined());
  c.flag(S.flag("has_blk"), d.blockTokens > 0);
  c.flag(S.flag("has_decay"), a.sequence_decay.defined());
  c.flag(S.flag("has_y"), a.y.defined());
  c.flag(S.flag("pass_states"), p.passStates);
  c.size(S.size("o_flags"), p.ws.oFlags);
  const bool wide = !detail::fits32({&a.x, &a.dt, &a.z, &a.out, &a.y, &a.B, &a.C, &a.initial_states, &a.final_states,
                                     &a.block_states}) ||
                    p.ws.total >= (int64_t{1} << 31);
  c.meta("meta:index_bits", wide ? 64 : 32);
}

// Every launch of the call's phase in order, bound, with its grid.
// `zeroFlags` runs before chunk_state where it passes the states (its chain's words start at 0).
template <class F, class Z>
void forEachLaunch(const SsdArgs& a, const SsdDims& d, const SsdPlan& p, void* err, detail::SsdPhase phase, F&& f,
                   Z&& zeroFlags) {
  const int64_t S = p.ws.slots, nb = d.chunk / kernels::kSsdTokenBlock;
  auto cdivU = [](int64_t x, int64_t y) { return static_cast<unsigned>((x + y - 1) / y); };
  const bool chunks = phase != detail::SsdPhase::Resume;  // the chunks' dt, cumsums and states
  const bool scan = a.out.defined() && phase != detail::SsdPhase::States;
  if (chunks) {
    KernelCall c(kernels::kSsdChunkCumsum);
    bind(c, kernels::kSsdChunkCumsum, a, d, p, err);
    f(c, [&](KernelCall& k) {
      return std::array<unsigned, 3>{unsigned(S), cdivU(d.H, k.metaValue("meta:BLOCK_H")), 1};
    });
  }
  if (a.out.defined() || phase == detail::SsdPhase::States) {  // C.B: the scan's and the backward's
    KernelCall c(kernels::kSsdBmm);
    bind(c, kernels::kSsdBmm, a, d, p, err);
    f(c, [&](KernelCall&) { return std::array<unsigned, 3>{unsigned(S), unsigned(d.G), unsigned(nb * nb)}; });
  }
  if (chunks) {
    if (p.passStates) zeroFlags();
    KernelCall c(kernels::kSsdChunkState);
    bind(c, kernels::kSsdChunkState, a, d, p, err);
    f(c, [&](KernelCall& k) {
      return detail::ssdSlotHeadGrid(k, kOp, S, d.H,
                                     cdivU(d.P, k.metaValue("meta:BLOCK_P")) * cdivU(d.N, k.metaValue("meta:BLOCK_N")));
    });
  }
  if (!p.passStates) {
    KernelCall c(kernels::kSsdStatePassing);
    bind(c, kernels::kSsdStatePassing, a, d, p, err);
    const kernels::SsdPassBlock pb = kernels::ssdStatePassingBlock(d.P * d.N, d.H, d.nseq);
    c.meta("meta:BLOCK", pb.block);
    c.meta("meta:num_warps", pb.warps);
    if (phase == detail::SsdPhase::Summary) c.meta("meta:keep_states", 1);
    f(c, [&](KernelCall& k) {
      return std::array<unsigned, 3>{cdivU(d.P * d.N, k.metaValue("meta:BLOCK")), unsigned(d.H), unsigned(d.nseq)};
    });
  }
  if (scan) {
    KernelCall c(kernels::kSsdChunkScan);
    bind(c, kernels::kSsdChunkScan, a, d, p, err);
    f(c, [&](KernelCall& k) {
      return detail::ssdSlotHeadGrid(k, kOp, S, d.H, nb * cdivU(d.P, k.metaValue("meta:BLOCK_P")));
    });
  }
}

}  // namespace

int64_t ssd_workspace_size(const SsdArgs& a) { return plan(a, check(a, a.x.device), detail::SsdPhase::Whole).ws.total; }

void ssd(const SsdArgs& a, Stream stream) { detail::ssdPhase(a, detail::SsdPhase::Whole, stream); }

void detail::ssdPhase(const SsdArgs& a, SsdPhase phase, Stream stream) {
  const SsdDims d = check(a, DeviceKind::CUDA, phase);
  if ((phase == SsdPhase::Summary || phase == SsdPhase::States) && (a.out.defined() || a.y.defined()))
    throw Error(Error::Kind::Internal, std::string(kOp) + ": a summary or states phase takes no out or y");
  const SsdPlan p = plan(a, d, phase);
  checkWorkspace(a, p);
  if (d.nseq > 65535 || d.H > 65535)
    throw Error(Error::Kind::InvalidArgument, std::string(kOp) + ": " + str(d.nseq) + " sequences and " + str(d.H) +
                                                  " heads, expected at most 65535 of each (grid limits)");
  const CUstream s = static_cast<CUstream>(stream);
  const detail::CompileAhead ahead([&](const std::string& arch) { return detail::ssdSpecializations(a, arch, phase); },
                                   [&](const std::string& arch) { return detail::backwardAlongside(a, arch); });
  forEachLaunch(
      a, d, p, deviceStatusRecord(), phase,
      [&](KernelCall& c, auto grid) {
        const std::array<unsigned, 3> g = grid(c);
        const unsigned dims[3] = {g[0], g[1], g[2]};
        c.launch(dims, s);
      },
      [&] { detail::zeroSsdChainWords(a.workspace, p.ws, s, kOp); });
}

std::vector<Specialization> detail::ssdSpecializations(const SsdArgs& a, const std::string& arch, SsdPhase phase) {
  const SsdDims d = check(a, a.x.device, phase);
  const SsdPlan p = plan(a, d, phase);
  std::vector<Specialization> out;
  forEachLaunch(
      a, d, p, nullptr, phase,
      [&](KernelCall& c, auto) {
        Specialization sp = c.specialization(arch);
        if (std::find(out.begin(), out.end(), sp) == out.end()) out.push_back(std::move(sp));
      },
      [] {});
  return out;
}

}  // namespace ssmjit
