// The one non-cryptographic hash of ssmjit: in-process keys (Specialization::hash), content hashes
// (the device library, disk-cache file names) and blob checksums. It consumes 8 bytes per step:
// FNV-1a's xor-multiply on a whole word with a 64-bit odd multiplier plus a fold of the high half
// (so high input bits reach the low bits bucket indices use), and MurmurHash3's fmix64 at the end.
// Not for adversaries: the disk cache re-checks the full key text stored in each blob, so a
// collision is a miss, never a wrong kernel.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace ssmjit::hash {

constexpr uint64_t kSeed = 14695981039346656037ull;  // FNV-1a 64 offset basis
constexpr uint64_t kMul = 0xff51afd7ed558ccdull;

inline uint64_t mixWord(uint64_t h, uint64_t w) {
  h = (h ^ w) * kMul;
  return h ^ (h >> 32);
}

// Length-prefixed, so ("ab", "c") and ("a", "bc") differ.
inline uint64_t mixBytes(uint64_t h, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  h = mixWord(h, n);
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    h = mixWord(h, w);
  }
  if (n) {
    // A byte loop, not memcpy: a variable-length memcpy is a library call, slower than the rest.
    uint64_t w = 0;
    for (size_t i = 0; i < n; ++i) w |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
    h = mixWord(h, w);
  }
  return h;
}

inline uint64_t mixString(uint64_t h, const std::string& s) { return mixBytes(h, s.data(), s.size()); }

inline uint64_t finalize(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  return h;
}

// A whole buffer's 64-bit hash.
inline uint64_t bytes64(const void* data, size_t n, uint64_t seed = kSeed) { return finalize(mixBytes(seed, data, n)); }

// Lower-case hex of `bits` (64 or 128) bits of the content hash of `s`: two independent seeds for
// 128 bits (content-addressed file names).
std::string hex(const std::string& s, int bits);

}  // namespace ssmjit::hash
