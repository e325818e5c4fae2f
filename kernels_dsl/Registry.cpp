#include "kernels_dsl/Registry.h"

#include "ssmjit/error.h"

namespace ssmjit::kernels {
dsl::KernelDef selectiveStateUpdateKernel();
}

namespace ssmjit::dsl {

static const std::vector<KernelDef>& registry() {
  static const std::vector<KernelDef> defs = {kernels::selectiveStateUpdateKernel()};
  return defs;
}

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
