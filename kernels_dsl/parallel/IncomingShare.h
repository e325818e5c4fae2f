// What the context-parallel scan's incoming-state kernels share (ScanCpCorrect.h,
// ScanCpStateGrad.h): they walk the first sequence of row 0 (or a chunk of it) in [BLOCK_D,
// BLOCK_T] tiles, carrying each channel's running sum of dt' (cum), and weigh token t's state n by
// exp(A[d, n] cum[d, t]), the share of the incoming state that reaches it, as exp2(A2 cum) with
// A2 = A log2(e), the selective scan's form. With softplus (dt' >= 0, so cum only grows) and
// every A[d, n] <= 0 of the program, once A2 cum is below kUnderflow2 for all of them every later
// exp2 is exactly 0 (the hardware's exp2 flushes results below 2^-126), and the program skips its
// remaining tiles: each would add 0.
// Builds DSL code from the kernels' common arguments (delta, dbias, cu, L and their strides and
// flags); no state of its own.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "kernels_dsl/Dsl.h"

namespace ssmjit::kernels {

inline constexpr double kUnderflow2 = -160.0;

struct IncomingShare {
  dsl::Value d, mD;  // [BD]: the program's channels and which exist
  dsl::Value len;    // the first sequence's length: cu[1] when packed, else L
  // Each channel's largest A2 over the program's states (the slowest decay), and whether the
  // program may skip tiles once the shares have underflowed (softplus on, every A2 <= 0, and
  // `finite`: what the shares multiply is finite).
  dsl::Value slowest, decays;
};

// The program's channels (block programId(0) of BD) and its sequence's length.
IncomingShare incomingShare(dsl::KernelBuilder& k, int64_t BD);
// The first sequence's final-state slot: fidx[0] with has_fidx, else 0 (the caller takes a slot
// outside [0, S) as none).
dsl::Value firstFinalSlot(dsl::KernelBuilder& k);
// Sets `slowest` and `decays` from the largest A2 of each channel over the program's states and
// whether the multiplied operand is finite (a scalar).
void setDecay(dsl::KernelBuilder& k, IncomingShare& s, dsl::Value slowestA, dsl::Value finite);

// dt' of the [BD, BT] tile of tokens tE ([1, BT]), 0 where the mask m is false.
dsl::Value dtPrime(dsl::KernelBuilder& k, const IncomingShare& s, dsl::Value tE, dsl::Value m);

// The [BD, BT] tile of tokens [t0, t0 + BT): the running sums of dt' seeded with `carry` ([BD],
// the sums before t0), 0 past len or D. Returns {cum, the tile's new carry}.
std::vector<dsl::Value> cumulativeDt(dsl::KernelBuilder& k, const IncomingShare& s, dsl::Value tE, dsl::Value m,
                                     dsl::Value carry);

// for t0 from lo to hi by BT tokens: `tile(t0, carries)` returns the next carries, the first of
// which is the running sum of dt'; tiles past the shares' underflow are skipped (their carries
// kept). Returns the final carries.
using ShareTile = std::function<std::vector<dsl::Value>(dsl::Value t0, const std::vector<dsl::Value>& carries)>;
std::vector<dsl::Value> walkShares(dsl::KernelBuilder& k, const IncomingShare& s, int64_t BT, dsl::Value lo,
                                   dsl::Value hi, const std::vector<dsl::Value>& inits, const ShareTile& tile);

}  // namespace ssmjit::kernels
