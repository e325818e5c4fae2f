// The pipeline's own passes, in the order compiler/Pipeline.cpp runs them (canonicalize and cse
// run in between). Each runs on a module of sj kernels; `ssmjit-opt --<argument>` runs one on
// textual IR.
#ifndef SSMJIT_SJ_PASSES
#define SSMJIT_SJ_PASSES

include "mlir/Pass/PassBase.td"

def SpecializePass : Pass<"sj-specialize", "mlir::ModuleOp"> {
  let summary = "bind the values a call observed";
  let description = [{
    Bound sizes, strides and flags become constants (then folded: dead branches go, shapes of
    loops become static); pointer arguments get their storage dtype; data pointers get their
    alignment class and dynamic integers their divisibility class as argument attributes
    (sj.align, sj.div) for vectorize-accesses. Metadata pointers are never specialised on
    alignment. Arguments left unused are dropped from the signature. Bindings follow
    compiler/Specialization.h: `name=value`, `dtype:ptr=<DType>`, `align:ptr=16`,
    `div:arg=16`; a flag left unbound is an error.
  }];
  let options = [
    ListOption<"bindings", "bindings", "std::string",
               "the bound values, each `name=value` (compiler/Specialization.h)">
  ];
  let dependentDialects = ["mlir::arith::ArithDialect"];
}

def UnrollLoopsPass : Pass<"sj-unroll-loops", "mlir::ModuleOp"> {
  let summary = "fully unroll constant-trip scf.for loops within an operation budget";
  let description = [{
    A loop whose trip count is a constant is unrolled while trip count x body operations stays
    within `unroll-ops` (single-iteration loops always). Unrolling removes loop overhead and lets
    the scheduler interleave iterations, but NVRTC's time grows with the code: past the budget a
    loop stays rolled (kernels overlap iterations themselves by carrying the next iteration's
    loads), which keeps a variant's first compile bounded whatever the trip count.
  }];
  let options = [
    Option<"maxOps", "unroll-ops", "int64_t", "256",
           "the most operations a fully unrolled loop may have (meta:unroll_ops)">
  ];
}

def FormFmaPass : Pass<"sj-form-fma", "mlir::ModuleOp"> {
  let summary = "fuse single-use products into math.fma and weighted sj.reduce";
  let description = [{
    A float add or subtract of a single-use multiply becomes one math.fma, and a sum of a
    single-use product along an axis becomes one weighted sj.reduce (an fma per element). The
    kernels compile with --fmad=false, so these are the only fused multiply-adds: which products
    are rounded before the add is decided here, on the IR, not by NVVM or ptxas from the shape
    of the generated control flow. Two specialisations that differ only in bound flags (a packed
    row and a dense one) then round every value alike, which packed == per-sequence bitwise needs.
  }];
  let dependentDialects = ["mlir::math::MathDialect"];
}

def AssignLayoutsPass : Pass<"sj-assign-layouts", "mlir::ModuleOp"> {
  let summary = "choose the kernel's parent layout and a layout for every tile";
  let description = [{
    Sets `sj.parent` (a #sj.blocked layout) on each kernel and `sj.layouts` (one layout a
    result) on every op with results. 2-D tiles take the parent; 1-D tiles become slices of it
    (#sj.slice), inferred from how they meet 2-D tiles (expand_dims at axis a, or the result of
    a reduction along a) and unified through elementwise ops, loads, stores and control flow.
    Ranges, splats and constants are #sj.any: the emitter materialises them in whatever layout
    each use needs, so they never force a conversion. Scalars are #sj.scalar.
  }];
}

def VectorizeAccessesPass : Pass<"sj-vectorize-accesses", "mlir::ModuleOp"> {
  let summary = "vector width of every load and store (sj.vec)";
  let description = [{
    How many consecutive elements each load and store may move in one instruction, from a small
    contiguity/divisibility analysis in the spirit of Triton's AxisInfo, along the fastest (last)
    axis only. Width = min(layout's register run, contiguity of offsets, 16 bytes, offsets'
    divisibility, pointer alignment, constancy of the mask). Runs after assign-layouts.
  }];
}

#endif
