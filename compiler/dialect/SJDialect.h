// The sj dialect (see SJOps.td, SJAttrs.td). Include this to use its ops, types and layouts.
#pragma once
#include <optional>

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "compiler/dialect/SJDialect.h.inc"

#define GET_TYPEDEF_CLASSES
#include "compiler/dialect/SJTypes.h.inc"

#define GET_ATTRDEF_CLASSES
#include "compiler/dialect/SJAttrs.h.inc"

#define GET_OP_CLASSES
#include "compiler/dialect/SJOps.h.inc"

namespace ssmjit::sj {
// Registers sj with the upstream dialects the pipeline uses (func, arith, math, scf).
void registerDialects(mlir::MLIRContext& ctx);

// The dynamic shared buffer a dot reads b from with ldmatrix (16-bit storage), or null: b is
// then gathered element by element.
SharedBufferOp fragmentBuffer(DotOp d);
// The dynamic 16-bit shared buffer `ptr` is, or null.
SharedBufferOp fragmentBuffer(mlir::Value ptr);
// The value of an integer scalar constant, if `v` is one.
std::optional<int64_t> constantInt(mlir::Value v);
}  // namespace ssmjit::sj
