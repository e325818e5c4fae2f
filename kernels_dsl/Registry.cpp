#include "kernels_dsl/Registry.h"

#include <algorithm>
#include <cstdlib>
#include <sstream>

#include "compiler/BuildInfo.h"
#include "compiler/Knobs.h"
#include "kernels_dsl/Dsl.h"
#include "ssmjit/error.h"

namespace ssmjit::kernels {
dsl::KernelDef selectiveStateUpdateKernel();
dsl::KernelDef convForwardKernel();
dsl::KernelDef convFinalStateKernel();
dsl::KernelDef convUpdateKernel();
dsl::KernelDef convBackwardKernel();
dsl::KernelDef convBackwardReduceKernel();
dsl::KernelDef convBackwardStatesKernel();
dsl::KernelDef decodeStepKernel();
dsl::KernelDef scanKernel();
dsl::KernelDef scanBwdKernel();
dsl::KernelDef scanBwdSumKernel();
dsl::KernelDef ssdChunkCumsumKernel();
dsl::KernelDef ssdBmmKernel();
dsl::KernelDef ssdChunkStateKernel();
dsl::KernelDef ssdStatePassingKernel();
dsl::KernelDef ssdChunkScanKernel();
dsl::KernelDef ssdBwdDstatesKernel();
dsl::KernelDef ssdBwdStatePassingKernel();
dsl::KernelDef ssdBwdDxKernel();
dsl::KernelDef ssdBwdDcbKernel();
dsl::KernelDef ssdBwdDbKernel();
dsl::KernelDef ssdBwdDcKernel();
dsl::KernelDef ssdBwdDtKernel();
dsl::KernelDef ssdBwdSumsKernel();
}  // namespace ssmjit::kernels

namespace ssmjit::dsl {

namespace {

// A definition with the hash of the file it lives in (kernels_dsl/<file>.cpp, listed in
// cmake/BuildInfo.cmake).
KernelDef withHash(KernelDef def, const char* file) {
  const char* h = kernelDefinitionHash(file);
  if (!h)
    throw Error(Error::Kind::Internal, "kernel registry: no definition hash for kernels_dsl/" + std::string(file) +
                                           " (add it to SSMJIT_KERNEL_DEFINITIONS in cmake/BuildInfo.cmake)");
  def.definitionHash = h;
  return def;
}

const std::vector<KernelDef>& registry() {
  static const std::vector<KernelDef> defs = {
      withHash(kernels::selectiveStateUpdateKernel(), "SelectiveStateUpdate"),
      withHash(kernels::convForwardKernel(), "CausalConv1d"),
      withHash(kernels::convFinalStateKernel(), "CausalConv1d"),
      withHash(kernels::convUpdateKernel(), "CausalConv1dUpdate"),
      withHash(kernels::convBackwardKernel(), "CausalConv1dBackward"),
      withHash(kernels::convBackwardReduceKernel(), "CausalConv1dBackward"),
      withHash(kernels::convBackwardStatesKernel(), "CausalConv1dBackward"),
      withHash(kernels::decodeStepKernel(), "Mamba2DecodeStep"),
      withHash(kernels::scanKernel(), "SelectiveScan"),
      withHash(kernels::scanBwdKernel(), "SelectiveScanBackward"),
      withHash(kernels::scanBwdSumKernel(), "SelectiveScanBackward"),
      withHash(kernels::ssdChunkCumsumKernel(), "SsdChunkCumsum"),
      withHash(kernels::ssdBmmKernel(), "SsdBmm"),
      withHash(kernels::ssdChunkStateKernel(), "SsdChunkState"),
      withHash(kernels::ssdStatePassingKernel(), "SsdStatePassing"),
      withHash(kernels::ssdChunkScanKernel(), "SsdChunkScan"),
      withHash(kernels::ssdBwdDstatesKernel(), "SsdBwdDstates"),
      withHash(kernels::ssdBwdStatePassingKernel(), "SsdBwdStatePassing"),
      withHash(kernels::ssdBwdDxKernel(), "SsdBwdDx"),
      withHash(kernels::ssdBwdDcbKernel(), "SsdBwdDcb"),
      withHash(kernels::ssdBwdDbKernel(), "SsdBwdBC"),
      withHash(kernels::ssdBwdDcKernel(), "SsdBwdBC"),
      withHash(kernels::ssdBwdDtKernel(), "SsdBwdDt"),
      withHash(kernels::ssdBwdSumsKernel(), "SsdBwdDt"),
  };
  return defs;
}

}  // namespace

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

void completeSpecialization(Specialization& spec) {
  for (const auto& [name, value] : metaOverrides(spec.kernel)) spec.set(name, value);
  findKernel(spec.kernel).chooseMeta(spec);
  if (const int64_t mb = spec.get("meta:min_blocks", 0); mb < 0 || mb > 32)
    throw Error(Error::Kind::InvalidArgument, spec.kernel + ": meta min_blocks (SSMJIT_META) is " + std::to_string(mb) +
                                                  ", expected 0 (the compiler's choice) or 1..32 "
                                                  "blocks an SM");
  if (const int64_t u = spec.get("meta:unroll_ops", 0); u < 0)
    throw Error(Error::Kind::InvalidArgument, spec.kernel + ": meta unroll_ops (SSMJIT_META) is " + std::to_string(u) +
                                                  ", expected >= 0 operations (trip count x body)");
  if (const auto* il = spec.find("meta:inner_lanes"); il && (!isPow2(*il) || *il > 32))
    throw Error(Error::Kind::InvalidArgument, spec.kernel + ": meta inner_lanes (SSMJIT_META) is " +
                                                  std::to_string(*il) + ", expected a power of two in 1..32 lanes");
}

}  // namespace ssmjit::dsl
