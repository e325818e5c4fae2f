// The one straight-line lowering orchestrator: specialise, canonicalise, unroll, assign layouts,
// emit CUDA C++, NVRTC. MLIR-free options so that tools and the cache can drive it.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "compiler/CompiledKernel.h"
#include "compiler/Specialization.h"

namespace mlir {
class ModuleOp;
}

namespace ssmjit {

struct PipelineOptions {
  // Called with ("generic", IR), then (pass name, IR) after each pass, then ("cuda", source).
  std::function<void(const std::string& stage, const std::string& text)> onStage;
  bool runNvrtc = true;  // false: stop after CUDA C++ (no NVRTC needed)
};

// Names of the passes, in order (for `ssmjit inspect --after PASS`).
std::vector<std::string> pipelinePassNames();

// Lowers a generic kernel module (built by the DSL) for `spec`. Consumes the module.
CompiledKernel runPipeline(mlir::ModuleOp module, const Specialization& spec, const PipelineOptions& options);

// The hash of the embedded device header library (part of every cache key).
const std::string& deviceLibHash();

}  // namespace ssmjit
