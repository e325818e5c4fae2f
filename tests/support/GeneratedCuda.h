// The CUDA C++ the pipeline generates (no NVRTC), for tests that read which instructions a kernel
// became: a registry kernel's specialisation, or a small kernel of a test's own.
#pragma once
#include <initializer_list>
#include <string>

#include "kernels_dsl/CompileKernel.h"
#include "kernels_dsl/Registry.h"

namespace ssmjit::testing {

// The options that stop the pipeline before NVRTC and keep its stage `stage` in `text`.
inline PipelineOptions capturingStage(const std::string& stage, std::string& text) {
  PipelineOptions o;
  o.runNvrtc = false;
  o.onStage = [stage, &text](const std::string& name, const std::string& t) {
    if (name == stage) text = t;
  };
  return o;
}
inline PipelineOptions capturingCuda(std::string& cuda) { return capturingStage("cuda", cuda); }

// A registry kernel's specialisation.
inline std::string generatedCuda(const Specialization& spec) {
  std::string cuda;
  compileKernel(spec, capturingCuda(cuda));
  return cuda;
}

// A registry kernel's specialisation as MLIR after the last pass, for counting operations: the
// CUDA C++ repeats an operation's code for each register of short tiles.
inline std::string generatedIr(const Specialization& spec) {
  std::string ir;
  compileKernel(spec, capturingStage(pipelinePassNames().back(), ir));
  return ir;
}

// `def` specialised for sm_90a, 4 warps and 32-bit indices, its pointer arguments `f32Ptrs` f32
// and `bf16Ptrs` bf16, all 16-byte aligned.
inline std::string ownKernelCuda(const dsl::KernelDef& def, std::initializer_list<const char*> f32Ptrs,
                                 std::initializer_list<const char*> bf16Ptrs = {}) {
  Specialization spec;
  spec.kernel = def.name;
  spec.arch = "sm_90a";
  for (const char* p : f32Ptrs) spec.set(std::string("dtype:") + p, (int)DType::F32).set(std::string("align:") + p, 16);
  for (const char* p : bf16Ptrs)
    spec.set(std::string("dtype:") + p, (int)DType::BF16).set(std::string("align:") + p, 16);
  spec.set("meta:num_warps", 4).set("meta:index_bits", 32);
  std::string cuda;
  compileKernel(def, spec, capturingCuda(cuda));
  return cuda;
}

}  // namespace ssmjit::testing
