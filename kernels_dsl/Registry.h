// The kernel definitions written in the DSL, by name. MLIR-free.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "compiler/Specialization.h"
#include "kernels_dsl/Signature.h"

namespace ssmjit::dsl {
class KernelBuilder;

struct KernelDef {
  std::string name;
  // Builds the generic kernel. Reads the "meta:*" values of the specialisation (block sizes,
  // warps, index bits), and may read a bound size or flag where it picks the code's shape (the
  // scan: whole channel blocks, B/C staged through shared memory); the rest stays symbolic until
  // the specialise pass binds it. Every value read is part of the specialisation, so of the key.
  std::function<void(KernelBuilder&, const Specialization&)> build;
  // Fills the "meta:*" values a call did not set (block sizes by heuristic). Cheap: runs per call.
  std::function<void(Specialization&)> chooseMeta;
  // The kernel's arguments (a registered kernel has one; compileKernel declares it before the
  // build runs). A test's own kernel may leave it out and add its arguments one by one.
  const Signature* signature = nullptr;
  // Content hash of the definition's family folder (compiler/BuildInfo.h), set by the registry:
  // part of the disk-cache key, so editing a family misses exactly its own kernels' entries.
  std::string definitionHash;
};

// Registers a definition at static initialisation, one object per kernel in its definition file:
//   const dsl::KernelRegistration kForward(__FILE__, {kConvFwd.kernel, build, chooseMeta, &kConvFwd});
// The file's folder, kernels_dsl/<family>/, names its definition hash (cmake/KernelHashes.cmake).
struct KernelRegistration {
  KernelRegistration(const char* file, KernelDef def);
};

// Throws ssmjit::Error(InvalidArgument) naming the unknown kernel and listing the known ones.
const KernelDef& findKernel(const std::string& name);
std::vector<std::string> kernelNames();  // sorted
// findKernel(spec.kernel).chooseMeta(spec), after SSMJIT_META's values. Every kernel also takes
// "meta:min_blocks" (blocks an SM the register allocation must fit; 0 or absent: the compiler's
// choice) and "meta:unroll_lines" (KernelBuilder::setUnrollLines; 0 or absent: none), checked
// here and applied by compileKernel.
void completeSpecialization(Specialization& spec);
// SSMJIT_META's value of `meta` ("meta:NAME") for `kernel`, if it gives one (the last given): for
// ops whose launches follow a kernel's meta.
std::optional<int64_t> metaOverride(const std::string& kernel, const std::string& meta);
// SSMJIT_META's values for `kernel` as given ("BLOCK_T=24,num_warps=2"), or "" when it gives none.
std::string metaOverridesText(const std::string& kernel);

}  // namespace ssmjit::dsl
