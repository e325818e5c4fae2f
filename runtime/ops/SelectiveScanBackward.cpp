// selective_scan_backward: checked once at the edge (SelectiveScanCheck), then launches on the
// caller's stream (kernels_dsl/scan/SelectiveScanBackward.h): the forward's checkpoint pass, its
// fold and the adjoint pass (when a sequence can span more than one span), the backward, and its
// fixed-order sums (per-span sums, and the per-block sums of time-varying dB/dC when there are
// any); all of it once per chunk of states (ScanStateChunks.h; one for N <= 16).
#include <cuda.h>

#include <algorithm>
#include <string>
#include <vector>

#include "kernels_dsl/Registry.h"
#include "kernels_dsl/scan/ScanCheckpointFold.h"
#include "kernels_dsl/scan/SelectiveScan.h"
#include "kernels_dsl/scan/SelectiveScanBackward.h"
#include "runtime/DeviceStatus.h"
#include "runtime/ops/ArgCheck.h"
#include "runtime/ops/CompileAhead.h"
#include "runtime/ops/KernelCall.h"
#include "runtime/ops/ScanStateChunks.h"
#include "runtime/ops/SelectiveScanCheck.h"
#include "runtime/ops/SelectiveScanSpec.h"
#include "runtime/ops/SequenceBinding.h"
#include "ssmjit/error.h"
#include "ssmjit/ops.h"

namespace ssmjit {
namespace {

using detail::KernelCall;
using detail::kNoAxis;
using detail::ScanDims;
using kernels::kScanBwd;
using kernels::kScanBwdSum;
constexpr const char* kOp = "selective_scan_backward";

// The workspace regions, in float32 elements (SelectiveScanBackward.h), and the launches' index
// width (every launch of a call uses the same). Each chunk of states reuses the regions in turn
// (sized for the largest chunk), but for the planes that carry the sums over states across them.
struct BwdPlan {
  int64_t blockT = 0, blockD = 0, groupsPerBlock = 0, dblocks = 0, rows = 0, ckptPerRow = 0;
  int64_t span = 0, spanKeysPerRow = 0, maxSpans = 0;  // spans: the most any sequence has
  detail::ScanStateChunks chunks;
  int64_t adjBase = 0, foldBase = 0, partBase = 0, bcBase = 0, bcSize = 0, planesBase = 0, total = 0;
  bool wide = false;  // 64-bit offsets
};
BwdPlan plan(const SelectiveScanBackwardArgs& b, const ScanDims& d) {
  const detail::ScanStateChunks chunks = detail::scanStateChunks(d.N, detail::kScanBwdStateChunk);
  const int64_t N = chunks.size;
  Specialization s;
  s.kernel = kernels::kScanBwd.kernel;
  s.set("D", d.D);
  s.set("group", d.D / d.G);
  s.set("meta:dstate", N);
  dsl::completeSpecialization(s);
  BwdPlan p;
  p.chunks = chunks;
  p.blockT = s.get("meta:BLOCK_T");
  p.blockD = s.get("meta:BLOCK_D");
  p.groupsPerBlock = s.get("meta:groups_per_block");
  p.dblocks = (d.D + p.blockD - 1) / p.blockD;
  p.rows = d.packed ? 1 : d.batch;
  p.ckptPerRow = d.packed ? d.L / p.blockT + d.nseq + 1 : (d.L + p.blockT - 1) / p.blockT;
  p.span = s.get("meta:span");
  if (p.span <= 0 || p.span % p.blockT != 0)
    throw Error(Error::Kind::InvalidArgument,
                std::string(kOp) + ": SSMJIT_META gives selective_scan_bwd span " + std::to_string(p.span) +
                    ", expected a positive multiple of BLOCK_T " + std::to_string(p.blockT));
  p.spanKeysPerRow = d.packed ? d.L / p.span + d.nseq + 1 : (d.L + p.span - 1) / p.span;
  p.maxSpans = (d.maxLen + p.span - 1) / p.span;
  // Regions start at multiples of 16 elements: one divisibility class for every call, so calls
  // of other lengths reuse the kernels.
  auto up16 = [](int64_t v) { return (v + 15) / 16 * 16; };
  const int64_t spanKeys = p.rows * p.spanKeysPerRow;
  p.adjBase = up16(p.rows * p.ckptPerRow * N * d.D);
  const int64_t spanRegion = p.maxSpans > 1 ? up16(spanKeys * (N + 1) * d.D) : 0;
  p.foldBase = p.adjBase + spanRegion;  // the checkpoint pass' spans (CheckpointSpans.h)
  p.partBase = p.foldBase + (p.maxSpans > 1 ? spanRegion + up16(p.rows * p.ckptPerRow * d.D) : 0);
  p.bcBase = p.partBase + up16(spanKeys * kernels::scanBwdSums(N) * d.D);
  p.bcSize = up16(p.dblocks * p.groupsPerBlock * N * p.rows * p.ckptPerRow * p.blockT);  // per checkpoint key
  p.planesBase = p.bcBase + p.bcSize * ((d.bVarying ? 1 : 0) + (d.cVarying ? 1 : 0));
  p.total = p.planesBase + (chunks.count > 1 ? 3 * p.rows * d.D * d.L : 0);
  const SelectiveScanArgs& f = b.forward;
  p.wide = !detail::fits32({&f.u, &f.delta, &f.z, &f.B, &f.C, &f.initial_states, &b.dout, &b.dfinal_states, &b.du,
                            &b.ddelta, &b.dz, &b.dB, &b.dC, &b.dinitial_states}) ||
           p.total >= (int64_t(1) << 31);
  return p;
}

// The three planes of sums over states that cross chunks (one pointer: the kernel indexes them).
// Undefined while there is no workspace (binding only).
TensorView planes(const SelectiveScanBackwardArgs& b, const BwdPlan& p) {
  void* at = b.workspace.defined() ? static_cast<float*>(b.workspace.data) + p.planesBase : nullptr;
  return TensorView::contiguous(at, DType::F32, {p.total - p.planesBase});
}

// `b`, `d`: one chunk's call (chunkCall).
void bindBwd(KernelCall& c, const SelectiveScanBackwardArgs& b, const ScanDims& d, const BwdPlan& p, bool adjointPass,
             int64_t chunk, void* err) {
  constexpr const dsl::Signature& S = kScanBwd;
  // The adjoint pass carries state adjoints only, which D does not enter: without it, every chunk
  // of states (the last takes D) shares the pass' kernel.
  SelectiveScanArgs f = b.forward;
  if (adjointPass) f.D = {};
  const detail::Axes rows = detail::scanRows(d);
  const TensorView finalIdx = b.dfinal_states.defined() ? f.final_state_indices : TensorView{};
  detail::bindScanInputs<S>(c, f, d);
  detail::bindSequences<S>(c,
                           {d.D, d.L, d.nseq, d.packed, f.cu_seqlens, f.initial_state_indices, d.initSlots, finalIdx,
                            b.dfinal_states.defined() ? b.dfinal_states.shape[0] : 0},
                           err);
  c.tensor(S.tensor("dout"), b.dout, rows);
  c.tensor(S.tensor("dfinal"), b.dfinal_states);
  c.tensor(S.tensor("du"), b.du, rows);
  c.tensor(S.tensor("ddelta"), b.ddelta, rows);
  c.tensor(S.tensor("dz"), b.dz, rows);
  c.tensor(S.tensor("dinit"), b.dinitial_states);
  c.tensor(S.tensor("ws"), b.workspace);
  c.tensor(S.tensor("part"), p.chunks.count > 1 ? planes(b, p) : TensorView{});
  c.size(S.size("max_len"), d.packed && f.max_seqlen > 0 ? f.max_seqlen : d.L);
  c.size(S.size("ckpt_per_row"), p.ckptPerRow);
  c.size(S.size("span_keys_per_row"), p.spanKeysPerRow);
  c.size(S.size("adj_base"), p.adjBase);
  c.size(S.size("part_base"), p.partBase);
  c.size(S.size("bc_base"), p.bcBase);
  c.size(S.size("bc_size"), p.bcSize);
  c.flag(S.flag("has_dfinal"), b.dfinal_states.defined());
  c.flag(S.flag("has_dinit"), b.dinitial_states.defined());
  c.flag(S.flag("part_in"), !adjointPass && chunk > 0);  // the adjoint pass writes no per-token gradient
  c.flag(S.flag("part_out"), !adjointPass && chunk + 1 < p.chunks.count);
  c.meta("meta:dstate", d.N);
  c.meta("meta:adjoint_pass", adjointPass ? 1 : 0);
  c.meta("meta:longest_first", d.packed);
  c.meta("meta:index_bits", p.wide ? 64 : 32);
}

void bindSum(KernelCall& c, const SelectiveScanBackwardArgs& b, const ScanDims& d, const BwdPlan& p, int part) {
  constexpr const dsl::Signature& S = kScanBwdSum;
  const bool batched = d.batch > 1;
  // Part 1 sums time-varying dB/dC only: without dD and ddelta_bias, every chunk of states (the
  // last writes them) shares its kernel.
  const TensorView dD = part == 0 ? b.dD : TensorView{}, ddb = part == 0 ? b.ddelta_bias : TensorView{};
  c.tensor(S.tensor("ws"), b.workspace);
  c.tensor(S.tensor("dA"), b.dA);
  c.tensor(S.tensor("dD"), dD);
  c.tensor(S.tensor("ddbias"), ddb);
  c.tensor(S.tensor("dB"), b.dB, detail::scanBCAxes(d.bVarying, batched));
  c.tensor(S.tensor("dC"), b.dC, detail::scanBCAxes(d.cVarying, batched));
  c.tensor(S.tensor("cu"), b.forward.cu_seqlens);
  c.size(S.size("D"), d.D);
  c.size(S.size("L"), d.L);
  c.size(S.size("nseq"), d.nseq);
  c.size(S.size("rows"), p.rows);
  c.size(S.size("G"), d.G);
  c.size(S.size("group"), d.D / d.G);
  c.size(S.size("dblocks"), p.dblocks);
  c.size(S.size("span_keys_per_row"), p.spanKeysPerRow);
  c.size(S.size("ckpt_per_row"), p.ckptPerRow);
  c.size(S.size("part_base"), p.partBase);
  c.size(S.size("bc_base"), p.bcBase);
  c.size(S.size("bc_size"), p.bcSize);
  c.flag(S.flag("b_varying"), d.bVarying);
  c.flag(S.flag("c_varying"), d.cVarying);
  c.flag(S.flag("has_D"), dD.defined());
  c.flag(S.flag("has_dbias"), ddb.defined());
  c.flag(S.flag("has_cu"), d.packed);
  c.meta("meta:part", part);
  c.meta("meta:dstate", d.N);
  c.meta("meta:span", p.span);
  c.meta("meta:bwd_block_d", p.blockD);
  c.meta("meta:bwd_block_t", p.blockT);
  c.meta("meta:groups_per_block", p.groupsPerBlock);
  c.meta("meta:index_bits", p.wide ? 64 : 32);
}

// Chunk k of the call (SelectiveScanBackward.h, state chunks): its states and their gradients;
// D's terms and the dD / ddelta_bias sums only in the last chunk.
struct ChunkCall {
  SelectiveScanBackwardArgs args;
  ScanDims dims;
};
ChunkCall chunkCall(const SelectiveScanBackwardArgs& b, const ScanDims& d, const BwdPlan& p, int64_t k) {
  const int64_t n0 = p.chunks.first(k), nc = p.chunks.length(k, d.N);
  ChunkCall c{b, d};
  c.dims.N = nc;
  if (p.chunks.count == 1) return c;
  c.args.forward = detail::narrowStates(b.forward, d.bVarying, d.cVarying, n0, nc);
  c.args.dfinal_states = b.dfinal_states.narrow(2, n0, nc);
  c.args.dinitial_states = b.dinitial_states.narrow(2, n0, nc);
  c.args.dA = b.dA.narrow(1, n0, nc);
  c.args.dB = b.dB.narrow(d.bVarying ? 2 : 1, n0, nc);
  c.args.dC = b.dC.narrow(d.cVarying ? 2 : 1, n0, nc);
  if (k + 1 < p.chunks.count) {
    c.args.forward.D = {};
    c.args.dD = {};
    c.args.ddelta_bias = {};
  }
  return c;
}

// The workspace plan fixed BLOCK_T, BLOCK_D and span for every launch: SSMJIT_META must not
// give one specialisation others.
void checkLayout(KernelCall& c, const BwdPlan& p) {
  if (c.metaValue("meta:BLOCK_T") == p.blockT && c.metaValue("meta:BLOCK_D") == p.blockD &&
      c.metaValue("meta:span") == p.span)
    return;
  throw Error(Error::Kind::InvalidArgument,
              std::string(kOp) + ": SSMJIT_META gives this call's selective_scan_bwd BLOCK_T " +
                  std::to_string(c.metaValue("meta:BLOCK_T")) + ", BLOCK_D " +
                  std::to_string(c.metaValue("meta:BLOCK_D")) + " and span " +
                  std::to_string(c.metaValue("meta:span")) + ", expected the workspace plan's BLOCK_T " +
                  std::to_string(p.blockT) + ", BLOCK_D " + std::to_string(p.blockD) + " and span " +
                  std::to_string(p.span) + " (set them for every specialisation of the kernel alike)");
}

// The forward call of the checkpoint pass: the backward's workspace holds the checkpoints. The
// pass keeps states only, so D and z, which only y reads, are left out: every chunk of states
// (the last takes D) and calls with and without them share its kernel.
SelectiveScanArgs checkpointCall(const SelectiveScanBackwardArgs& b) {
  SelectiveScanArgs f = b.forward;
  f.D = {};
  f.z = {};
  f.out = {};
  f.final_states = {};
  f.final_state_indices = {};
  f.workspace = b.workspace;
  return f;
}

// The checkpoint pass' layout: in spans of the backward's where a sequence can have two.
detail::ScanCheckpointLayout checkpointLayout(const BwdPlan& p) {
  detail::ScanCheckpointLayout l;
  l.blockT = p.blockT, l.perRow = p.ckptPerRow;
  if (p.maxSpans > 1) l.span = p.span, l.spanKeysPerRow = p.spanKeysPerRow, l.auxBase = p.foldBase;
  return l;
}

// The fold of the checkpoint pass' spans (ScanCheckpointFold.h) for one chunk's call.
void bindFold(KernelCall& c, const SelectiveScanBackwardArgs& b, const ScanDims& d, const BwdPlan& p) {
  constexpr const dsl::Signature& S = kernels::kScanCkptFold;
  c.tensor(S.tensor("A"), b.forward.A);
  c.tensor(S.tensor("ws"), b.workspace);
  c.tensor(S.tensor("cu"), b.forward.cu_seqlens);
  c.size(S.size("D"), d.D);
  c.size(S.size("L"), d.L);
  c.size(S.size("nseq"), d.nseq);
  c.size(S.size("ckpt_per_row"), p.ckptPerRow);
  c.size(S.size("span_keys_per_row"), p.spanKeysPerRow);
  c.size(S.size("aux_base"), p.foldBase);
  c.flag(S.flag("has_cu"), d.packed);
  c.meta("meta:dstate", d.N);
  c.meta("meta:span", p.span);
  c.meta("meta:BLOCK_T", p.blockT);
  c.meta("meta:index_bits", p.wide ? 64 : 32);
}

// A launch of the call: which kernel and pass (for its grid).
enum class Launch { Checkpoints, Fold, Backward, Sums, BCSums };

// Every launch of the call in order, each bound in the KernelCall handed to `f(c, launch, N)` (N:
// its chunk's states): per chunk of states the checkpoint pass, its fold and the adjoint pass
// (when a sequence can have two spans), the backward, its sums, and those of time-varying dB/dC
// when there are any.
template <class F>
void forEachLaunch(const SelectiveScanBackwardArgs& b, const ScanDims& d, const BwdPlan& p, void* err, F&& f) {
  for (int64_t k = 0; k < p.chunks.count; ++k) {
    const ChunkCall cc = chunkCall(b, d, p, k);
    {
      KernelCall c(kernels::kScan);
      detail::bindScanCheckpoints(c, checkpointCall(cc.args), cc.dims, checkpointLayout(p), err);
      f(c, Launch::Checkpoints, cc.dims.N);
    }
    if (p.maxSpans > 1) {
      KernelCall c(kernels::kScanCkptFold);
      bindFold(c, cc.args, cc.dims, p);
      f(c, Launch::Fold, cc.dims.N);
    }
    for (const bool adjointPass : {true, false}) {
      if (adjointPass && p.maxSpans < 2) continue;
      KernelCall c(kScanBwd);
      bindBwd(c, cc.args, cc.dims, p, adjointPass, k, err);
      f(c, Launch::Backward, cc.dims.N);
    }
    for (int part = 0; part < 2; ++part) {
      if (part == 1 && !d.bVarying && !d.cVarying) break;
      KernelCall c(kScanBwdSum);
      bindSum(c, cc.args, cc.dims, p, part);
      f(c, part == 0 ? Launch::Sums : Launch::BCSums, cc.dims.N);
    }
  }
}

}  // namespace

int64_t selective_scan_backward_workspace_size(const SelectiveScanBackwardArgs& b) {
  const ScanDims d = detail::checkSelectiveScanBackwardArgs(b, b.forward.u.device, kOp);
  return plan(b, d).total;
}

void selective_scan_backward(const SelectiveScanBackwardArgs& b, Stream stream) {
  const ScanDims d = detail::checkSelectiveScanBackwardArgs(b, DeviceKind::CUDA, kOp);
  const BwdPlan p = plan(b, d);
  detail::checkWorkspace(kOp, b.workspace, b.forward.u, "u", p.total, "selective_scan_backward_workspace_size");
  if (d.nseq == 0 || d.L == 0 || d.D == 0) return;
  const CUstream s = static_cast<CUstream>(stream);
  const detail::CompileAhead ahead(
      [&](const std::string& arch) { return detail::scanBackwardSpecializations(b, arch); });
  forEachLaunch(b, d, p, deviceStatusRecord(), [&](KernelCall& c, Launch launch, int64_t N) {
    unsigned grid[3];
    auto set = [&](int64_t x, int64_t y, int64_t z) {
      grid[0] = static_cast<unsigned>(x), grid[1] = static_cast<unsigned>(y), grid[2] = static_cast<unsigned>(z);
    };
    switch (launch) {
      case Launch::Checkpoints: {  // (channel blocks, spans, sequences)
        const int64_t bd = c.metaValue("meta:BLOCK_D");
        set((d.D + bd - 1) / bd, p.maxSpans > 1 ? p.maxSpans : 1, d.nseq);
        break;
      }
      case Launch::Fold: {  // (channel blocks, tile groups of every span but the first, sequences)
        const int64_t bd = c.metaValue("meta:BLOCK_D");
        set((d.D + bd - 1) / bd, (p.maxSpans - 1) * kernels::scanCkptFoldGroups(p.span, p.blockT), d.nseq);
        break;
      }
      case Launch::Backward:  // (channel blocks, sequences, spans)
        checkLayout(c, p);
        set(p.dblocks, d.nseq, p.maxSpans);
        break;
      case Launch::Sums: {  // (channel blocks, sums)
        const int64_t block = c.metaValue("meta:BLOCK");
        set((d.D + block - 1) / block, kernels::scanBwdSums(N), 1);
        break;
      }
      case Launch::BCSums: {  // (token blocks of the longest sequence, states, sequences x groups x {B, C})
        const int64_t block = c.metaValue("meta:BLOCK");
        set((d.maxLen + block - 1) / block, N, d.nseq * d.G * 2);
        break;
      }
    }
    c.launch(grid, s);
  });
}

std::vector<Specialization> detail::scanBackwardSpecializations(const SelectiveScanBackwardArgs& b,
                                                                const std::string& arch) {
  const ScanDims d = checkSelectiveScanBackwardArgs(b, b.forward.u.device, kOp);
  const BwdPlan p = plan(b, d);
  std::vector<Specialization> out;
  forEachLaunch(b, d, p, nullptr, [&](KernelCall& c, Launch, int64_t) {
    Specialization sp = c.specialization(arch);
    if (std::find(out.begin(), out.end(), sp) == out.end()) out.push_back(std::move(sp));
  });
  return out;
}

}  // namespace ssmjit
