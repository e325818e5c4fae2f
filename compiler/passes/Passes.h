// The pipeline's passes (declared in Passes.td), one per file, in the order Pipeline.cpp runs
// them: create<Name>(options) builds one, registerPasses() makes them known to ssmjit-opt.
#pragma once
#include "mlir/Pass/Pass.h"

namespace ssmjit::passes {

#define GEN_PASS_DECL
#include "compiler/passes/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "compiler/passes/Passes.h.inc"

}  // namespace ssmjit::passes
