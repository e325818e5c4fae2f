#include "kernels_dsl/Registry.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "compiler/BuildInfo.h"
#include "compiler/Knobs.h"
#include "kernels_dsl/Dsl.h"
#include "ssmjit/error.h"

namespace ssmjit::dsl {

namespace {

std::vector<std::pair<std::string, KernelDef>>& registrations() {
  static std::vector<std::pair<std::string, KernelDef>> r;
  return r;
}

// The registered definitions by name, each with its family folder's hash.
const std::vector<KernelDef>& registry() {
  static const std::vector<KernelDef> defs = [] {
    std::vector<KernelDef> out;
    for (auto& [family, def] : registrations()) {
      const char* h = kernelDefinitionHash(family.c_str());
      if (!h)
        throw Error(Error::Kind::Internal, "kernel registry: no definition hash for " + def.name + "'s family '" +
                                               family + "' (expected a folder kernels_dsl/" + family + "/)");
      out.push_back(def);
      out.back().definitionHash = h;
    }
    std::sort(out.begin(), out.end(), [](const KernelDef& a, const KernelDef& b) { return a.name < b.name; });
    return out;
  }();
  return defs;
}

}  // namespace

KernelRegistration::KernelRegistration(const char* file, KernelDef def) {
  registrations().emplace_back(std::filesystem::path(file).parent_path().filename().string(), std::move(def));
}

const KernelDef& findKernel(const std::string& name) {
  for (auto& d : registry())
    if (d.name == name) return d;
  std::string known;
  for (auto& d : registry()) known += (known.empty() ? "" : ", ") + d.name;
  throw Error(Error::Kind::InvalidArgument, "kernel: unknown kernel '" + name + "'; expected one of: " + known);
}

std::vector<std::string> kernelNames() {
  std::vector<std::string> out;
  for (auto& d : registry()) out.push_back(d.name);
  return out;
}

namespace {
// An SSMJIT_META entry ("meta:NAME", V) as it is given: "NAME=V".
std::string givenAs(const std::string& name, int64_t value) {
  return name.substr(name.find(':') + 1) + "=" + std::to_string(value);
}

// SSMJIT_META's values for `kernel` (see compiler/Knobs.cpp), parsed once per process.
std::vector<std::pair<std::string, int64_t>> metaOverrides(const std::string& kernel) {
  static const std::string knob = knobValue("SSMJIT_META");
  std::vector<std::pair<std::string, int64_t>> out;
  size_t at = 0;
  while (at < knob.size()) {
    const size_t end = std::min(knob.find(';', at), knob.size());
    const std::string part = knob.substr(at, end - at);
    at = end + 1;
    const size_t colon = part.find(':');
    if (colon == std::string::npos)
      throw Error(Error::Kind::InvalidArgument, "SSMJIT_META: '" + part + "' is not KERNEL:NAME=V,...");
    if (part.substr(0, colon) != kernel) continue;
    std::stringstream items(part.substr(colon + 1));
    std::string item;
    while (std::getline(items, item, ',')) {
      const size_t eq = item.find('=');
      char* rest = nullptr;
      const long long v = eq == std::string::npos ? 0 : std::strtoll(item.c_str() + eq + 1, &rest, 10);
      if (eq == std::string::npos || eq == 0 || !rest || *rest != '\0' || rest == item.c_str() + eq + 1)
        throw Error(Error::Kind::InvalidArgument,
                    "SSMJIT_META: '" + item + "' (kernel " + kernel + ") is not NAME=INTEGER");
      out.emplace_back("meta:" + item.substr(0, eq), v);
    }
  }
  return out;
}
}  // namespace

std::optional<int64_t> metaOverride(const std::string& kernel, const std::string& meta) {
  std::optional<int64_t> v;
  for (const auto& [name, value] : metaOverrides(kernel))
    if (name == meta) v = value;
  return v;
}

std::string metaOverridesText(const std::string& kernel) {
  std::string out;
  for (const auto& [name, value] : metaOverrides(kernel)) out += (out.empty() ? "" : ",") + givenAs(name, value);
  return out;
}

void completeSpecialization(Specialization& spec) {
  for (const auto& [name, value] : metaOverrides(spec.kernel)) {
    // Meta values the op binds itself are its call's structure (a pass, a tile its workspace
    // holds, a width): a different one would not fail, it would compute something else. Blocks
    // an SM and warps a program only schedule.
    const int64_t* bound = spec.find(name);
    if (bound && *bound != value && name != "meta:min_blocks" && name != "meta:num_warps")
      throw Error(Error::Kind::InvalidArgument, spec.kernel + ": SSMJIT_META " + givenAs(name, value) +
                                                    " changes a value this call binds itself (" +
                                                    std::to_string(*bound) + ")");
    spec.set(name, value);
  }
  findKernel(spec.kernel).chooseMeta(spec);
  if (const int64_t mb = spec.get("meta:min_blocks", 0); mb < 0 || mb > 32)
    throw Error(Error::Kind::InvalidArgument, spec.kernel + ": meta min_blocks (SSMJIT_META) is " + std::to_string(mb) +
                                                  ", expected 0 (the compiler's choice) or 1..32 "
                                                  "blocks an SM");
  if (const int64_t u = spec.get("meta:unroll_ops", 0); u < 0)
    throw Error(Error::Kind::InvalidArgument, spec.kernel + ": meta unroll_ops (SSMJIT_META) is " + std::to_string(u) +
                                                  ", expected >= 0 operations (trip count x body)");
  if (const int64_t u = spec.get("meta:unroll_lines", 0); u < 0 || u > (int64_t{1} << 20))
    throw Error(Error::Kind::InvalidArgument, spec.kernel + ": meta unroll_lines (SSMJIT_META) is " +
                                                  std::to_string(u) + ", expected 0..1048576 lines of repeated source");
  if (const auto* il = spec.find("meta:inner_lanes"); il && (!isPow2(*il) || *il > 32))
    throw Error(Error::Kind::InvalidArgument, spec.kernel + ": meta inner_lanes (SSMJIT_META) is " +
                                                  std::to_string(*il) + ", expected a power of two in 1..32 lanes");
}

}  // namespace ssmjit::dsl
