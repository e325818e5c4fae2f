// The bounds every GPU test and `ssmjit demo` hold a kernel's result to, against the float64
// reference run on the same stored inputs, derived in one place from the stored dtype of the result
// and from how much fp32 arithmetic produced it. If a GPU run shows a bound too tight, adjust it
// here, once.
//
// Why these bounds. The reference reads the very bytes the kernel reads (16-bit inputs included),
// computes in float64 and rounds its result to the result's dtype with the same round-to-nearest-
// even. So only two things differ:
//  1. the kernel's fp32 arithmetic (hardware exp2 and reciprocal, fp32 sums): an error e on the
//     unrounded value, bounded below by Fp32Error (relative L2 over the tensor, and per element
//     relative to |ref| + rms(ref), which keeps elements near zero from dominating);
//  2. the final rounding to the stored dtype (unit roundoff u: fp32 2^-24, bf16 2^-8, fp16 2^-11).
//     Both sides round nearly the same value, so they differ by 0 or one ulp (at most 2u |ref|),
//     and a one-ulp flip happens only where a rounding boundary lies between the exact and the
//     fp32 value, with probability about |e| / ulp. Hence:
//       per element:  2u + e_element;
//       relative L2:  e_L2 + sqrt(2u e_L2) (the expected flips: E[diff^2] = |e| ulp, summed and
//                     bounded by Cauchy-Schwarz) + 2u sqrt(kFlipSlack / n) (a few flips more than
//                     expected: small tensors, where one flip weighs more).
// A dropped term, a wrong decay or a stale element is an O(1) relative error: far outside every
// bound below (bf16 at most 7.9e-3 per element, fp16 1.1e-3, fp32 1e-4 for short computations).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>

#include "ssmjit/tensor.h"
#include "tools/problems/HostTensor.h"

namespace ssmjit::testing {

// Unit roundoff of a float dtype (half the distance from 1 to the next value).
inline double unitRoundoff(DType t) { return t == DType::BF16 ? 0x1p-8 : t == DType::F16 ? 0x1p-11 : 0x1p-24; }

// A bound on the fp32 arithmetic's error before the final rounding.
struct Fp32Error {
  double relL2 = 0, element = 0;
};

// A few fp32 operations a result, or a dot over up to 256 states (the decode ops, the conv, the
// conv backward's dx, dweight and dbias, whose sums run in a fixed pairwise order): dot
// products of N terms lose about sqrt(N) ulp of the summed magnitudes, exp2 and the reciprocal 2
// ulp each. These are the bounds the fp32 suite has met since the ops were written.
inline constexpr Fp32Error kFp32Short{1e-5, 1e-4};

// A recurrence over `len` tokens (the scan forward): the decays' exp2 errors compound along the
// state's memory, a random walk over at most len steps, so the short bounds grow with
// sqrt(len / 256) past 256 tokens.
inline Fp32Error fp32Recurrence(int64_t len) {
  const double s = std::max(1.0, std::sqrt(double(len) / 256.0));
  return {kFp32Short.relL2 * s, kFp32Short.element * s};
}

// Gradients of a recurrence over `len` tokens (the scan backward): the adjoint recurrence, and
// sums over tokens and channels whose terms cancel (dA, dD, ddelta_bias, dB and dC), which lose
// about sqrt(terms) more ulp of their summed magnitudes: ten times the forward's.
inline Fp32Error fp32RecurrenceGradient(int64_t len) {
  const Fp32Error f = fp32Recurrence(len);
  return {10 * f.relL2, 10 * f.element};
}

// Two fp32 kernels that compute the same products and sum them in another order (an L-token call
// against L one-token calls with an fp32 state in between).
inline constexpr Fp32Error kFp32Reordered{1e-6, 1e-4};

// The rounding a chain of calls adds when it stores a 16-bit state between `steps` calls that a
// single call keeps in fp32: a random walk of up to u per step, shrunk by the decays.
inline Fp32Error chainedStateRounding(DType state, int64_t steps) {
  const double u = unitRoundoff(state);
  return {u * std::sqrt(double(steps) / 3.0), 2 * u * std::sqrt(double(steps))};
}

// Copies: values stored again as they came (conv states hold inputs), converted with the same
// round-to-nearest-even as the reference: equal bit for bit.
inline constexpr Fp32Error kExact{0, 0};

// Flips of one ulp allowed beyond the expected number (see above).
inline constexpr double kFlipSlack = 8;

// The bound for one result tensor stored as `stored`. `twiceRounded`: the fraction of its elements
// the op rounds to `stored` twice (stored, then read back, added to and stored again), each of
// which may differ from the once-rounded reference by one ulp: they add ulp sqrt(fraction) to the
// relative L2 (a per-element difference of one ulp is within the element bound already).
struct Bound {
  DType stored = DType::F32;
  Fp32Error fp32;
  double twiceRounded = 0;
  bool exact() const { return fp32.relL2 == 0 && fp32.element == 0; }
  double element() const { return exact() ? 0 : 2 * unitRoundoff(stored) + fp32.element; }
  double relL2(int64_t written) const {
    if (exact()) return 0;
    const double ulp = 2 * unitRoundoff(stored);
    return fp32.relL2 + std::sqrt(ulp * fp32.relL2) + ulp * std::sqrt(twiceRounded) +
           ulp * std::sqrt(kFlipSlack / double(std::max<int64_t>(1, written)));
  }
};
inline Bound bound(DType stored, Fp32Error fp32, double twiceRounded = 0) { return {stored, fp32, twiceRounded}; }

// What `c` measured against `b`, one line: the margin a GPU run leaves.
inline std::string measured(const Compared& c, const Bound& b) {
  char buf[200];
  std::snprintf(buf, sizeof buf, "%s: rel-L2 %.2e of %.2e, element %.2e of %.2e, %lld elements", dtypeName(b.stored),
                c.relL2, b.relL2(c.written), c.maxErr, b.element(), static_cast<long long>(c.written));
  return buf;
}

// Empty when `c` is within `b` with nothing else changed; else what is not (NaN-aware: a
// non-finite written element or a changed byte is a violation, and a NaN error fails both <=).
inline std::string outside(const Compared& c, const Bound& b) {
  if (c.violations != 0) return std::to_string(c.violations) + " violations, first " + c.first;
  if (!(c.relL2 <= b.relL2(c.written)) || !(c.maxErr <= b.element()))
    return "outside the bound (" + measured(c, b) + "); " + c.first;
  return {};
}

}  // namespace ssmjit::testing
