// Specialization: the bound values of one kernel call. hash() runs on every op call (the memory
// cache lookup), so it walks the fields directly instead of building canonical().
#include "compiler/Specialization.h"

#include <cstring>

#include "ssmjit/error.h"

namespace ssmjit {

const char* scalarTypeName(ScalarType t) {
  switch (t) {
    case ScalarType::F32: return "float32";
    case ScalarType::F16: return "float16";
    case ScalarType::BF16: return "bfloat16";
    case ScalarType::I32: return "int32";
    case ScalarType::I64: return "int64";
  }
  return "unknown";
}

int scalarTypeBytes(ScalarType t) {
  switch (t) {
    case ScalarType::F32: return 4;
    case ScalarType::F16: return 2;
    case ScalarType::BF16: return 2;
    case ScalarType::I32: return 4;
    case ScalarType::I64: return 8;
  }
  throw Error(Error::Kind::Internal,
              "scalarTypeBytes: unknown ScalarType " + std::to_string(static_cast<int>(t)));
}

namespace {

// ';' and '=' delimit canonical(); a name containing them would make two different
// specialisations print (and be cached on disk) identically.
void checkName(const std::string& name, const std::string& kernel) {
  if (name.empty() || name.find_first_of(";=") != std::string::npos)
    throw Error(Error::Kind::Internal, "Specialization(" + kernel + "): binding name '" + name +
                                           "' is invalid (expected non-empty, without ';' or '=')");
}

// hash() runs on every op call over ~70 bindings, so it consumes 8 bytes per step (byte-wise
// FNV-1a took ~1.8 us for a selective_state_update key; this takes a fraction of that). Each step
// is FNV-1a's xor-multiply on a whole word with a 64-bit odd multiplier, plus a fold of the high
// half so that high input bits reach the low bits that bucket indices use; a final avalanche
// (MurmurHash3 fmix64) finishes it. In-process only: the disk cache keys on canonical().
constexpr uint64_t kHashSeed = 14695981039346656037ull;  // FNV-1a 64 offset basis
constexpr uint64_t kHashMul = 0xff51afd7ed558ccdull;

inline uint64_t mixWord(uint64_t h, uint64_t w) {
  h = (h ^ w) * kHashMul;
  return h ^ (h >> 32);
}

// Length-prefixed, so ("ab", "c") and ("a", "bc") differ.
inline uint64_t mixString(uint64_t h, const std::string& s) {
  const char* p = s.data();
  size_t n = s.size();
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

inline uint64_t finalize(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  return h;
}

}  // namespace

Specialization& Specialization::set(const std::string& name, int64_t v) {
  // Re-binding keeps the original position, so canonical() does not depend on how often a value
  // was overwritten.
  for (auto& kv : values) {
    if (kv.first == name) {
      kv.second = v;
      return *this;
    }
  }
  checkName(name, kernel);
  values.emplace_back(name, v);
  return *this;
}

const int64_t* Specialization::find(const std::string& name) const {
  for (const auto& kv : values)
    if (kv.first == name) return &kv.second;
  return nullptr;
}

int64_t Specialization::get(const std::string& name) const {
  if (const int64_t* v = find(name)) return *v;
  throw Error(Error::Kind::Internal, "Specialization(" + kernel + " for " + arch +
                                         "): no value bound for '" + name + "' (have " +
                                         std::to_string(values.size()) + " bindings)");
}

int64_t Specialization::get(const std::string& name, int64_t dflt) const {
  const int64_t* v = find(name);
  return v ? *v : dflt;
}

std::string Specialization::canonical() const {
  std::string out;
  size_t n = kernel.size() + arch.size() + 2;
  for (const auto& kv : values) n += kv.first.size() + 22;
  out.reserve(n);
  out += kernel;
  out += ';';
  out += arch;
  for (const auto& kv : values) {
    out += ';';
    out += kv.first;
    out += '=';
    out += std::to_string(kv.second);
  }
  return out;
}

bool Specialization::operator==(const Specialization& o) const {
  return kernel == o.kernel && arch == o.arch && values == o.values;
}

size_t Specialization::hash() const {
  // Same content as canonical() (kernel, arch, then each name and value in order), so equal
  // specialisations hash equally. Names and values run in two independent chains so that the CPU
  // overlaps their multiplies; they are combined at the end.
  uint64_t hn = mixString(mixString(kHashSeed, kernel), arch);
  uint64_t hv = mixWord(kHashSeed, values.size());
  for (const auto& kv : values) {
    hn = mixString(hn, kv.first);
    hv = mixWord(hv, static_cast<uint64_t>(kv.second));
  }
  return static_cast<size_t>(finalize(hn ^ (hv * 0x9e3779b97f4a7c15ull)));
}

}  // namespace ssmjit
