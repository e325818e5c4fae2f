// Conversions between the layout attributes (SJAttrs.td) and the emitter's arithmetic.
#include "compiler/passes/Layout.h"
#include "ssmjit/enum_name.h"

namespace ssmjit::layout {
using namespace mlir;

Parent::Parent(sj::BlockedAttr a) {
  for (int d = 0; d < 2; ++d) spt[d] = a.getSpt()[d], tpw[d] = a.getTpw()[d], wpc[d] = a.getWpc()[d];
}

sj::BlockedAttr Parent::attr(MLIRContext* ctx) const { return sj::BlockedAttr::get(ctx, spt, tpw, wpc); }

std::string Parent::str() const {
  auto p = [](const int64_t* a) { return "[" + std::to_string(a[0]) + "," + std::to_string(a[1]) + "]"; };
  return "spt=" + p(spt) + " tpw=" + p(tpw) + " wpc=" + p(wpc);
}

const char* kindName(Kind k) { return enumName<Kind::Slice1>(k, {"scalar", "blocked", "slice0", "slice1"}); }

Kind kindOf(Attribute layout) {
  if (isa_and_nonnull<sj::BlockedAttr>(layout)) return Kind::Blocked;
  if (auto s = dyn_cast_or_null<sj::SliceAttr>(layout)) return s.getDim() == 0 ? Kind::Slice0 : Kind::Slice1;
  return Kind::Scalar;
}

Attribute attrOf(Kind k, sj::BlockedAttr parent) {
  MLIRContext* ctx = parent.getContext();
  switch (k) {
    case Kind::Blocked:
      return parent;
    case Kind::Slice0:
      return sj::SliceAttr::get(ctx, 0, parent);
    case Kind::Slice1:
      return sj::SliceAttr::get(ctx, 1, parent);
    default:
      return sj::ScalarAttr::get(ctx);
  }
}

Attribute layoutAttr(Value v) {
  if (Operation* d = v.getDefiningOp())
    if (auto ls = d->getAttrOfType<ArrayAttr>("sj.layouts")) return ls[cast<OpResult>(v).getResultNumber()];
  return {};
}

Parent parentOf(Operation* kernel) {
  auto p = kernel->getAttrOfType<sj::BlockedAttr>("sj.parent");
  return p ? Parent(p) : Parent();
}

}  // namespace ssmjit::layout
