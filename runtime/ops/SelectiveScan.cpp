// selective_scan: the arguments are checked once, here at the edge (SelectiveScanCheck), then
// bound to the generic kernel (kernels_dsl/SelectiveScan.h), specialised and launched on the
// caller's stream: per chunk of states (ScanStateChunks.h; one for N <= 32) one launch, or two
// when a sequence can be longer than one span (the states pass, then the main pass).
#include <cuda.h>

#include <algorithm>
#include <string>
#include <vector>

#include "kernels_dsl/Registry.h"
#include "kernels_dsl/SelectiveScan.h"
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

const ArgSchema kSchema{kernels::kScanArgNames, kernels::kScanNumArgs};
constexpr const char* kOp = "selective_scan";

using detail::strideOr0;

// How the call is cut into spans (the kernel's meta:span for this D, SSMJIT_META included) and
// into chunks of states.
struct ScanPlan {
  int64_t span = 0, keysPerRow = 0, rows = 0, spans = 0;
  bool multi = false;         // a sequence may cover more than one span: the states pass runs
  detail::ScanStateChunks chunks;
  int64_t yBase = 0;          // with several chunks: the plane of y summed over the earlier ones
  int64_t workspace = 0;      // float32 elements
  int64_t minBlocks = 0;      // meta:min_blocks of the states and main passes
  int64_t numWarps = 0;       // their meta:num_warps (0: the kernel's choice)
  int64_t serialLen = 0;      // meta:serial_len: the longest sequence of the serial class
  int64_t stateParts = 1;     // the serial class' meta:state_parts
  bool serial = false;        // the serial class launches (a dense call of at most serialLen tokens, or packed)
  bool parallel = true;       // the parallel class launches
};

// Blocks an SM the register allocation must fit, from the grid: with many programs more resident
// warps hide the loads' latency better than spill-free code does; with few (one long sequence), the
// SMs have room anyway and spills only cost. Larger N is unmeasured and left to the compiler. Few
// programs (one long sequence: 320 of 4 warps at D 5120) would leave 2 or 3 blocks on an SM,
// unevenly, so they run as programs of 2 warps held to 5 blocks an SM. Many programs keep 4 warps;
// dense rows take 4 blocks an SM, packed rows 5.
struct ScanTiles {
  int64_t minBlocks = 0, numWarps = 0;
};
ScanTiles chooseTiles(int64_t programs, int64_t N, bool packed) {
  if (N > 16) return {};
  if (programs < 1024) return {5, 2};
  return {packed ? 5 : 4, 0};
}
// The serial class' threads a channel (meta:state_parts), from the call's sequences x channels: one
// thread a channel leaves few sequences short of threads, while splitting the states costs the
// exchange of dt, dt u and the groups' sums through shared memory, which pays only while the
// sequences x channels are few (4 threads a channel below 4 x 5120, 2 below 8 x 5120).
int64_t serialStateParts(int64_t channelSequences) {
  if (channelSequences >= 8 * 5120) return 1;
  return channelSequences >= 4 * 5120 ? 2 : 4;
}

ScanPlan plan(const SelectiveScanArgs& a, const ScanDims& d) {
  Specialization s;
  s.kernel = kernels::kScanKernel;
  s.set("D", d.D);
  s.set("meta:serial_len", a.serial_seqlen);  // SSMJIT_META may override it (the GPU suite does)
  dsl::completeSpecialization(s);
  ScanPlan p;
  p.chunks = detail::scanStateChunks(d.N, detail::kScanStateChunk);
  const int64_t nc = p.chunks.size;  // each chunk reuses the states pass' region in turn
  // Length classes (SelectiveScan.h): a dense call runs in its length's; a packed row in both,
  // unless max_seqlen rules the parallel class out. The serial form holds up to 16 states.
  p.serialLen = nc <= 16 ? s.get("meta:serial_len") : 0;
  p.serial = p.serialLen > 0 && (d.packed || d.L <= p.serialLen);
  p.parallel = !p.serial || (d.packed && d.maxLen > p.serialLen);
  p.stateParts = serialStateParts(d.nseq * d.D);
  p.span = s.get("meta:span");
  const int64_t bd = s.get("meta:BLOCK_D");
  p.spans = (d.maxLen + p.span - 1) / p.span;
  p.multi = p.parallel && p.spans > 1;
  p.keysPerRow = d.L / p.span + 1;
  p.rows = d.packed ? 1 : d.batch;
  const ScanTiles tiles = chooseTiles((d.D + bd - 1) / bd * p.spans * d.nseq, nc, d.packed);
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
  detail::checkScanWorkspace(kOp, a.workspace, a.u, p.workspace, "selective_scan_workspace_size",
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
  TensorView plane;     // (rows, D, L) fp32; undefined while there is no workspace (binding only)
  bool yacc = false;    // adds the plane
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

// The serial class' programs: 2 warps of (channel, part) threads, 8-token tiles, 5 an SM (16-token
// tiles and 1 or 4 warps are slower on dense and packed rows).
void bindSerial(KernelCall& c, int64_t parts) {
  c.meta("meta:time_lanes", 1);
  c.meta("meta:BLOCK_T", 8);
  c.meta("meta:num_warps", 2);
  c.meta("meta:min_blocks", 5);
  c.meta("meta:state_parts", parts);
  c.meta("meta:span", int64_t{1} << 24);  // whole sequences: at most serial_len tokens
}

// `ckptBlockT`, `ckptPerRow`: the checkpoint pass' tile and keys (SelectiveScan.h).
// `a`, `d`: one chunk's call (chunkCall); `yacc`: the plane it adds (when `hasYacc`).
void bind(KernelCall& c, const SelectiveScanArgs& a, const ScanDims& d, const ScanPlan& p, Pass pass, Class cls,
          void* err, const TensorView& yacc = {}, bool hasYacc = false, int64_t ckptBlockT = 0, int64_t ckptPerRow = 0) {
  const bool statesPass = pass == Pass::States, ckpt = pass == Pass::Checkpoints;
  const bool serial = cls == Class::Serial;
  thread_local const ArgIndex A{kSchema.names, kSchema.count};
  c.pointer(A("u"), a.u, DType::F32, true);
  c.pointer(A("delta"), a.delta, DType::F32, true);
  c.pointer(A("A"), a.A, DType::F32, true);
  c.pointer(A("B"), a.B, DType::F32, true);
  c.pointer(A("C"), a.C, DType::F32, true);
  c.pointer(A("Dv"), a.D, DType::F32, true);
  c.pointer(A("z"), a.z, DType::F32, true);
  c.pointer(A("dbias"), a.delta_bias, DType::F32, true);
  c.pointer(A("out"), a.out, DType::F32, true);
  c.pointer(A("init"), a.initial_states, DType::F32, true);
  c.pointer(A("final"), a.final_states, DType::F32, true);
  c.pointer(A("ws"), p.multi || ckpt ? a.workspace : TensorView{}, DType::F32, true);
  c.pointer(A("yacc"), yacc, DType::F32, true);
  c.pointer(A("cu"), a.cu_seqlens, DType::I32, false);
  c.pointer(A("init_idx"), a.initial_state_indices, DType::I32, false);
  c.pointer(A("final_idx"), a.final_state_indices, DType::I32, false);
  c.pointer(A("err"), err, DType::I64);
  c.size(A("D"), d.D, true);
  c.size(A("L"), d.L, false);
  c.count(A("nseq"), d.nseq);
  c.count(A("nslots_init"), d.initSlots);
  c.count(A("nslots_final"), d.finalSlots);
  c.count(A("max_len"), d.maxLen);
  c.size(A("keys_per_row"), p.keysPerRow, false);
  c.size(A("group"), d.D / d.G, true);
  c.size(A("ckpt_per_row"), ckptPerRow, false);
  const bool batched = d.batch > 1;
  c.stride(A("s_u_b"), batched ? a.u.strides[0] : 0);
  c.stride(A("s_u_d"), a.u.strides[1]);
  c.stride(A("s_dl_b"), batched ? a.delta.strides[0] : 0);
  c.stride(A("s_dl_d"), a.delta.strides[1]);
  c.stride(A("s_z_b"), batched ? strideOr0(a.z, 0) : 0);
  c.stride(A("s_z_d"), strideOr0(a.z, 1));
  c.stride(A("s_o_b"), batched ? a.out.strides[0] : 0);
  c.stride(A("s_o_d"), a.out.strides[1]);
  c.stride(A("s_ya_b"), hasYacc && batched ? yacc.strides[0] : 0);
  c.stride(A("s_ya_d"), hasYacc ? yacc.strides[1] : 0);
  c.stride(A("s_A_d"), a.A.strides[0]);
  c.stride(A("s_A_n"), a.A.strides[1]);
  detail::bindScanBC(c, A, a.B, d.bVarying, batched, "s_B_b", "s_B_g", "s_B_n", "s_B_d");
  detail::bindScanBC(c, A, a.C, d.cVarying, batched, "s_C_b", "s_C_g", "s_C_n", "s_C_d");
  c.stride(A("s_D_d"), strideOr0(a.D, 0));
  c.stride(A("s_db_d"), strideOr0(a.delta_bias, 0));
  c.stride(A("s_init_slot"), strideOr0(a.initial_states, 0));
  c.stride(A("s_init_d"), strideOr0(a.initial_states, 1));
  c.stride(A("s_init_n"), strideOr0(a.initial_states, 2));
  c.stride(A("s_final_slot"), strideOr0(a.final_states, 0));
  c.stride(A("s_final_d"), strideOr0(a.final_states, 1));
  c.stride(A("s_final_n"), strideOr0(a.final_states, 2));
  c.stride(A("s_cu"), strideOr0(a.cu_seqlens, 0));
  c.stride(A("s_init_idx"), strideOr0(a.initial_state_indices, 0));
  c.stride(A("s_final_idx"), strideOr0(a.final_state_indices, 0));
  c.flag(A("b_varying"), d.bVarying);
  c.flag(A("c_varying"), d.cVarying);
  c.flag(A("has_D"), a.D.defined());
  c.flag(A("has_z"), a.z.defined());
  c.flag(A("has_dbias"), a.delta_bias.defined());
  c.flag(A("softplus"), a.delta_softplus);
  c.flag(A("has_cu"), d.packed);
  c.flag(A("has_max_len"), d.packed && a.max_seqlen > 0);
  c.flag(A("has_init"), a.initial_states.defined());
  c.flag(A("has_init_idx"), a.initial_state_indices.defined());
  c.flag(A("has_final"), a.final_states.defined() && !ckpt);
  c.flag(A("has_final_idx"), a.final_state_indices.defined());
  c.flag(A("multi_span"), p.multi && !ckpt && !serial);
  c.flag(A("has_yacc"), hasYacc);
  c.meta("meta:dstate", d.N);
  c.meta("meta:states_pass", statesPass);
  // Whole sequences a program: the longest first (spans already bound a program's length; and
  // there the ranked sequence index, held in a register, spilled 312 B where 256 at most at D 256).
  c.meta("meta:longest_first", d.packed && (serial || !p.multi));
  if (serial) {
    bindSerial(c, p.stateParts);
  } else {
    if (!ckpt) c.meta("meta:min_blocks", p.minBlocks);
    if (!ckpt && p.numWarps > 0) c.meta("meta:num_warps", p.numWarps);
  }
  if (!ckpt) {
    c.meta("meta:length_class", static_cast<int64_t>(cls));
    c.meta("meta:serial_len", p.serialLen);
  }
  if (ckpt) {
    c.meta("meta:checkpoints", 1);
    c.meta("meta:BLOCK_T", ckptBlockT);
    c.meta("meta:span", int64_t{1} << 24);  // one pass over each sequence
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
        KernelCall c(kernels::kScanKernel, kSchema);
        if (pass == 0) bind(c, cc.narrowed, cc.dims, p, Pass::States, cls, err);
        else bind(c, cc.args, cc.dims, p, Pass::Main, cls, err, cc.plane, cc.yacc);
        f(c, p.spans);
      }
    }
    if (p.serial) {
      KernelCall c(kernels::kScanKernel, kSchema);
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
    throw Error(Error::Kind::InvalidArgument, std::string(kOp) + ": " + std::to_string(d.nseq) + " sequences of up to " +
                                                  std::to_string(d.maxLen) + " tokens, expected at most 65535 sequences and 65535 spans of " +
                                                  std::to_string(p.span) + " tokens (grid limits)");
  const CUstream s = static_cast<CUstream>(stream);
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

void detail::bindScanCheckpoints(KernelCall& c, const SelectiveScanArgs& a, const ScanDims& d, int64_t blockT,
                                 int64_t ckptPerRow, void* err) {
  const ScanPlan p;  // no spans: the checkpoint pass walks each sequence whole
  bind(c, a, d, p, Pass::Checkpoints, Class::All, err, {}, false, blockT, ckptPerRow);
}

void detail::bindScanBC(KernelCall& c, const ArgIndex& A, const TensorView& t, bool varying, bool batched, const char* sb,
                        const char* sg, const char* sn, const char* sd) {
  c.stride(A(sb), varying && batched ? t.strides[0] : 0);
  c.stride(A(sg), varying ? t.strides[1] : 0);
  c.stride(A(sn), varying ? t.strides[2] : t.strides[1]);
  c.stride(A(sd), varying ? 0 : t.strides[0]);
}

}  // namespace ssmjit
