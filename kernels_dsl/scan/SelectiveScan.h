// The Mamba-1 selective-scan forward kernel's contract with its op (ssmjit::selective_scan):
// argument names and meaning. One kernel, two passes (flag states_pass):
//   grid (cdiv(D, meta:BLOCK_D), spans, nseq): program (d block, span j, sequence i) scans tokens
//   [start_i + j*SPAN, start_i + min(len_i, (j+1)*SPAN)) of its sequence (SPAN = meta:span),
//   meta:time_lanes lanes along time share a channel's [BLOCK_T] time tile (the associative
//   scan: a register chain within a thread's run, shuffles across the lanes), the channel's N
//   states in fp32 registers across the span.
//   states pass (only when a sequence can be longer than SPAN): every span with a successor
//     writes its end state (from the sequence's initial state for span 0, else from zero) and its
//     summed dt into ws at key = row * keys_per_row + (span end token) / SPAN: at most one span
//     of a row ends in each SPAN-aligned range of tokens, so keys never collide. Span 0 also
//     copies the initial state to ws (so that an in-place final-state write cannot race it).
//   main pass: span j > 0 starts from the fold of its predecessors' entries
//     (h = exp(A sum_dt) h + h_end, in order), span 0 from the initial state (its ws copy when
//     the sequence has several spans); writes out; the last span writes the final state.
// State chunks: a call with more states than one program holds (runtime/ops/ScanStateChunks.h) runs
//   the kernel once per chunk of states, on the chunk's A, B, C and states; every chunk but the
//   last writes its sum of y over its states (fp32, no D or z) to out, a plane of the workspace,
//   and every chunk but the first adds the plane read from yacc (flag has_yacc) to its own.
// meta:checkpoints (the backward's first launch): no out and no final state; the state carried
//   into each tile q (tokens [q*BLOCK_T, (q+1)*BLOCK_T) of sequence i) goes to ws[key, n, d],
//   key = row * ckpt_per_row + start_i / BLOCK_T + (packed ? i : 0) + q (disjoint across
//   sequences: ckpt_per_row = cdiv(L, BLOCK_T) dense, T / BLOCK_T + nseq packed). With meta:span
//   below a whole sequence (the backward's span; keys_per_row its span keys a row, aux_base its
//   region: CheckpointSpans.h), span j > 0 starts from zeros and also writes each tile's summed dt
//   since the span's start and, but for the last span, its end state and summed dt: the fold
//   (ScanCheckpointFold.h) then adds the entering state's share to every checkpoint of the span.
// meta:longest_first (packed rows of up to max(64, BLOCK_D) sequences): program z scans the rank-z
//   sequence by length, longest first, so that the launch does not end on a long sequence started
//   late (ScanSequences.h). Set where programs take whole sequences (no spans); the
//   selective_scan_bwd kernel takes it too.
// Length classes (meta:length_class, meta:serial_len = S): sequences of at most S tokens may be
//   scanned serially (the plain recurrence h_t = a_t h_{t-1} + b_t in one thread a state, along
//   8-token tiles that sit on a packed row's grid), longer ones by the lanes' associative scan.
//   Class 1 scans the sequences of at most S tokens serially (and reports the row's cu_seqlens
//   errors), class 2 the longer ones, class 0 every sequence. The op runs a dense call in the form
//   of its length (class 1, or 0), and a packed row in class 1 and, unless max_seqlen <= S, class 2.
//   Class 1 splits a channel's states over meta:state_parts P threads (1, 2 or 4; meta:BLOCK_D
//   channels of P threads a program): state n in part n % P; the parts exchange dt and dt u
//   through shared memory, and y sums C h over 4 groups of states (n % 4; fewer when N has fewer
//   factors of two) in a fixed tree, ((g0 + g1) + (g2 + g3)), so its bits do not depend on P.
// Spans sit at fixed token offsets of their sequence, and the class follows from the length, so a
// sequence's arithmetic does not depend on where it lies in a packed row or on the batch.
#pragma once
#include <cstdint>

#include "kernels_dsl/Signature.h"

namespace ssmjit::kernels {

namespace scan {
using namespace dsl::decl;
// The tensors the forward and backward kernels share, as indexed: u/delta/z[row, d, t] (time
// contiguous), A[d, n], B/C time-varying [row, g, n, t] or constant [d, n] (their b and g strides
// 0, n and d the constant's), Dv/dbias[d], states [slot, d, n].
inline constexpr TensorArg u{"u", F, {"b", "d"}}, delta{"delta", F, {"b", "d"}, "dl"}, A{"A", F, {"d", "n"}},
    B{"B", F, {"b", "g", "n", "d"}}, C{"C", F, {"b", "g", "n", "d"}}, Dv{"Dv", F, {"d"}, "D"}, z{"z", F, {"b", "d"}},
    dbias{"dbias", F, {"d"}, "db"}, ws{"ws", F, {}}, cu{"cu", I, {""}, nullptr, M},
    initIdx{"init_idx", I, {""}, nullptr, M}, finalIdx{"final_idx", I, {""}, nullptr, M}, err{"err", I, {}, nullptr, M};

// N is meta:dstate; group: channels a group of B/C (D / G). ws: float32, the states at [key, d, n]
// (keys x D x N), then the summed dt at [key, d] (keys x D), then the initial-state copies [i, d, n].
inline constexpr TensorArg kFwdTensors[] = {u,
                                            delta,
                                            A,
                                            B,
                                            C,
                                            Dv,
                                            z,
                                            dbias,
                                            {"out", F, {"b", "d"}, "o"},
                                            {"init", F, {"slot", "d", "n"}},
                                            {"final", F, {"slot", "d", "n"}},
                                            ws,
                                            {"yacc", F, {"b", "d"}, "ya"},
                                            cu,
                                            initIdx,
                                            finalIdx,
                                            err};
inline constexpr const char* kFwdStrideOrder[] = {"u",  "delta", "z",    "out",   "yacc", "A",        "B",        "C",
                                                  "Dv", "dbias", "init", "final", "cu",   "init_idx", "final_idx"};
inline constexpr SizeArg kFwdSizes[] = {
    {"D", Bound},       {"L", TileDiv},        {"nseq", Count},  {"nslots_init", Count}, {"nslots_final", Count},
    {"max_len", Count}, {"keys_per_row", Div}, {"group", Bound}, {"ckpt_per_row", Div},  {"aux_base", Div}};
inline constexpr const char* kFwdFlags[] = {"b_varying", "c_varying",     "has_D",       "has_z",    "has_dbias",
                                            "softplus",  "has_cu",        "has_max_len", "has_init", "has_init_idx",
                                            "has_final", "has_final_idx", "multi_span",  "has_yacc"};
}  // namespace scan

inline constexpr dsl::Signature kScan{"selective_scan_fwd", scan::kFwdTensors,    scan::kFwdSizes, {},
                                      scan::kFwdFlags,      scan::kFwdStrideOrder};

// The schedule choices that depend on the call beyond the specialisation (the op binds them as
// meta values). Blocks an SM the register allocation must fit and warps a program (0: the
// chooser's) of the parallel class' passes, from the grid's programs: with many programs more
// resident warps hide the loads' latency better than spill-free code does; with few (one long
// sequence), the SMs have room anyway and spills only cost. Few programs (one long sequence: 320
// of 4 warps at D 5120) would leave 2 or 3 blocks on an SM, unevenly, so they run as programs of 2
// warps held to 5 blocks an SM. Many programs keep 4 warps; dense rows take 4 blocks an SM, packed
// rows 5.
struct ScanTiles {
  int64_t minBlocks = 0, numWarps = 0;
};
ScanTiles scanTiles(int64_t programs, bool packed);
// The serial class' threads a channel (meta:state_parts), from the call's sequences x channels: one
// thread a channel leaves few sequences short of threads, while splitting the states costs the
// exchange of dt, dt u and the groups' sums through shared memory, which pays only while the
// sequences x channels are few (4 threads a channel below 4 x 5120, 2 below 8 x 5120).
int64_t scanStateParts(int64_t channelSequences);

// Device status codes (err[0]; err[1..3] as named).
inline constexpr long long kErrScanCuSeqlens = 30;  // sequence i, cu[i], cu[i + 1]
inline constexpr long long kErrScanMaxLen = 31;     // sequence i, its length, max_seqlen
inline constexpr long long kErrScanInitSlot = 32;   // sequence i, slot, slots
inline constexpr long long kErrScanFinalSlot = 33;  // sequence i, slot, slots

}  // namespace ssmjit::kernels
