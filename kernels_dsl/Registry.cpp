#include "kernels_dsl/Registry.h"

#include "compiler/BuildInfo.h"
#include "ssmjit/error.h"

namespace ssmjit::kernels {
dsl::KernelDef selectiveStateUpdateKernel();
dsl::KernelDef convForwardKernel();
dsl::KernelDef convFinalStateKernel();
dsl::KernelDef convUpdateKernel();
dsl::KernelDef convBackwardKernel();
dsl::KernelDef convBackwardReduceKernel();
dsl::KernelDef convBackwardStatesKernel();
}

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
  };
  return defs;
}

}  // namespace

const KernelDef& findKernel(const std::string& name) {
  for (auto& d : registry())
    if (d.name == name) return d;
  std::string known;
  for (auto& d : registry()) known += (known.empty() ? "" : ", ") + d.name;
  throw Error(Error::Kind::InvalidArgument,
              "kernel: unknown kernel '" + name + "'; expected one of: " + known);
}

std::vector<std::string> kernelNames() {
  std::vector<std::string> out;
  for (auto& d : registry()) out.push_back(d.name);
  return out;
}

void completeSpecialization(Specialization& spec) { findKernel(spec.kernel).chooseMeta(spec); }

}  // namespace ssmjit::dsl
