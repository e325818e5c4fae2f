// The Mamba-2 decode-step kernels' contract with their op (ssmjit::mamba2_decode_step): argument
// names and meaning. One kernel replays the accepted cached drafts into the conv and SSM states
// (commit) and verifies the new drafts from the corrected state (flags replay / verify). Its
// deferred-commit twin (kDecodeStepDeferred: the same arguments, then a ring) replays the ring's
// tokens and the accepted drafts from the checkpoint states, appends the drafts to the ring and
// commits only when the ring would overflow (or with replay only).
// Grid: (cdiv(P, meta:BLOCK_P), H / hpp, batch). A program owns the SSM state rows of the P
// block of hpp heads (hpp divides H / G, at most 8, chosen at launch) and their x conv channels;
// it runs the B and C conv of their group itself. What a row's programs share (the B/C conv state
// columns, the cached B/C and dt drafts, the count) is written by the last of them to arrive
// (counter arrivals[slot]), after all have read it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels_dsl/Signature.h"

namespace ssmjit::kernels {

// The most heads one program runs (hpp; their dt rows are staged together).
inline constexpr int64_t kMaxHeadsPerProgram = 8;
// Calls with at least this many (sequence, head) pairs get the large-batch tiles (see chooseMeta):
// about 8 a streaming multiprocessor of an H100.
inline constexpr int64_t kDecodeLargeBatchHeads = 1024;
// Heads per program (the size hpp, set at launch): each program stages its group's B and C conv
// (and the dt of its heads) once for its heads, so past a few rows several heads share one staging,
// while the launch keeps at least 128 programs, or 512 with the large-batch tiles (5 programs an
// SM). hpp divides H / G (the heads share a group) and stays within kMaxHeadsPerProgram (its div
// class is then 1, so one specialisation serves every batch). At batch 1 one head a program is
// fastest; from batch 4 sharing the staging wins.
int64_t decodeHeadsPerProgram(int64_t batch, int64_t H, int64_t G, int64_t programsPerHead, bool largeBatch);

namespace decode {
using namespace dsl::decl;
// Channels ch in xBC order: x h*P+p | B H*P+g*N+n | C ...; arrivals[slot] is an int32 counter,
// err the int64[4] device status record. The conv width W is meta:width.
inline constexpr TensorArg kTensors[] = {{"conv_state", F, {"slot", "c", "k"}, "cs"},
                                         {"ssm_state", F, {"slot", "h", "p", "n"}, "ss"},
                                         {"xbc_cache", F, {"slot", "t", "c"}, "xc"},
                                         {"dt_cache", F, {"slot", "t", "h"}, "dc"},
                                         {"conv_w", F, {"c", "k"}, "w"},
                                         {"conv_b", F, {"c"}, "cb"},
                                         {"A", F, {"h"}},
                                         {"D", F, {"h"}},
                                         {"dt_bias", F, {"h"}, "dtb"},
                                         {"xbc", F, {"b", "t", "c"}},
                                         {"dt", F, {"b", "t", "h"}},
                                         {"z", F, {"b", "t", "h", "p"}},
                                         {"y", F, {"b", "t", "h", "p"}},
                                         {"state_idx", I, {"b"}, "idx", M},
                                         {"accepted", I, {"b"}, "acc", M},
                                         {"cached", I, {""}, nullptr, M},
                                         {"arrivals", I, {}, nullptr, M},
                                         {"err", I, {}, nullptr, M},
                                         // the deferred kernel's ring (R tokens a slot) and its count
                                         {"xbc_ring", F, {"slot", "t", "c"}, "xr"},
                                         {"dt_ring", F, {"slot", "t", "h"}, "dr"},
                                         {"ring", I, {""}, nullptr, M}};
inline constexpr int kCommitTensors = 18;  // the commit-every-step kernel's: all but the ring's
static_assert(dsl::detail::sameName(kTensors[kCommitTensors - 1].name, "err"));
// L: drafts of this step (0 with replay only); Lc: the cache depth, R the ring's (the staged token
// tiles cover R + Lc + L); hpp: heads a program, chosen at launch.
inline constexpr SizeArg kSizes[] = {{"batch", Count}, {"nslots", Count}, {"H", Bound},  {"P", Bound},   {"N", Bound},
                                     {"G", Bound},     {"L", Bound},      {"Lc", Bound}, {"hpp", Count}, {"R", Bound}};
inline constexpr int kCommitSizes = 9;  // all but R
// The first n entries of a table.
template <class T, std::size_t Size>
constexpr dsl::List<T> firstOf(const T (&a)[Size], int n) {
  dsl::List<T> l(a);
  l.n = n;
  return l;
}
inline constexpr const char* kScalars[] = {"dt_min", "dt_max"};
inline constexpr const char* kFlags[] = {"has_conv_bias", "has_D",         "has_z",  "has_dt_bias", "dt_softplus",
                                         "has_clamp",     "has_state_idx", "replay", "verify"};
}  // namespace decode

inline constexpr dsl::Signature kDecodeStep{
    "mamba2_decode_step", decode::firstOf(decode::kTensors, decode::kCommitTensors),
    decode::firstOf(decode::kSizes, decode::kCommitSizes), decode::kScalars, decode::kFlags};
inline constexpr dsl::Signature kDecodeStepDeferred{"mamba2_decode_step_deferred", decode::kTensors, decode::kSizes,
                                                    decode::kScalars, decode::kFlags};

// Device status codes (err[0]; err[1] = row b, err[2] = value, err[3] = bound).
inline constexpr long long kErrDecodeSlot = 20;      // state_indices[b] outside [0, S)
inline constexpr long long kErrDecodeAccepted = 21;  // num_accepted[b] outside [0, cached_tokens[slot]]
inline constexpr long long kErrDecodeRing = 22;      // ring_tokens[slot of row b] outside [0, R]

}  // namespace ssmjit::kernels
