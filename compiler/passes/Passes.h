// The pipeline's passes, one per file, in the order Pipeline.cpp runs them.
#pragma once
#include <memory>

#include "compiler/Specialization.h"
#include "mlir/Pass/Pass.h"

namespace ssmjit::passes {

// Binds the specialisation: constant arguments become constants (and leave the signature),
// pointer arguments get their storage dtype, alignment and divisibility classes become argument
// attributes; unused arguments are dropped.
std::unique_ptr<mlir::Pass> createSpecializePass(const Specialization& spec);
// Fully unrolls scf.for loops with constant trip counts while trip count x body operations stays
// within `maxUnrolledOps` (single-iteration loops always).
std::unique_ptr<mlir::Pass> createUnrollLoopsPass(int64_t maxUnrolledOps = 256);
// Fuses each float add/subtract of a single-use multiply into math.fma (the only contraction:
// kernels compile with --fmad=false).
std::unique_ptr<mlir::Pass> createFormFmaPass();
// Chooses the kernel's parent layout and a layout for every tile (sj.layout attributes).
std::unique_ptr<mlir::Pass> createAssignLayoutsPass();
// Vector width of every load and store (sj.vec) from contiguity/divisibility analysis.
std::unique_ptr<mlir::Pass> createVectorizeAccessesPass();

}  // namespace ssmjit::passes
