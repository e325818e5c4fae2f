// The CUDA C++ the pipeline generates for a small kernel of a test's own (not in the registry):
// the DSL and pass tests read which instructions it became. No NVRTC.
#pragma once
#include <initializer_list>
#include <string>

#include "kernels_dsl/CompileKernel.h"
#include "kernels_dsl/Registry.h"

namespace ssmjit::testing {

// `def` specialised for sm_90a, 4 warps and 32-bit indices, its pointer arguments `f32Ptrs` f32
// and `bf16Ptrs` bf16, all 16-byte aligned.
inline std::string ownKernelCuda(const dsl::KernelDef& def, std::initializer_list<const char*> f32Ptrs,
                                 std::initializer_list<const char*> bf16Ptrs = {}) {
  Specialization spec;
  spec.kernel = def.name;
  spec.arch = "sm_90a";
  for (const char* p : f32Ptrs) spec.set(std::string("dtype:") + p, (int)ScalarType::F32).set(std::string("align:") + p, 16);
  for (const char* p : bf16Ptrs) spec.set(std::string("dtype:") + p, (int)ScalarType::BF16).set(std::string("align:") + p, 16);
  spec.set("meta:num_warps", 4).set("meta:index_bits", 32);
  std::string cuda;
  PipelineOptions o;
  o.runNvrtc = false;
  o.onStage = [&](const std::string& stage, const std::string& text) {
    if (stage == "cuda") cuda = text;
  };
  compileKernel(def, spec, o);
  return cuda;
}

}  // namespace ssmjit::testing
