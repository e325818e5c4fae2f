// sj-vectorize-accesses (Passes.td): the vector width of each load and store (sj.vec). The
// contiguity/divisibility facts it tracks per value, along the fastest (last) axis:
//   contig  runs of this length, aligned in coordinates, increase by 1;
//   div     a power of two dividing the first value of every run;
//   cnst    runs of this length hold one value;
//   all     a power of two dividing every value;
//   nonneg  no value is negative (so a division truncates the way it floors).
#include <map>

#include "compiler/dialect/SJDialect.h"
#include "compiler/passes/Layout.h"
#include "compiler/passes/Passes.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

namespace ssmjit::passes {
#define GEN_PASS_DEF_VECTORIZEACCESSESPASS
#include "compiler/passes/Passes.h.inc"

using namespace mlir;

namespace {

constexpr int64_t kMaxDiv = int64_t(1) << 30;

int64_t pow2Divisor(int64_t v) {
  if (v == 0) return kMaxDiv;
  int64_t p = 1;
  while ((v % (p * 2)) == 0 && p < kMaxDiv) p *= 2;
  return p;
}
int64_t gcd2(int64_t a, int64_t b) { return std::min(a, b); }  // both powers of two

struct Info {
  int64_t contig = 1, div = 1, cnst = 1, all = 1;
  bool nonneg = false;
};

struct Analysis {
  std::map<void*, Info> infos;

  static int64_t lastDim(Value v) {
    auto t = dyn_cast<RankedTensorType>(v.getType());
    return t ? t.getShape().back() : 1;
  }
  Info get(Value v) {
    auto it = infos.find(v.getAsOpaquePointer());
    if (it != infos.end()) return it->second;
    Info i;
    if (auto arg = dyn_cast<BlockArgument>(v)) {
      if (auto f = dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp()))
        if (auto d = f.getArgAttrOfType<IntegerAttr>(arg.getArgNumber(), "sj.div")) i.all = i.div = d.getInt();
      // A loop's induction variable: lb + k * step.
      if (auto fo = dyn_cast<scf::ForOp>(arg.getOwner()->getParentOp()); fo && arg == fo.getInductionVar())
        i.all = i.div = gcd2(get(fo.getLowerBound()).all, get(fo.getStep()).all);
    }
    i.cnst = lastDim(v) == 1 ? 1 : i.cnst;
    return i;
  }
  void set(Value v, Info i) { infos[v.getAsOpaquePointer()] = i; }

  void visit(Operation* op) {
    if (op->getNumResults() != 1) return;
    Value r = op->getResult(0);
    Type e = getElementTypeOrSelf(r.getType());
    if (!e.isIntOrIndex()) return;
    int64_t S = lastDim(r);
    Info o;
    if (auto c = dyn_cast<arith::ConstantOp>(op)) {
      int64_t v = 0;
      if (auto ia = dyn_cast<IntegerAttr>(c.getValue()))
        v = ia.getValue().getSExtValue();
      else if (auto da = dyn_cast<DenseIntElementsAttr>(c.getValue()); da && da.isSplat())
        v = da.getSplatValue<APInt>().getSExtValue();
      else
        return;
      o.all = o.div = pow2Divisor(v), o.cnst = S, o.nonneg = v >= 0;
    } else if (isa<sj::RangeOp>(op)) {
      o.contig = S, o.div = kMaxDiv, o.cnst = 1, o.all = 1, o.nonneg = true;
    } else if (auto s = dyn_cast<sj::SplatOp>(op)) {
      Info a = get(s.getSrc());
      o.all = o.div = a.all, o.cnst = S, o.nonneg = a.nonneg;
    } else if (auto x = dyn_cast<sj::ExpandDimsOp>(op)) {
      Info a = get(x.getSrc());
      if (x.getAxis() == (int)cast<RankedTensorType>(r.getType()).getRank() - 1)
        o.all = o.div = a.all, o.cnst = 1, o.contig = 1, o.nonneg = a.nonneg;
      else
        o = a;
    } else if (auto bc = dyn_cast<sj::BroadcastOp>(op)) {
      Info a = get(bc.getSrc());
      if (lastDim(bc.getSrc()) == 1 && S > 1)
        o.all = o.div = a.all, o.cnst = S, o.contig = 1, o.nonneg = a.nonneg;
      else
        o = a;
    } else if (isa<arith::AddIOp, arith::SubIOp>(op)) {
      Info a = get(op->getOperand(0)), b = get(op->getOperand(1));
      o.contig = std::max(gcd2(a.contig, b.cnst), gcd2(a.cnst, b.contig));
      o.div = gcd2(a.div, b.div);
      o.cnst = gcd2(a.cnst, b.cnst);
      o.all = gcd2(a.all, b.all);
      o.nonneg = isa<arith::AddIOp>(op) && a.nonneg && b.nonneg;
    } else if (isa<arith::MulIOp>(op)) {
      Info a = get(op->getOperand(0)), b = get(op->getOperand(1));
      o.contig = 1;
      // Products are not runs (contig 1): every element starts one, so div is what divides all.
      o.cnst = gcd2(a.cnst, b.cnst);
      o.all = o.div = std::min(kMaxDiv, a.all * b.all);
      o.nonneg = a.nonneg && b.nonneg;
    } else if (isa<arith::DivSIOp>(op)) {
      Info a = get(op->getOperand(0)), b = get(op->getOperand(1));
      o.cnst = gcd2(a.cnst, b.cnst);
      // A non-negative run aligned to p, divided by a constant that p divides, crosses no
      // multiple of it past its first element: its quotients are one value.
      if (b.cnst >= S && a.nonneg && b.nonneg) o.cnst = std::max(o.cnst, gcd2(gcd2(a.contig, a.div), b.all));
      o.nonneg = a.nonneg && b.nonneg;
    } else if (auto cmp = dyn_cast<arith::CmpIOp>(op)) {
      Info a = get(cmp.getLhs()), b = get(cmp.getRhs());
      o.cnst = gcd2(a.cnst, b.cnst);
      // Runs of a contiguous, aligned lhs against a constant rhs divisible by the run length
      // compare the same way throughout the run.
      if (b.cnst >= S) o.cnst = std::max(o.cnst, gcd2(gcd2(a.contig, a.div), b.all));
      if (a.cnst >= S) o.cnst = std::max(o.cnst, gcd2(gcd2(b.contig, b.div), a.all));
    } else if (isa<arith::AndIOp, arith::OrIOp, arith::XOrIOp>(op)) {
      Info a = get(op->getOperand(0)), b = get(op->getOperand(1));
      o.cnst = gcd2(a.cnst, b.cnst);
    } else if (isa<arith::ExtSIOp, arith::ExtUIOp, arith::TruncIOp>(op)) {
      o = get(op->getOperand(0));
    } else {
      return;
    }
    o.contig = std::min(o.contig, S);
    o.cnst = std::min(o.cnst, S);
    set(r, o);
  }
};

int64_t accessWidth(Analysis& an, const layout::Parent& parent, Value ptr, Value offsets, Value mask, Attribute lay) {
  auto t = dyn_cast<RankedTensorType>(offsets.getType());
  if (!t) return 1;
  // Only the parent's dim 1 holds consecutive registers (blocked tiles, and slice0 1-D tiles).
  const layout::Kind k = layout::kindOf(lay);
  if (!(k == layout::Kind::Blocked || k == layout::Kind::Slice0 || isa_and_nonnull<sj::AnyAttr>(lay))) return 1;
  int64_t S = t.getShape().back();
  int64_t w = layout::runLength(parent, 1, S);
  Type elem = cast<sj::PtrType>(ptr.getType()).getElementType();
  int64_t bytes = elem.getIntOrFloatBitWidth() / 8;
  w = std::min(w, 16 / bytes);
  Info o = an.get(offsets);
  w = std::min({w, o.contig, o.div});
  int64_t align = bytes;
  if (auto arg = dyn_cast<BlockArgument>(ptr))
    if (auto f = dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp()))
      if (auto a = f.getArgAttrOfType<IntegerAttr>(arg.getArgNumber(), "sj.align")) align = a.getInt();
  if (ptr.getDefiningOp<sj::SharedBufferOp>()) align = 16;
  w = std::min(w, std::max<int64_t>(1, align / bytes));
  if (mask) w = std::min(w, an.get(mask).cnst);
  int64_t p = 1;
  while (p * 2 <= w) p *= 2;
  return p;
}

struct VectorizeAccessesPass : impl::VectorizeAccessesPassBase<VectorizeAccessesPass> {
  void runOnOperation() override {
    for (auto f : getOperation().getOps<func::FuncOp>()) {
      const layout::Parent parent = layout::parentOf(f);
      Analysis an;
      f.walk([&](Operation* op) { an.visit(op); });  // defs precede uses (pre-order of blocks)
      OpBuilder b(f.getContext());
      f.walk([&](sj::LoadOp l) {
        Attribute lay = layout::layoutAttr(l.getResult());
        l->setAttr("sj.vec",
                   b.getI64IntegerAttr(accessWidth(an, parent, l.getPtr(), l.getOffsets(), l.getMask(), lay)));
      });
      f.walk([&](sj::StoreOp s) {
        Attribute lay = layout::layoutAttr(s.getValue());
        if (isa_and_nonnull<sj::AnyAttr>(lay)) lay = layout::layoutAttr(s.getOffsets());
        s->setAttr("sj.vec",
                   b.getI64IntegerAttr(accessWidth(an, parent, s.getPtr(), s.getOffsets(), s.getMask(), lay)));
      });
      // A copy moves vectors contiguous on both sides.
      f.walk([&](sj::CopyAsyncOp c) {
        Attribute lay = layout::layoutAttr(c.getOffsets());
        if (!lay || isa<sj::AnyAttr>(lay)) lay = layout::layoutAttr(c.getSmemOffsets());
        if (!lay) lay = sj::AnyAttr::get(f.getContext());
        const int64_t w = std::min(accessWidth(an, parent, c.getPtr(), c.getOffsets(), c.getMask(), lay),
                                   accessWidth(an, parent, c.getSmem(), c.getSmemOffsets(), c.getMask(), lay));
        c->setAttr("sj.vec", b.getI64IntegerAttr(w));
      });
    }
  }
};

}  // namespace

}  // namespace ssmjit::passes
