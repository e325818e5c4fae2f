// selective_scan_backward: checked once at the edge (SelectiveScanCheck), then launches on the
// caller's stream (kernels_dsl/SelectiveScanBackward.h): the forward's checkpoint pass, the
// adjoint pass (when a sequence can span more than one span), the backward, and its fixed-order
// sums (per-span sums, and the per-block sums of time-varying dB/dC when there are any); all of it
// once per chunk of states (ScanStateChunks.h; one for N <= 16).
#include <cuda.h>

#include <algorithm>
#include <string>
#include <vector>

#include "kernels_dsl/Registry.h"
#include "kernels_dsl/SelectiveScan.h"
#include "kernels_dsl/SelectiveScanBackward.h"
#include "runtime/DeviceStatus.h"
#include "runtime/ops/KernelCall.h"
#include "runtime/ops/ScanStateChunks.h"
#include "runtime/ops/SelectiveScanCheck.h"
#include "runtime/ops/SelectiveScanSpec.h"
#include "ssmjit/error.h"
#include "ssmjit/ops.h"

namespace ssmjit {
namespace {

using detail::ArgIndex;
using detail::KernelCall;
using detail::ScanDims;
using detail::strideOr0;

const ArgSchema kSchema{kernels::kScanBwdArgNames, kernels::kScanBwdNumArgs};
const ArgSchema kSumSchema{kernels::kScanBwdSumArgNames, kernels::kScanBwdSumNumArgs};
constexpr const char* kOp = "selective_scan_backward";

// The workspace regions, in float32 elements (SelectiveScanBackward.h), and the launches' index
// width (every launch of a call uses the same). Each chunk of states reuses the regions in turn
// (sized for the largest chunk), but for the planes that carry the sums over states across them.
struct BwdPlan {
  int64_t blockT = 0, blockD = 0, groupsPerBlock = 0, dblocks = 0, rows = 0, ckptPerRow = 0;
  int64_t span = 0, spanKeysPerRow = 0, maxSpans = 0;  // spans: the most any sequence has
  detail::ScanStateChunks chunks;
  int64_t adjBase = 0, partBase = 0, bcBase = 0, bcSize = 0, planesBase = 0, total = 0;
  bool wide = false;  // 64-bit offsets
};
BwdPlan plan(const SelectiveScanBackwardArgs& b, const ScanDims& d) {
  const detail::ScanStateChunks chunks = detail::scanStateChunks(d.N, detail::kScanBwdStateChunk);
  const int64_t N = chunks.size;
  Specialization s;
  s.kernel = kernels::kScanBwdKernel;
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
    throw Error(Error::Kind::InvalidArgument, std::string(kOp) + ": SSMJIT_META gives selective_scan_bwd span " +
                                                  std::to_string(p.span) + ", expected a positive multiple of BLOCK_T " +
                                                  std::to_string(p.blockT));
  p.spanKeysPerRow = d.packed ? d.L / p.span + d.nseq + 1 : (d.L + p.span - 1) / p.span;
  p.maxSpans = (d.maxLen + p.span - 1) / p.span;
  // Regions start at multiples of 16 elements: one divisibility class for every call, so calls
  // of other lengths reuse the kernels.
  auto up16 = [](int64_t v) { return (v + 15) / 16 * 16; };
  const int64_t spanKeys = p.rows * p.spanKeysPerRow;
  p.adjBase = up16(p.rows * p.ckptPerRow * N * d.D);
  p.partBase = p.adjBase + (p.maxSpans > 1 ? up16(spanKeys * (N + 1) * d.D) : 0);
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
  thread_local const ArgIndex A{kSchema.names, kSchema.count};
  const SelectiveScanArgs& f = b.forward;
  c.pointer(A("u"), f.u, DType::F32, true);
  c.pointer(A("delta"), f.delta, DType::F32, true);
  c.pointer(A("A"), f.A, DType::F32, true);
  c.pointer(A("B"), f.B, DType::F32, true);
  c.pointer(A("C"), f.C, DType::F32, true);
  c.pointer(A("Dv"), f.D, DType::F32, true);
  c.pointer(A("z"), f.z, DType::F32, true);
  c.pointer(A("dbias"), f.delta_bias, DType::F32, true);
  c.pointer(A("dout"), b.dout, DType::F32, true);
  c.pointer(A("dfinal"), b.dfinal_states, DType::F32, true);
  c.pointer(A("du"), b.du, DType::F32, true);
  c.pointer(A("ddelta"), b.ddelta, DType::F32, true);
  c.pointer(A("dz"), b.dz, DType::F32, true);
  c.pointer(A("dinit"), b.dinitial_states, DType::F32, true);
  c.pointer(A("ws"), b.workspace, DType::F32, true);
  c.pointer(A("part"), p.chunks.count > 1 ? planes(b, p) : TensorView{}, DType::F32, true);
  c.pointer(A("cu"), f.cu_seqlens, DType::I32, false);
  c.pointer(A("init_idx"), f.initial_state_indices, DType::I32, false);
  c.pointer(A("final_idx"), b.dfinal_states.defined() ? f.final_state_indices : TensorView{}, DType::I32, false);
  c.pointer(A("err"), err, DType::I64);
  c.size(A("D"), d.D, true);
  c.size(A("L"), d.L, false);
  c.count(A("nseq"), d.nseq);
  c.count(A("nslots_init"), d.initSlots);
  c.count(A("nslots_final"), b.dfinal_states.defined() ? b.dfinal_states.shape[0] : 0);
  c.count(A("max_len"), d.packed && f.max_seqlen > 0 ? f.max_seqlen : d.L);
  c.size(A("ckpt_per_row"), p.ckptPerRow, false);
  c.size(A("span_keys_per_row"), p.spanKeysPerRow, false);
  c.size(A("group"), d.D / d.G, true);
  c.size(A("adj_base"), p.adjBase, false);
  c.size(A("part_base"), p.partBase, false);
  c.size(A("bc_base"), p.bcBase, false);
  c.size(A("bc_size"), p.bcSize, false);
  const bool batched = d.batch > 1;
  auto bd = [&](const char* sb, const char* sd, const TensorView& t) {
    c.stride(A(sb), batched ? strideOr0(t, 0) : 0);
    c.stride(A(sd), strideOr0(t, 1));
  };
  bd("s_u_b", "s_u_d", f.u);
  bd("s_dl_b", "s_dl_d", f.delta);
  bd("s_z_b", "s_z_d", f.z);
  bd("s_do_b", "s_do_d", b.dout);
  bd("s_du_b", "s_du_d", b.du);
  bd("s_ddl_b", "s_ddl_d", b.ddelta);
  bd("s_dz_b", "s_dz_d", b.dz);
  c.stride(A("s_A_d"), f.A.strides[0]);
  c.stride(A("s_A_n"), f.A.strides[1]);
  detail::bindScanBC(c, A, f.B, d.bVarying, batched, "s_B_b", "s_B_g", "s_B_n", "s_B_d");
  detail::bindScanBC(c, A, f.C, d.cVarying, batched, "s_C_b", "s_C_g", "s_C_n", "s_C_d");
  c.stride(A("s_D_d"), strideOr0(f.D, 0));
  c.stride(A("s_db_d"), strideOr0(f.delta_bias, 0));
  c.stride(A("s_df_slot"), strideOr0(b.dfinal_states, 0));
  c.stride(A("s_df_d"), strideOr0(b.dfinal_states, 1));
  c.stride(A("s_df_n"), strideOr0(b.dfinal_states, 2));
  c.stride(A("s_di_slot"), strideOr0(b.dinitial_states, 0));
  c.stride(A("s_di_d"), strideOr0(b.dinitial_states, 1));
  c.stride(A("s_di_n"), strideOr0(b.dinitial_states, 2));
  c.stride(A("s_cu"), strideOr0(f.cu_seqlens, 0));
  c.stride(A("s_init_idx"), strideOr0(f.initial_state_indices, 0));
  c.stride(A("s_final_idx"), b.dfinal_states.defined() ? strideOr0(f.final_state_indices, 0) : 0);
  c.flag(A("b_varying"), d.bVarying);
  c.flag(A("c_varying"), d.cVarying);
  c.flag(A("has_D"), f.D.defined());
  c.flag(A("has_z"), f.z.defined());
  c.flag(A("has_dbias"), f.delta_bias.defined());
  c.flag(A("softplus"), f.delta_softplus);
  c.flag(A("has_cu"), d.packed);
  c.flag(A("has_dfinal"), b.dfinal_states.defined());
  c.flag(A("has_final_idx"), b.dfinal_states.defined() && f.final_state_indices.defined());
  c.flag(A("has_dinit"), b.dinitial_states.defined());
  c.flag(A("has_init_idx"), f.initial_state_indices.defined());
  c.flag(A("part_in"), !adjointPass && chunk > 0);  // the adjoint pass writes no per-token gradient
  c.flag(A("part_out"), !adjointPass && chunk + 1 < p.chunks.count);
  c.meta("meta:dstate", d.N);
  c.meta("meta:adjoint_pass", adjointPass ? 1 : 0);
  c.meta("meta:longest_first", d.packed);
  c.meta("meta:index_bits", p.wide ? 64 : 32);
}

void bindSum(KernelCall& c, const SelectiveScanBackwardArgs& b, const ScanDims& d, const BwdPlan& p, int part) {
  thread_local const ArgIndex A{kSumSchema.names, kSumSchema.count};
  c.pointer(A("ws"), b.workspace, DType::F32, true);
  c.pointer(A("dA"), b.dA, DType::F32, true);
  c.pointer(A("dD"), b.dD, DType::F32, true);
  c.pointer(A("ddbias"), b.ddelta_bias, DType::F32, true);
  c.pointer(A("dB"), b.dB, DType::F32, true);
  c.pointer(A("dC"), b.dC, DType::F32, true);
  c.pointer(A("cu"), b.forward.cu_seqlens, DType::I32, false);
  c.size(A("D"), d.D, false);
  c.size(A("L"), d.L, false);
  c.count(A("nseq"), d.nseq);
  c.size(A("rows"), p.rows, false);
  c.size(A("G"), d.G, false);
  c.size(A("group"), d.D / d.G, false);
  c.size(A("dblocks"), p.dblocks, false);
  c.size(A("span_keys_per_row"), p.spanKeysPerRow, false);
  c.size(A("ckpt_per_row"), p.ckptPerRow, false);
  c.size(A("part_base"), p.partBase, false);
  c.size(A("bc_base"), p.bcBase, false);
  c.size(A("bc_size"), p.bcSize, false);
  c.stride(A("s_dA_d"), b.dA.strides[0]);
  c.stride(A("s_dA_n"), b.dA.strides[1]);
  c.stride(A("s_dD"), strideOr0(b.dD, 0));
  c.stride(A("s_ddb"), strideOr0(b.ddelta_bias, 0));
  const bool batched = d.batch > 1;
  detail::bindScanBC(c, A, b.dB, d.bVarying, batched, "s_dB_b", "s_dB_g", "s_dB_n", "s_dB_d");
  detail::bindScanBC(c, A, b.dC, d.cVarying, batched, "s_dC_b", "s_dC_g", "s_dC_n", "s_dC_d");
  c.flag(A("b_varying"), d.bVarying);
  c.flag(A("c_varying"), d.cVarying);
  c.flag(A("has_D"), b.dD.defined());
  c.stride(A("s_cu"), strideOr0(b.forward.cu_seqlens, 0));
  c.flag(A("has_dbias"), b.ddelta_bias.defined());
  c.flag(A("has_cu"), d.packed);
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
                  std::to_string(c.metaValue("meta:BLOCK_D")) + " and span " + std::to_string(c.metaValue("meta:span")) +
                  ", expected the workspace plan's BLOCK_T " + std::to_string(p.blockT) + ", BLOCK_D " +
                  std::to_string(p.blockD) + " and span " + std::to_string(p.span) +
                  " (set them for every specialisation of the kernel alike)");
}

// The forward call of the checkpoint pass: the backward's workspace holds the checkpoints.
SelectiveScanArgs checkpointCall(const SelectiveScanBackwardArgs& b) {
  SelectiveScanArgs f = b.forward;
  f.out = {};
  f.final_states = {};
  f.final_state_indices = {};
  f.workspace = b.workspace;
  return f;
}

// A launch of the call: which kernel and pass (for its grid).
enum class Launch { Checkpoints, Backward, Sums, BCSums };

// Every launch of the call in order, each bound in the KernelCall handed to `f(c, launch, N)` (N:
// its chunk's states): per chunk of states the checkpoint pass, the adjoint pass (when a sequence
// can have two spans), the backward, its sums, and those of time-varying dB/dC when there are any.
template <class F>
void forEachLaunch(const SelectiveScanBackwardArgs& b, const ScanDims& d, const BwdPlan& p, void* err, F&& f) {
  const ArgSchema fwdSchema{kernels::kScanArgNames, kernels::kScanNumArgs};
  for (int64_t k = 0; k < p.chunks.count; ++k) {
    const ChunkCall cc = chunkCall(b, d, p, k);
    {
      KernelCall c(kernels::kScanKernel, fwdSchema);
      detail::bindScanCheckpoints(c, checkpointCall(cc.args), cc.dims, p.blockT, p.ckptPerRow, err);
      f(c, Launch::Checkpoints, cc.dims.N);
    }
    for (const bool adjointPass : {true, false}) {
      if (adjointPass && p.maxSpans < 2) continue;
      KernelCall c(kernels::kScanBwdKernel, kSchema);
      bindBwd(c, cc.args, cc.dims, p, adjointPass, k, err);
      f(c, Launch::Backward, cc.dims.N);
    }
    for (int part = 0; part < 2; ++part) {
      if (part == 1 && !d.bVarying && !d.cVarying) break;
      KernelCall c(kernels::kScanBwdSumKernel, kSumSchema);
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
  detail::checkScanWorkspace(kOp, b.workspace, b.forward.u, p.total, "selective_scan_backward_workspace_size");
  if (d.nseq == 0 || d.L == 0 || d.D == 0) return;
  const CUstream s = static_cast<CUstream>(stream);
  forEachLaunch(b, d, p, deviceStatusRecord(), [&](KernelCall& c, Launch launch, int64_t N) {
    unsigned grid[3];
    auto set = [&](int64_t x, int64_t y, int64_t z) {
      grid[0] = static_cast<unsigned>(x), grid[1] = static_cast<unsigned>(y), grid[2] = static_cast<unsigned>(z);
    };
    switch (launch) {
      case Launch::Checkpoints: {  // (channel blocks, 1, sequences)
        const int64_t bd = c.metaValue("meta:BLOCK_D");
        set((d.D + bd - 1) / bd, 1, d.nseq);
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
