// Specialisation -> compiled kernel: builds the generic IR with the DSL and runs the pipeline.
#pragma once
#include "compiler/CompiledKernel.h"
#include "compiler/Pipeline.h"
#include "compiler/Specialization.h"

namespace ssmjit {

namespace dsl {
struct KernelDef;
}

// `spec` must be complete (dsl::completeSpecialization). Throws ssmjit::Error on failure.
CompiledKernel compileKernel(const Specialization& spec, const PipelineOptions& options = {});
// The same for a definition that is not in the registry (a test's own kernel); `spec` binds its
// arguments and meta values.
CompiledKernel compileKernel(const dsl::KernelDef& def, const Specialization& spec,
                             const PipelineOptions& options = {});

}  // namespace ssmjit
