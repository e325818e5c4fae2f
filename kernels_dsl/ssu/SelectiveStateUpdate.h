// The selective-state-update kernel's contract with its op: its signature and status codes.
// One kernel covers Mamba-1 (H = 1, P = D, A per element, dt per channel) and Mamba-2 (A and dt
// per head: flag per_head), one token or L tokens. Grid: (cdiv(P, meta:BLOCK_P), H, batch).
#pragma once

#include "kernels_dsl/Signature.h"

namespace ssmjit::kernels {

namespace ssu {
using namespace dsl::decl;
// Axes: slot, b batch, l token, h head, p head dim (Mamba-1: channel), n state, g group (g = h /
// (H / G)). The op gives a stride 0 to an axis a tensor lacks (Mamba-1: h and g; the one-token op:
// l) and to a bound axis of size 1. Mamba-2's dt has no p axis (dt per head) and its A only h.
// state_idx[b] and dst_idx[b, l] are slot indices; err is the int64[4] device status record (see
// DeviceStatus).
inline constexpr TensorArg kTensors[] = {{"state", F, {"slot", "h", "p", "n"}},
                                         {"x", F, {"b", "l", "h", "p"}},
                                         {"dt", F, {"b", "l", "h", "p"}},
                                         {"A", F, {"h", "p", "n"}},
                                         {"B", F, {"b", "l", "g", "n"}},
                                         {"C", F, {"b", "l", "g", "n"}},
                                         {"D", F, {"h", "p"}},
                                         {"z", F, {"b", "l", "h", "p"}},
                                         {"dt_bias", F, {"h", "p"}, "dtb"},
                                         {"out", F, {"b", "l", "h", "p"}},
                                         {"state_idx", I, {"b"}, "idx", M},
                                         {"dst_idx", I, {"b", "l"}, "dst", M},
                                         {"err", I, {}, nullptr, M}};
inline constexpr SizeArg kSizes[] = {{"batch", Count}, {"nslots", Count}, {"H", Bound}, {"P", Bound},
                                     {"N", Bound},     {"G", Bound},      {"L", Bound}};
inline constexpr const char* kScalars[] = {"dt_min", "dt_max"};
inline constexpr const char* kFlags[] = {"has_D",     "has_z",         "has_dt_bias", "dt_softplus",
                                         "has_clamp", "has_state_idx", "per_head"};
// The write mode: 0 final, 1 none, 2 per token (into dst_idx[b, l]).
inline constexpr const char* kModes[] = {"state_write"};
}  // namespace ssu

inline constexpr dsl::Signature kSsu{
    "selective_state_update", ssu::kTensors, ssu::kSizes, ssu::kScalars, ssu::kFlags, {}, ssu::kModes};

// Device status record codes written through `err` (first error wins):
// err[0] = code, err[1] = row b, err[2] = offending value, err[3] = bound.
inline constexpr long long kErrSlotOutOfRange = 1;
inline constexpr long long kErrDstSlotOutOfRange = 2;

}  // namespace ssmjit::kernels
