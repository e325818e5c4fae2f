// Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3"), the uniform that
// token sampling draws: one function for the sample_draw kernel (T = dsl::Value, 64-bit index
// math) and the float64 reference (T = int64_t), so that both draw the same number. Written with
// what both have: 64-bit signed + - * / % on values in [0, 2^32) and the bitwise and / or found
// by bitAnd / bitOr (xor is (a | b) - (a & b)); products of two 32-bit words are split at 16
// bits so that none exceeds 2^49.
#pragma once
#include <array>
#include <cstdint>

namespace ssmjit::kernels {

inline int64_t bitAnd(int64_t a, int64_t b) { return a & b; }
inline int64_t bitOr(int64_t a, int64_t b) { return a | b; }

namespace philox {
inline constexpr int64_t kWord = int64_t{1} << 32, kHalf = int64_t{1} << 16;
inline constexpr int64_t kMul0 = 0xD2511F53, kMul1 = 0xCD9E8D57;    // the round multipliers
inline constexpr int64_t kWeyl0 = 0x9E3779B9, kWeyl1 = 0xBB67AE85;  // the key schedule's increments

template <class T>
T bitXor(T a, T b) {
  return bitOr(a, b) - bitAnd(a, b);
}
// The high and low words of m * b, both in [0, 2^32).
template <class T>
std::array<T, 2> mulHiLo(int64_t m, T b) {
  T p0 = (b % kHalf) * m, p1 = (b / kHalf) * m;  // each < 2^48
  T t = p0 + (p1 % kHalf) * kHalf;                // m * b = t + (p1 / 2^16) * 2^32
  return {p1 / kHalf + t / kWord, t % kWord};
}
// A signed 64-bit value's two's-complement words (low, high).
template <class T>
std::array<T, 2> words(T v) {
  T lo = (v % kWord + kWord) % kWord;
  T hi = (v - lo) / kWord;  // the signed high word
  return {lo, (hi % kWord + kWord) % kWord};
}
}  // namespace philox

// The first output word of Philox-4x32-10 on counter (step_lo, step_hi, key_lo, key_hi) with key
// (seed_lo, seed_hi): step and key are signed 64-bit values, seed's words in [0, 2^32). The
// uniform is (word / 256) * 2^-24, in [0, 1) and exact in float32.
template <class T>
T philoxWord(T seedLo, T seedHi, T key, T step) {
  using namespace philox;
  auto [s0, s1] = words(step);
  auto [r0, r1] = words(key);
  std::array<T, 4> c{s0, s1, r0, r1};
  T k0 = seedLo, k1 = seedHi;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 = (k0 + kWeyl0) % kWord;
      k1 = (k1 + kWeyl1) % kWord;
    }
    auto [hi0, lo0] = mulHiLo(kMul0, c[0]);
    auto [hi1, lo1] = mulHiLo(kMul1, c[2]);
    c = {bitXor(bitXor(hi1, c[1]), k0), lo1, bitXor(bitXor(hi0, c[3]), k1), lo0};
  }
  return c[0];
}

}  // namespace ssmjit::kernels
