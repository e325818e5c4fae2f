// sj-form-fma (Passes.td): single-use products fused into math.fma and weighted sj.reduce.
#include "compiler/dialect/SJDialect.h"
#include "compiler/passes/Passes.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/Builders.h"

namespace ssmjit::passes {
#define GEN_PASS_DEF_FORMFMAPASS
#include "compiler/passes/Passes.h.inc"

using namespace mlir;

namespace {
// The multiply defining v when the add/subtract `user` is its only user, in the same block (a
// product hoisted out of a loop stays one register, not its two operands).
arith::MulFOp fusable(Value v, Operation* user) {
  auto m = v.getDefiningOp<arith::MulFOp>();
  return m && m->hasOneUse() && m->getBlock() == user->getBlock() ? m : arith::MulFOp{};
}

struct FormFmaPass : impl::FormFmaPassBase<FormFmaPass> {
  void runOnOperation() override {
    std::vector<Operation*> adds;
    std::vector<sj::ReduceOp> sums;
    getOperation().walk([&](Operation* op) {
      if (isa<arith::AddFOp, arith::SubFOp>(op)) adds.push_back(op);
      if (auto r = dyn_cast<sj::ReduceOp>(op); r && r.getKind() == "sum" && !r.getWeight()) sums.push_back(r);
    });
    for (sj::ReduceOp r : sums) {  // sum(a * b) -> sum of a weighted by b
      arith::MulFOp m = fusable(r.getSrc(), r);
      if (!m) continue;
      OpBuilder b(r);
      auto fused = sj::ReduceOp::create(b, r.getLoc(), r.getResult().getType(), m.getLhs(), r.getAxis(), r.getKind(),
                                        m.getRhs());
      fused->setAttrs(r->getAttrs());
      r.getResult().replaceAllUsesWith(fused.getResult());
      r->erase();
      m->erase();
    }
    for (Operation* op : adds) {
      OpBuilder b(op);
      const Location loc = op->getLoc();
      Value x = op->getOperand(0), y = op->getOperand(1), fma;
      const bool sub = isa<arith::SubFOp>(op);
      if (arith::MulFOp m = fusable(x, op)) {  // x*y' + y, x*y' - y
        Value c = sub ? arith::NegFOp::create(b, loc, y).getResult() : y;
        fma = math::FmaOp::create(b, loc, m.getLhs(), m.getRhs(), c);
        op->getResult(0).replaceAllUsesWith(fma);
        op->erase();
        m->erase();
      } else if (arith::MulFOp m = fusable(y, op)) {  // x + a*b, x - a*b
        Value a = sub ? arith::NegFOp::create(b, loc, m.getLhs()).getResult() : m.getLhs();
        fma = math::FmaOp::create(b, loc, a, m.getRhs(), x);
        op->getResult(0).replaceAllUsesWith(fma);
        op->erase();
        m->erase();
      }
    }
  }
};
}  // namespace

}  // namespace ssmjit::passes
