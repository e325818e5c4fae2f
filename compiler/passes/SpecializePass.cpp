// sj-specialize (Passes.td): binds the values a call observed.
#include "compiler/Specialization.h"
#include "compiler/dialect/SJDialect.h"
#include "compiler/passes/Passes.h"
#include "llvm/ADT/BitVector.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace ssmjit::passes {
#define GEN_PASS_DEF_SPECIALIZEPASS
#include "compiler/passes/Passes.h.inc"

using namespace mlir;

namespace {

Type storageType(MLIRContext* ctx, DType t) {
  switch (t) {
    case DType::F32:
      return Float32Type::get(ctx);
    case DType::F16:
      return Float16Type::get(ctx);
    case DType::BF16:
      return BFloat16Type::get(ctx);
    case DType::I32:
      return IntegerType::get(ctx, 32);
    case DType::I64:
      return IntegerType::get(ctx, 64);
  }
  return {};
}

// Greedy canonicalisation with every loaded dialect's patterns (folds constants, drops dead
// scf.if arms and unused ops).
LogicalResult canonicalize(Operation* op) {
  RewritePatternSet patterns(op->getContext());
  for (Dialect* d : op->getContext()->getLoadedDialects()) d->getCanonicalizationPatterns(patterns);
  for (RegisteredOperationName n : op->getContext()->getRegisteredOperations())
    n.getCanonicalizationPatterns(patterns, op->getContext());
  return applyPatternsGreedily(op, std::move(patterns));
}

struct SpecializePass : impl::SpecializePassBase<SpecializePass> {
  using SpecializePassBase::SpecializePassBase;
  Specialization spec;

  void runOnOperation() override {
    spec = Specialization{};
    for (const std::string& b : bindings) {
      const size_t eq = b.find('=');
      int64_t v = 0;
      if (eq == std::string::npos || eq == 0 || StringRef(b).substr(eq + 1).getAsInteger(10, v)) {
        getOperation().emitError("sj-specialize: binding '") << b << "' is not name=<integer>";
        return signalPassFailure();
      }
      spec.set(b.substr(0, eq), v);
    }
    for (auto f : getOperation().getOps<func::FuncOp>())
      if (failed(specialize(f))) return signalPassFailure();
  }

  LogicalResult specialize(func::FuncOp f) {
    MLIRContext* ctx = f.getContext();
    Block& entry = f.getBody().front();
    OpBuilder b(ctx);
    b.setInsertionPointToStart(&entry);
    const unsigned n = f.getNumArguments();
    std::vector<bool> typedPtr(n, false);
    for (unsigned i = 0; i < n; ++i) {
      BlockArgument arg = f.getArgument(i);
      std::string name = f.getArgAttrOfType<StringAttr>(i, "sj.name").str();
      std::string role = f.getArgAttrOfType<StringAttr>(i, "sj.role").str();
      if (role == "int" || role == "flag") {
        if (const int64_t* v = spec.find(name)) {
          auto c = arith::ConstantOp::create(b, f.getLoc(), IntegerAttr::get(arg.getType(), *v));
          arg.replaceAllUsesWith(c);
        } else if (role == "flag") {
          return f.emitError("specialize: flag '") << name << "' must be bound";
        } else if (const int64_t* d = spec.find("div:" + name)) {
          f.setArgAttr(i, "sj.div", b.getI64IntegerAttr(*d));
        }
      } else if (role == "data" || role == "metadata") {
        if (const int64_t* dt = spec.find("dtype:" + name)) {
          Type elem = storageType(ctx, static_cast<DType>(*dt));
          bool wantFloat = isa<FloatType>(cast<sj::PtrType>(arg.getType()).getElementType());
          if (!elem || wantFloat != isa<FloatType>(elem))
            return f.emitError("specialize: pointer '")
                   << name << "' bound to dtype " << dtypeName((DType)*dt) << ", which its kernel cannot take";
          arg.setType(sj::PtrType::get(ctx, elem));
          typedPtr[i] = true;
        }
        if (role == "data")
          if (const int64_t* a = spec.find("align:" + name)) f.setArgAttr(i, "sj.align", b.getI64IntegerAttr(*a));
      }
    }
    f.setType(FunctionType::get(ctx, entry.getArgumentTypes(), {}));
    if (failed(canonicalize(f))) return f.emitError("specialize: canonicalisation did not converge");

    llvm::BitVector erase(n);
    for (unsigned i = 0; i < n; ++i) {
      BlockArgument arg = f.getArgument(i);
      if (arg.use_empty()) {
        erase.set(i);
        continue;
      }
      if (isa<sj::PtrType>(arg.getType()) && !typedPtr[i])
        return f.emitError("specialize: pointer '")
               << f.getArgAttrOfType<StringAttr>(i, "sj.name").getValue() << "' is used but has no dtype binding";
    }
    if (failed(f.eraseArguments(erase))) return failure();
    return success();
  }
};

}  // namespace

}  // namespace ssmjit::passes
