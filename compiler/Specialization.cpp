// Specialization: the bound values of one kernel call. hash() runs on every op call (the memory
// cache lookup), so it walks the fields directly instead of building canonical().
#include "compiler/Specialization.h"

#include "compiler/Hash.h"
#include "ssmjit/error.h"

namespace ssmjit {

namespace {

// ';' and '=' delimit canonical(); a name containing them would make two different
// specialisations print (and be cached on disk) identically.
void checkName(const std::string& name, const std::string& kernel) {
  if (name.empty() || name.find_first_of(";=") != std::string::npos)
    throw Error(Error::Kind::Internal, "Specialization(" + kernel + "): binding name '" + name +
                                           "' is invalid (expected non-empty, without ';' or '=')");
}

// hash() runs on every op call over ~70 bindings: compiler/Hash.h's word-at-a-time mixing keeps it
// a fraction of a microsecond. In-process only: the disk cache keys on canonical().
using hash::finalize;
using hash::kSeed;
using hash::mixString;
using hash::mixWord;

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
  throw Error(Error::Kind::Internal, "Specialization(" + kernel + " for " + arch + "): no value bound for '" + name +
                                         "' (have " + std::to_string(values.size()) + " bindings)");
}

int64_t Specialization::get(const std::string& name, int64_t dflt) const {
  const int64_t* v = find(name);
  return v ? *v : dflt;
}

bool Specialization::provesMultiple(const std::string& name, int64_t m) const {
  if (m == 1) return true;
  if (const int64_t* v = find(name)) return *v % m == 0;
  const int64_t* d = find("div:" + name);
  return d && *d % m == 0;
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
  uint64_t hn = mixString(mixString(kSeed, kernel), arch);
  uint64_t hv = mixWord(kSeed, values.size());
  for (const auto& kv : values) {
    hn = mixString(hn, kv.first);
    hv = mixWord(hv, static_cast<uint64_t>(kv.second));
  }
  return static_cast<size_t>(finalize(hn ^ (hv * 0x9e3779b97f4a7c15ull)));
}

}  // namespace ssmjit
