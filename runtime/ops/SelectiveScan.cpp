// selective_scan: the arguments are checked once, here at the edge (SelectiveScanCheck), then
// bound to the generic kernel (kernels_dsl/scan/SelectiveScan.h), specialised and launched on the
// caller's stream: per chunk of states (ScanStateChunks.h; one for N <= 16) one launch, or two
// when a sequence can be longer than one span (the states pass, then the main pass).
#include <cuda.h>

#include <algorithm>
#include <string>
#include <vector>

#include "kernels_dsl/Registry.h"
#include "kernels_dsl/scan/SelectiveScan.h"
#include "runtime/DeviceStatus.h"
#include "runtime/ops/ArgCheck.h"
#include "runtime/ops/BackwardStandIn.h"
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
using kernels::kScan;

constexpr const char* kOp = "selective_scan";

// How the call is cut into spans (the kernel's meta:span for this D, SSMJIT_META included) and
// into chunks of states.
struct ScanPlan {
  int64_t span = 0, keysPerRow = 0, rows = 0, spans = 0;
  bool multi = false;  // a sequence may cover more than one span: the states pass runs
  detail::ScanStateChunks chunks;
  int64_t yBase = 0;       // with several chunks: the plane of y summed over the earlier ones
  int64_t workspace = 0;   // float32 elements
  int64_t minBlocks = 0;   // meta:min_blocks of the states and main passes
  int64_t numWarps = 0;    // their meta:num_warps (0: the kernel's choice)
  int64_t serialLen = 0;   // meta:serial_len: the longest sequence of the serial class
  int64_t stateParts = 1;  // the serial class' meta:state_parts
  bool serial = false;     // the serial class launches (a dense call of at most serialLen tokens, or packed)
  bool parallel = true;    // the parallel class launches
};

ScanPlan plan(const SelectiveScanArgs& a, const ScanDims& d) {
  Specialization s;
  s.kernel = kernels::kScan.kernel;
  s.set("D", d.D);
  dsl::completeSpecialization(s);
  ScanPlan p;
  p.chunks = detail::scanStateChunks(d.N, detail::kScanStateChunk);
  const int64_t nc = p.chunks.size;  // each chunk reuses the states pass' region in turn
  // Length classes (SelectiveScan.h): a dense call runs in its length's; a packed row in both,
  // unless max_seqlen rules the parallel class out.
  // SSMJIT_META's serial_len, where it gives one, overrides the call's (the GPU suite forces it).
  p.serialLen = dsl::metaOverride(kernels::kScan.kernel, "meta:serial_len").value_or(a.serial_seqlen);
  p.serial = p.serialLen > 0 && (d.packed || d.L <= p.serialLen);
  p.parallel = !p.serial || (d.packed && d.maxLen > p.serialLen);
  p.stateParts = kernels::scanStateParts(d.nseq * d.D);
  p.span = s.get("meta:span");
  const int64_t bd = s.get("meta:BLOCK_D");
  p.spans = (d.maxLen + p.span - 1) / p.span;
  p.multi = p.parallel && p.spans > 1;
  p.keysPerRow = d.L / p.span + 1;
  p.rows = d.packed ? 1 : d.batch;
  const kernels::ScanTiles tiles = kernels::scanTiles((d.D + bd - 1) / bd * p.spans * d.nseq, d.packed);
  p.minBlocks = tiles.minBlocks;
  p.numWarps = tiles.numWarps;
  if (p.multi)
    p.workspace = p.rows * p.keysPerRow * d.D * (nc + 1) + (a.initial_states.defined() ? d.nseq * d.D * nc : 0);
  if (p.chunks.count > 1) {
    p.yBase = (p.workspace + 15) / 16 * 16;
    p.workspace = p.yBase + p.rows * d.D * d.L;
  }
  return p;
}

void checkWorkspace(const SelectiveScanArgs& a, const ScanPlan& p) {
  if (p.workspace == 0) return;
  detail::checkWorkspace(kOp, a.workspace, a.u, "u", p.workspace, "selective_scan_workspace_size",
                         p.multi ? "sequences longer than " + std::to_string(p.span) + " tokens are split into spans"
                                 : "more than " + std::to_string(detail::kScanStateChunk) +
                                       " states run in chunks that sum y in the workspace");
}

// Chunk k of the call: its states, and where its y goes (SelectiveScan.h, state chunks): every
// chunk but the last writes y over its states, without D and z, to the workspace's plane; every
// chunk but the first adds the plane to its own. The states pass writes no y: it runs on
// `narrowed`, so that every chunk of a size shares its kernel.
struct ChunkCall {
  SelectiveScanArgs narrowed, args;
  ScanDims dims;
  TensorView plane;   // (rows, D, L) fp32; undefined while there is no workspace (binding only)
  bool yacc = false;  // adds the plane
};
ChunkCall chunkCall(const SelectiveScanArgs& a, const ScanDims& d, const ScanPlan& p, int64_t k) {
  ChunkCall c;
  const int64_t nc = p.chunks.length(k, d.N);
  c.narrowed = c.args = detail::narrowStates(a, d.bVarying, d.cVarying, p.chunks.first(k), nc);
  c.dims = d;
  c.dims.N = nc;
  if (p.chunks.count == 1) return c;
  c.plane = TensorView::contiguous(a.workspace.defined() ? static_cast<float*>(a.workspace.data) + p.yBase : nullptr,
                                   DType::F32, {p.rows, d.D, d.L});
  c.yacc = k > 0;
  if (k + 1 < p.chunks.count) {
    c.args.out = c.plane;
    c.args.D = {};
    c.args.z = {};
  }
  return c;
}

enum class Pass { States, Main, Checkpoints };
// Which sequences a launch scans (SelectiveScan.h, length classes): the serial form's launch always
// class 1 (its sequences are at most serial_len long); the parallel form's class 2 beside it, else 0.
enum class Class { All = 0, Serial = 1, Parallel = 2 };

// `ckpt`: the checkpoint pass' layout (SelectiveScan.h).
// `a`, `d`: one chunk's call (chunkCall); `yacc`: the plane it adds (when `hasYacc`).
void bind(KernelCall& c, const SelectiveScanArgs& a, const ScanDims& d, const ScanPlan& p, Pass pass, Class cls,
          void* err, const TensorView& yacc = {}, bool hasYacc = false,
          const detail::ScanCheckpointLayout& ckptAt = {}) {
  const bool statesPass = pass == Pass::States, ckpt = pass == Pass::Checkpoints;
  const bool serial = cls == Class::Serial;
  constexpr const dsl::Signature& S = kScan;
  const detail::Axes rows = detail::scanRows(d);
  detail::bindScanInputs<S>(c, a, d);
  detail::bindSequences<S>(c,
                           {d.D, d.L, d.nseq, d.packed, a.cu_seqlens, a.initial_state_indices, d.initSlots,
                            a.final_state_indices, d.finalSlots},
                           err);
  c.tensor(S.tensor("out"), a.out, rows);
  c.tensor(S.tensor("init"), a.initial_states);
  c.tensor(S.tensor("final"), a.final_states);
  c.tensor(S.tensor("ws"), p.multi || ckpt ? a.workspace : TensorView{});
  c.tensor(S.tensor("yacc"), yacc, hasYacc ? rows : detail::Axes{kNoAxis, kNoAxis});
  c.size(S.size("max_len"), d.maxLen);
  c.size(S.size("keys_per_row"), ckpt ? ckptAt.spanKeysPerRow : p.keysPerRow);
  c.size(S.size("ckpt_per_row"), ckptAt.perRow);
  c.size(S.size("aux_base"), ckptAt.auxBase);
  c.flag(S.flag("has_max_len"), d.packed && a.max_seqlen > 0);
  c.flag(S.flag("has_init"), a.initial_states.defined());
  c.flag(S.flag("has_final"), a.final_states.defined() && !ckpt);
  c.flag(S.flag("multi_span"), p.multi && !ckpt && !serial);
  c.flag(S.flag("has_yacc"), hasYacc);
  c.meta("meta:dstate", d.N);
  c.meta("meta:states_pass", statesPass);
  if (serial) {
    c.meta("meta:state_parts", p.stateParts);
  } else if (!ckpt) {
    c.meta("meta:min_blocks", p.minBlocks);
    if (p.numWarps > 0) c.meta("meta:num_warps", p.numWarps);
  } else {
    // Held to 5 blocks an SM, the checkpoint pass of one long sequence or of a packed row runs
    // faster than at the compiler's choice, and dense rows' as fast (docs/performance.md).
    c.meta("meta:min_blocks", 5);
  }
  if (!ckpt) {
    c.meta("meta:length_class", static_cast<int64_t>(cls));
    c.meta("meta:serial_len", p.serialLen);
  } else {
    c.meta("meta:checkpoints", 1);
    c.meta("meta:BLOCK_T", ckptAt.blockT);
    c.meta("meta:span", ckptAt.span);
  }
  const bool wide =
      !detail::fits32({&a.u, &a.delta, &a.z, &a.out, &a.B, &a.C, &a.initial_states, &a.final_states, &yacc}) ||
      p.workspace >= (int64_t(1) << 31) || (ckpt && a.workspace.numel() >= (int64_t(1) << 31));
  c.meta("meta:index_bits", wide ? 64 : 32);
}

// Every launch of the call in order, bound in the KernelCall handed to `f` with its grid's span
// count: per chunk of states, the parallel class (its states pass, when it runs, then its main
// pass), then the serial class.
template <class F>
void forEachLaunch(const SelectiveScanArgs& a, const ScanDims& d, const ScanPlan& p, void* err, F&& f) {
  const bool both = p.serial && p.parallel;
  for (int64_t k = 0; k < p.chunks.count; ++k) {
    const ChunkCall cc = chunkCall(a, d, p, k);
    if (p.parallel) {
      const Class cls = both ? Class::Parallel : Class::All;
      for (int pass = p.multi ? 0 : 1; pass < 2; ++pass) {
        KernelCall c(kScan);
        if (pass == 0)
          bind(c, cc.narrowed, cc.dims, p, Pass::States, cls, err);
        else
          bind(c, cc.args, cc.dims, p, Pass::Main, cls, err, cc.plane, cc.yacc);
        f(c, p.spans);
      }
    }
    if (p.serial) {
      KernelCall c(kScan);
      bind(c, cc.args, cc.dims, p, Pass::Main, Class::Serial, err, cc.plane, cc.yacc);
      f(c, int64_t{1});
    }
  }
}

}  // namespace

int64_t selective_scan_workspace_size(const SelectiveScanArgs& a) {
  const ScanDims d = detail::checkSelectiveScanArgs(a, a.u.device, kOp);
  return plan(a, d).workspace;
}

void selective_scan(const SelectiveScanArgs& a, Stream stream) {
  const ScanDims d = detail::checkSelectiveScanArgs(a, DeviceKind::CUDA, kOp);
  const ScanPlan p = plan(a, d);
  checkWorkspace(a, p);
  if (d.nseq == 0 || d.L == 0 || d.D == 0) return;
  if (d.nseq > 65535 || p.spans > 65535)
    throw Error(Error::Kind::InvalidArgument, std::string(kOp) + ": " + std::to_string(d.nseq) +
                                                  " sequences of up to " + std::to_string(d.maxLen) +
                                                  " tokens, expected at most 65535 sequences and 65535 spans of " +
                                                  std::to_string(p.span) + " tokens (grid limits)");
  const CUstream s = static_cast<CUstream>(stream);
  const detail::CompileAhead ahead([&](const std::string& arch) { return detail::scanSpecializations(a, arch); },
                                   [&](const std::string& arch) { return detail::backwardAlongside(a, arch); });
  forEachLaunch(a, d, p, deviceStatusRecord(), [&](KernelCall& c, int64_t spans) {
    const int64_t bd = c.metaValue("meta:BLOCK_D");
    const unsigned grid[3] = {static_cast<unsigned>((d.D + bd - 1) / bd), static_cast<unsigned>(spans),
                              static_cast<unsigned>(d.nseq)};
    c.launch(grid, s);
  });
}

std::vector<Specialization> detail::scanSpecializations(const SelectiveScanArgs& a, const std::string& arch) {
  const ScanDims d = checkSelectiveScanArgs(a, a.u.device, kOp);
  const ScanPlan p = plan(a, d);
  std::vector<Specialization> out;
  forEachLaunch(a, d, p, nullptr, [&](KernelCall& c, int64_t) {
    Specialization sp = c.specialization(arch);
    if (std::find(out.begin(), out.end(), sp) == out.end()) out.push_back(std::move(sp));
  });
  return out;
}

void detail::bindScanCheckpoints(KernelCall& c, const SelectiveScanArgs& a, const ScanDims& d,
                                 const ScanCheckpointLayout& l, void* err) {
  const ScanPlan p;  // the forward's own spans and regions: none (the layout's are the backward's)
  bind(c, a, d, p, Pass::Checkpoints, Class::All, err, {}, false, l);
}

detail::Axes detail::scanBCAxes(bool varying, bool batched) {
  if (!varying) return {kNoAxis, kNoAxis, 1, 0};
  return {batched ? 0 : kNoAxis, 1, 2, kNoAxis};
}

}  // namespace ssmjit
