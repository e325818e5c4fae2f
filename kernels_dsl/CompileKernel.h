// Specialisation -> compiled kernel: builds the generic IR with the DSL and runs the pipeline.
#pragma once
#include "compiler/CompiledKernel.h"
#include "compiler/Pipeline.h"
#include "compiler/Specialization.h"

namespace ssmjit {

// `spec` must be complete (dsl::completeSpecialization). Throws ssmjit::Error on failure.
CompiledKernel compileKernel(const Specialization& spec, const PipelineOptions& options = {});

}  // namespace ssmjit
