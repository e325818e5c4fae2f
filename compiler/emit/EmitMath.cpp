// Values made of arithmetic: constants, program ids, and elementwise arith/math ops, each one C
// expression a register (a tile's op runs in the layout of its first tile with a definite one).
#include <array>

#include "compiler/emit/EmitterCore.h"
#include "llvm/ADT/TypeSwitch.h"
#include "mlir/Dialect/Math/IR/Math.h"

namespace ssmjit::emit {
using namespace mlir;

namespace {
// (a[0] op a[1]) for predicate p: `predicates` are the dialect's for <, <=, >, >=, == and !=, the
// comparisons the DSL makes.
template <typename Predicate>
std::string compare(Operation* op, Predicate p, const std::array<Predicate, 6>& predicates,
                    const std::vector<std::string>& a) {
  static const char* const kOperators[] = {"<", "<=", ">", ">=", "==", "!="};
  for (size_t i = 0; i < predicates.size(); ++i)
    if (predicates[i] == p) return "(" + a[0] + " " + kOperators[i] + " " + a[1] + ")";
  fail(op, "unsupported comparison");
}
}  // namespace

// The C expression of an elementwise op over operand expressions `a`; "" if op is not one.
std::string Emitter::exprOf(Operation* op, const std::vector<std::string>& a) {
  auto infix = [&](const char* o) { return "(" + a[0] + " " + o + " " + a[1] + ")"; };
  auto call = [&](const char* f) {
    std::string s = std::string(f) + "(" + a[0];
    for (size_t i = 1; i < a.size(); ++i) s += ", " + a[i];
    return s + ")";
  };
  auto convert = [&](const std::string& v) { return "((" + cType(op->getResult(0).getType()) + ")" + v + ")"; };
  using arith::CmpFPredicate;
  using arith::CmpIPredicate;
  return llvm::TypeSwitch<Operation*, std::string>(op)
      .Case<arith::AddIOp, arith::AddFOp>([&](auto) { return infix("+"); })
      .Case<arith::SubIOp, arith::SubFOp>([&](auto) { return infix("-"); })
      .Case<arith::MulIOp, arith::MulFOp>([&](auto) { return infix("*"); })
      .Case([&](arith::DivFOp d) {
        return arith::bitEnumContainsAll(d.getFastmath(), arith::FastMathFlags::afn) ? call("__fdividef") : infix("/");
      })
      .Case<arith::DivSIOp>([&](auto) { return infix("/"); })
      .Case<arith::RemSIOp>([&](auto) { return infix("%"); })
      .Case<arith::AndIOp>([&](auto) { return infix("&"); })
      .Case<arith::OrIOp>([&](auto) { return infix("|"); })
      .Case<arith::XOrIOp>([&](auto) { return infix("^"); })
      .Case<arith::MaxNumFOp, arith::MaximumFOp>([&](auto) { return call("fmaxf"); })
      .Case<arith::MinNumFOp, arith::MinimumFOp>([&](auto) { return call("fminf"); })
      .Case<arith::MaxSIOp>([&](auto) { return call("max"); })
      .Case<arith::MinSIOp>([&](auto) { return call("min"); })
      .Case<arith::NegFOp>([&](auto) { return "(-" + a[0] + ")"; })
      .Case<arith::SelectOp>([&](auto) { return "(" + a[0] + " ? " + a[1] + " : " + a[2] + ")"; })
      .Case<math::FmaOp>([&](auto) { return call("__fmaf_rn"); })
      .Case<math::ExpOp>([&](auto) { return call("expf"); })
      .Case<math::Exp2Op>([&](auto) { return call("ssm_exp2"); })
      .Case<math::LogOp>([&](auto) { return call("logf"); })
      .Case<math::Log1pOp>([&](auto) { return call("log1pf"); })
      .Case<math::RsqrtOp>([&](auto) { return call("rsqrtf"); })
      .Case([&](arith::CmpIOp c) {
        return compare(op, c.getPredicate(),
                       {CmpIPredicate::slt, CmpIPredicate::sle, CmpIPredicate::sgt, CmpIPredicate::sge,
                        CmpIPredicate::eq, CmpIPredicate::ne},
                       a);
      })
      .Case([&](arith::CmpFOp c) {
        return compare(op, c.getPredicate(),
                       {CmpFPredicate::OLT, CmpFPredicate::OLE, CmpFPredicate::OGT, CmpFPredicate::OGE,
                        CmpFPredicate::OEQ, CmpFPredicate::UNE},
                       a);
      })
      .Case<arith::ExtSIOp, arith::TruncIOp, arith::SIToFPOp>([&](auto) { return convert(a[0]); })
      .Case<arith::ExtUIOp, arith::UIToFPOp>(  // only from i1 here
          [&](auto) { return convert("(" + a[0] + " ? 1 : 0)"); })
      .Default([](Operation*) { return std::string(); });
}

void Emitter::emitElementwise(Operation* op) {
  if (op->getNumResults() != 1 || exprOf(op, std::vector<std::string>(op->getNumOperands(), "x")).empty())
    fail(op, "operation not supported by the CUDA emitter");
  Value res = op->getResult(0);
  if (shapeOf(res).empty()) {
    std::vector<std::string> a;
    for (Value v : op->getOperands()) a.push_back(name(v));
    return defineScalar(res, exprOf(op, a));
  }
  Kind k = opLayout(op);
  std::string nm = declare(res, k);
  forRegs(regs(k, shapeOf(res)), [&] {
    std::vector<std::string> a;
    for (Value v : op->getOperands()) a.push_back(E(v, k, "r"));
    line(nm + "[r] = " + exprOf(op, a) + ";");
  });
}

void Emitter::emit(arith::ConstantOp c) {
  // Tile constants are rematerialised at each use (E).
  if (shapeOf(c.getResult()).empty()) defineScalar(c.getResult(), constLiteral(c));
}

void Emitter::emit(sj::ProgramIdOp p) {
  static const char* axes[] = {"blockIdx.x", "blockIdx.y", "blockIdx.z"};
  defineScalar(p.getResult(), "(int)" + std::string(axes[p.getAxis()]));
}

void Emitter::emit(sj::ExpandDimsOp e) {  // read through at each use (E)
  if (shapeOf(e.getResult()).size() != 2) fail(e, "expand_dims must give a 2-D tile");
}

}  // namespace ssmjit::emit
