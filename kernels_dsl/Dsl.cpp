// The DSL builder: records a kernel as sj/arith/math/scf ops in a func.func.
#include "kernels_dsl/Dsl.h"

#include "compiler/Specialization.h"
#include "compiler/Swizzle.h"
#include "compiler/dialect/SJDialect.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "ssmjit/error.h"

namespace ssmjit::dsl {
using namespace mlir;

struct KernelBuilder::Impl {
  MLIRContext* ctx;
  OpBuilder b;
  Location loc;
  ModuleOp module;
  func::FuncOp func;
  Block* entry;
  Type indexTy;
  std::vector<Type> argTypes;
  std::vector<std::pair<std::string, std::string>> argAttrs;  // (name, role)
  std::vector<std::string> argDtypeClass;                     // "float", "int" or ""
  const Signature* signature = nullptr;                       // declared arguments, if any
  std::vector<dsl::Value> declared;                           // in parameters(*signature) order
  int64_t dynamicSharedBytes = 0;                             // of sharedBuffer(n, dtype), aligned

  Impl(MLIRContext* c) : ctx(c), b(c), loc(UnknownLoc::get(c)) {}
};

namespace {
[[noreturn]] void fail(const std::string& msg) { throw Error(Error::Kind::Internal, "kernel DSL: " + msg); }
mlir::Value unwrap(dsl::Value v) {
  if (!v.valid()) fail("use of an undefined value");
  return mlir::Value::getFromOpaquePointer(v.raw());
}
ArrayRef<int64_t> shapeOfType(Type t) {
  if (auto r = dyn_cast<RankedTensorType>(t)) return r.getShape();
  return {};
}
Type elemOf(Type t) {
  if (auto s = dyn_cast<ShapedType>(t)) return s.getElementType();
  return t;
}
Type withShape(Type elem, ArrayRef<int64_t> shape) {
  if (shape.empty()) return elem;
  return RankedTensorType::get(shape, elem);
}
}  // namespace

std::vector<int64_t> Value::shape() const {
  auto s = shapeOfType(unwrap(*this).getType());
  return {s.begin(), s.end()};
}
bool Value::isFloat() const { return isa<FloatType>(elemOf(unwrap(*this).getType())); }
bool Value::isBool() const { return elemOf(unwrap(*this).getType()).isInteger(1); }

KernelBuilder::KernelBuilder(void* mlirContext, const std::string& name, int indexBits, int numWarps)
    : impl_(std::make_unique<Impl>(static_cast<MLIRContext*>(mlirContext))) {
  auto& I = *impl_;
  if (indexBits != 32 && indexBits != 64) fail("index bits must be 32 or 64");
  I.indexTy = IntegerType::get(I.ctx, indexBits);
  I.module = ModuleOp::create(I.loc);
  I.b.setInsertionPointToEnd(I.module.getBody());
  I.func = func::FuncOp::create(I.b, I.loc, name, FunctionType::get(I.ctx, {}, {}));
  I.func->setAttr("sj.kernel", UnitAttr::get(I.ctx));
  I.func->setAttr("sj.num_warps", I.b.getI32IntegerAttr(numWarps));
  I.func->setAttr("sj.index_bits", I.b.getI32IntegerAttr(indexBits));
  I.entry = I.func.addEntryBlock();
  I.b.setInsertionPointToStart(I.entry);
}
KernelBuilder::~KernelBuilder() = default;

static dsl::Value wrap(KernelBuilder* kb, mlir::Value v) { return {kb, v.getAsOpaquePointer()}; }
#define W(v) wrap(this, (v))
#define B impl_->b
#define L impl_->loc

namespace {
// A new kernel argument of type t (not in a kernel with a declared signature, which takes
// exactly its parameters): `role` its attribute, `dtypeClass` what its dtype binds to ("float",
// "int"; "" for a scalar).
mlir::Value addArgument(KernelBuilder::Impl& I, const std::string& name, Type t, const char* role,
                        const char* dtypeClass) {
  if (I.signature)
    fail("argument '" + name + "' added to kernel " + I.signature->kernel + ", whose arguments are its signature");
  I.argTypes.push_back(t);
  I.argAttrs.push_back({name, role});
  I.argDtypeClass.push_back(dtypeClass);
  return I.entry->addArgument(t, I.loc);
}
}  // namespace

void KernelBuilder::declare(const Signature& sig) {
  if (!impl_->argTypes.empty()) fail("declare() after arguments were added");
  for (const Param& p : parameters(sig).params) {
    dsl::Value v;
    switch (p.kind) {
      case ParamKind::Pointer:
        v = ptrArg(p.name, p.cls, p.role);
        break;
      case ParamKind::Size:
      case ParamKind::Stride:
      case ParamKind::Mode:
        v = intArg(p.name);
        break;
      case ParamKind::Scalar:
        v = floatArg(p.name);
        break;
      case ParamKind::Flag:
        v = flagArg(p.name);
        break;
    }
    impl_->declared.push_back(v);
  }
  impl_->signature = &sig;
}
dsl::Value KernelBuilder::arg(const std::string& name) const {
  if (!impl_->signature) fail("arg('" + name + "') without a declared signature");
  const auto& ps = parameters(*impl_->signature).params;
  for (size_t i = 0; i < ps.size(); ++i)
    if (ps[i].name == name) return impl_->declared[i];
  detail::unknownArgument(impl_->signature->kernel, "argument", name.c_str());
}

dsl::Value KernelBuilder::ptrArg(const std::string& name, PtrClass cls, PtrRole role) {
  // The generic storage type is a placeholder (f32 / the index type); specialise binds the dtype.
  Type elem = cls == PtrClass::Float ? Type(B.getF32Type()) : impl_->indexTy;
  return W(addArgument(*impl_, name, sj::PtrType::get(impl_->ctx, elem), role == PtrRole::Data ? "data" : "metadata",
                       cls == PtrClass::Float ? "float" : "int"));
}
dsl::Value KernelBuilder::intArg(const std::string& name) {
  return W(addArgument(*impl_, name, impl_->indexTy, "int", ""));
}
dsl::Value KernelBuilder::floatArg(const std::string& name) {
  return W(addArgument(*impl_, name, B.getF32Type(), "float", ""));
}
dsl::Value KernelBuilder::flagArg(const std::string& name) {
  return W(addArgument(*impl_, name, B.getI1Type(), "flag", ""));
}

dsl::Value KernelBuilder::programId(int axis) {
  mlir::Value v = sj::ProgramIdOp::create(B, L, B.getI32Type(), axis);
  return toIndex(W(v));
}
dsl::Value KernelBuilder::range(int64_t n) {
  if (!isPow2(n)) fail("range size must be a power of two, got " + std::to_string(n));
  return W(sj::RangeOp::create(B, L, RankedTensorType::get({n}, impl_->indexTy)));
}
dsl::Value KernelBuilder::constInt(int64_t v) {
  return W(arith::ConstantOp::create(B, L, IntegerAttr::get(impl_->indexTy, v)));
}
dsl::Value KernelBuilder::constFloat(double v) {
  return W(arith::ConstantOp::create(B, L, B.getF32FloatAttr((float)v)));
}
dsl::Value KernelBuilder::constBool(bool v) { return W(arith::ConstantOp::create(B, L, B.getBoolAttr(v))); }

dsl::Value KernelBuilder::splat(dsl::Value s, const std::vector<int64_t>& shape) {
  mlir::Value v = unwrap(s);
  if (isa<RankedTensorType>(v.getType())) fail("splat of a tile");
  if (shape.empty()) return s;
  return W(sj::SplatOp::create(B, L, RankedTensorType::get(shape, v.getType()), v));
}
dsl::Value KernelBuilder::expandDims(dsl::Value t, int axis) {
  mlir::Value v = unwrap(t);
  auto s = shapeOfType(v.getType());
  if (s.empty()) fail("expandDims of a scalar");
  std::vector<int64_t> ns(s.begin(), s.end());
  ns.insert(ns.begin() + axis, 1);
  return W(sj::ExpandDimsOp::create(B, L, RankedTensorType::get(ns, elemOf(v.getType())), v, axis));
}
dsl::Value KernelBuilder::broadcastTo(dsl::Value t, const std::vector<int64_t>& shape) {
  mlir::Value v = unwrap(t);
  auto s = shapeOfType(v.getType());
  if (s.empty()) return splat(t, shape);
  while (s.size() < shape.size()) {  // NumPy: pad leading unit axes
    t = expandDims(t, 0);
    v = unwrap(t);
    s = shapeOfType(v.getType());
  }
  if (std::vector<int64_t>(s.begin(), s.end()) == shape) return t;
  return W(sj::BroadcastOp::create(B, L, RankedTensorType::get(shape, elemOf(v.getType())), v));
}

// Brings operands to one shape (NumPy rules).
static std::vector<int64_t> broadcastShape(const std::vector<std::vector<int64_t>>& shapes) {
  size_t rank = 0;
  for (auto& s : shapes) rank = std::max(rank, s.size());
  std::vector<int64_t> out(rank, 1);
  for (auto& s : shapes)
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t& o = out[rank - s.size() + i];
      if (s[i] == 1) continue;
      if (o != 1 && o != s[i]) fail("shapes do not broadcast");
      o = s[i];
    }
  return out;
}

static std::pair<dsl::Value, dsl::Value> unify(KernelBuilder* kb, dsl::Value a, dsl::Value b) {
  auto shape = broadcastShape({a.shape(), b.shape()});
  if (shape.empty()) return {a, b};
  return {kb->broadcastTo(a, shape), kb->broadcastTo(b, shape)};
}

template <typename FOp, typename IOp>
static dsl::Value arith2(KernelBuilder* kb, OpBuilder& b, Location loc, dsl::Value x, dsl::Value y, const char* what) {
  auto [p, q] = unify(kb, x, y);
  mlir::Value u = unwrap(p), v = unwrap(q);
  if (elemOf(u.getType()) != elemOf(v.getType()))
    fail(std::string(what) + " of mismatched element types (convert explicitly)");
  if (isa<FloatType>(elemOf(u.getType()))) {
    if constexpr (std::is_same_v<FOp, void>)
      fail(std::string(what) + " of floats");
    else
      return wrap(kb, FOp::create(b, loc, u, v));
  } else {
    if constexpr (std::is_same_v<IOp, void>)
      fail(std::string(what) + " of integers");
    else
      return wrap(kb, IOp::create(b, loc, u, v));
  }
}

dsl::Value KernelBuilder::add(dsl::Value a, dsl::Value b) {
  return arith2<arith::AddFOp, arith::AddIOp>(this, B, L, a, b, "add");
}
dsl::Value KernelBuilder::sub(dsl::Value a, dsl::Value b) {
  return arith2<arith::SubFOp, arith::SubIOp>(this, B, L, a, b, "sub");
}
dsl::Value KernelBuilder::mul(dsl::Value a, dsl::Value b) {
  return arith2<arith::MulFOp, arith::MulIOp>(this, B, L, a, b, "mul");
}
dsl::Value KernelBuilder::div(dsl::Value a, dsl::Value b) {
  return arith2<arith::DivFOp, arith::DivSIOp>(this, B, L, a, b, "div");
}
dsl::Value KernelBuilder::divApprox(dsl::Value a, dsl::Value b) {
  auto [p, q] = unify(this, a, b);
  if (!isa<FloatType>(elemOf(unwrap(p).getType())) || !isa<FloatType>(elemOf(unwrap(q).getType())))
    fail("divApprox of non-floats");
  return W(arith::DivFOp::create(B, L, unwrap(p), unwrap(q), arith::FastMathFlags::afn));
}
dsl::Value KernelBuilder::rem(dsl::Value a, dsl::Value b) {
  return arith2<void, arith::RemSIOp>(this, B, L, a, b, "rem");
}
dsl::Value KernelBuilder::maximum(dsl::Value a, dsl::Value b) {
  return arith2<arith::MaxNumFOp, arith::MaxSIOp>(this, B, L, a, b, "maximum");
}
dsl::Value KernelBuilder::minimum(dsl::Value a, dsl::Value b) {
  return arith2<arith::MinNumFOp, arith::MinSIOp>(this, B, L, a, b, "minimum");
}
dsl::Value KernelBuilder::logicalAnd(dsl::Value a, dsl::Value b) {
  return arith2<void, arith::AndIOp>(this, B, L, a, b, "and");
}
dsl::Value KernelBuilder::logicalOr(dsl::Value a, dsl::Value b) {
  return arith2<void, arith::OrIOp>(this, B, L, a, b, "or");
}

static dsl::Value compare(KernelBuilder* kb, OpBuilder& b, Location loc, dsl::Value x, dsl::Value y,
                          arith::CmpFPredicate fp, arith::CmpIPredicate ip) {
  auto [p, q] = unify(kb, x, y);
  mlir::Value u = unwrap(p), v = unwrap(q);
  if (elemOf(u.getType()) != elemOf(v.getType())) fail("comparison of mismatched types");
  if (isa<FloatType>(elemOf(u.getType()))) return wrap(kb, arith::CmpFOp::create(b, loc, fp, u, v));
  return wrap(kb, arith::CmpIOp::create(b, loc, ip, u, v));
}
// Each comparison: its float predicate (ordered but for ne) and its signed integer one.
#define SSMJIT_DSL_COMPARISON(name, floatPredicate, intPredicate)                                               \
  dsl::Value KernelBuilder::name(dsl::Value a, dsl::Value b) {                                                  \
    return compare(this, B, L, a, b, arith::CmpFPredicate::floatPredicate, arith::CmpIPredicate::intPredicate); \
  }
SSMJIT_DSL_COMPARISON(lt, OLT, slt)
SSMJIT_DSL_COMPARISON(le, OLE, sle)
SSMJIT_DSL_COMPARISON(gt, OGT, sgt)
SSMJIT_DSL_COMPARISON(ge, OGE, sge)
SSMJIT_DSL_COMPARISON(eq, OEQ, eq)
SSMJIT_DSL_COMPARISON(ne, UNE, ne)
#undef SSMJIT_DSL_COMPARISON

dsl::Value KernelBuilder::logicalNot(dsl::Value a) {
  if (!a.isBool()) fail("logical not of a non-boolean");
  return W(arith::XOrIOp::create(B, L, unwrap(a), unwrap(broadcastTo(constBool(true), a.shape()))));
}
dsl::Value KernelBuilder::select(dsl::Value c, dsl::Value a, dsl::Value b) {
  auto shape = broadcastShape({c.shape(), a.shape(), b.shape()});
  c = broadcastTo(c, shape);
  a = broadcastTo(a, shape);
  b = broadcastTo(b, shape);
  return W(arith::SelectOp::create(B, L, unwrap(c), unwrap(a), unwrap(b)));
}
dsl::Value KernelBuilder::neg(dsl::Value a) {
  if (a.isFloat()) return W(arith::NegFOp::create(B, L, unwrap(a)));
  return sub(literalLike(a, 0), a);
}
dsl::Value KernelBuilder::exp(dsl::Value a) { return W(math::ExpOp::create(B, L, unwrap(a))); }
dsl::Value KernelBuilder::exp2(dsl::Value a) { return W(math::Exp2Op::create(B, L, unwrap(a))); }
dsl::Value KernelBuilder::log(dsl::Value a) { return W(math::LogOp::create(B, L, unwrap(a))); }
dsl::Value KernelBuilder::log1p(dsl::Value a) { return W(math::Log1pOp::create(B, L, unwrap(a))); }
dsl::Value KernelBuilder::rsqrt(dsl::Value a) { return W(math::RsqrtOp::create(B, L, unwrap(a))); }

dsl::Value KernelBuilder::toFloat(dsl::Value a) {
  mlir::Value v = unwrap(a);
  if (a.isFloat()) return a;
  Type t = withShape(B.getF32Type(), shapeOfType(v.getType()));
  if (a.isBool()) return W(arith::UIToFPOp::create(B, L, t, v));
  return W(arith::SIToFPOp::create(B, L, t, v));
}
dsl::Value KernelBuilder::toIndex(dsl::Value a) {
  mlir::Value v = unwrap(a);
  Type e = elemOf(v.getType());
  if (isa<FloatType>(e)) fail("toIndex of a float");
  Type t = withShape(impl_->indexTy, shapeOfType(v.getType()));
  unsigned w = e.getIntOrFloatBitWidth(), iw = impl_->indexTy.getIntOrFloatBitWidth();
  if (w == iw) return a;
  if (w == 1) return W(arith::ExtUIOp::create(B, L, t, v));
  if (w < iw) return W(arith::ExtSIOp::create(B, L, t, v));
  return W(arith::TruncIOp::create(B, L, t, v));
}
dsl::Value KernelBuilder::literalLike(dsl::Value like, double v) {
  if (like.isFloat()) return constFloat(v);
  if (like.isBool()) return constBool(v != 0);
  if (v != (double)(int64_t)v) fail("fractional literal with an integer operand");
  return constInt((int64_t)v);
}

dsl::Value KernelBuilder::load(dsl::Value ptr, dsl::Value offsets, dsl::Value mask, dsl::Value other) {
  mlir::Value p = unwrap(ptr), off = unwrap(offsets);
  auto shape = shapeOfType(off.getType());
  Type storage = cast<sj::PtrType>(p.getType()).getElementType();
  Type resElem = isa<FloatType>(storage) ? Type(B.getF32Type()) : elemOf(off.getType());
  std::vector<int64_t> s(shape.begin(), shape.end());
  mlir::Value m, o;
  if (mask.valid()) m = unwrap(broadcastTo(mask, s));
  if (other.valid()) o = unwrap(broadcastTo(other, s));
  return W(sj::LoadOp::create(B, L, withShape(resElem, shape), p, off, m, o));
}
void KernelBuilder::store(dsl::Value ptr, dsl::Value offsets, dsl::Value value, dsl::Value mask) {
  mlir::Value p = unwrap(ptr), off = unwrap(offsets);
  std::vector<int64_t> s = offsets.shape();
  mlir::Value v = unwrap(broadcastTo(value, s));
  mlir::Value m;
  if (mask.valid()) m = unwrap(broadcastTo(mask, s));
  sj::StoreOp::create(B, L, p, off, v, m);
}
dsl::Value KernelBuilder::reduce(dsl::Value t, int axis, const std::string& kind) {
  mlir::Value v = unwrap(t);
  auto s = shapeOfType(v.getType());
  if (axis < 0 || axis >= (int)s.size()) fail("reduce axis out of range");
  std::vector<int64_t> rs(s.begin(), s.end());
  rs.erase(rs.begin() + axis);
  return W(sj::ReduceOp::create(B, L, withShape(elemOf(v.getType()), rs), v, axis, kind, mlir::Value()));
}

dsl::Value KernelBuilder::dot(dsl::Value a, dsl::Value ptr, dsl::Value offset, dsl::Value strideK, dsl::Value strideN,
                              dsl::Value acc, int aPieces, int bPieces) {
  mlir::Value av = unwrap(a), cv = unwrap(acc);
  auto as = shapeOfType(av.getType()), cs = shapeOfType(cv.getType());
  if (as.size() != 2 || cs.size() != 2)
    fail("dot multiplies 2-D tiles, got a of rank " + std::to_string(as.size()) + " and acc of rank " +
         std::to_string(cs.size()));
  if (as[0] != cs[0]) fail("dot: a has " + std::to_string(as[0]) + " rows, acc " + std::to_string(cs[0]));
  if (as[1] % 8 || cs[1] % 8)
    fail("dot: K and N must be multiples of 8, got K " + std::to_string(as[1]) + " and N " + std::to_string(cs[1]));
  if (aPieces < 1 || aPieces > 3 || bPieces < 1 || bPieces > 3)
    fail("dot: pieces must be 1..3, got " + std::to_string(aPieces) + " and " + std::to_string(bPieces));
  for (dsl::Value s : {offset, strideK, strideN})
    if (!s.shape().empty() || s.isFloat() || s.isBool())
      fail(std::string("dot: offset and strides must be index scalars, got ") +
           (s.isFloat()  ? "a float"
            : s.isBool() ? "a bool"
                         : "an index") +
           (s.shape().empty() ? " scalar" : " tile"));
  return W(sj::DotOp::create(B, L, cv.getType(), av, unwrap(ptr), unwrap(offset), unwrap(strideK), unwrap(strideN), cv,
                             aPieces, bPieces));
}

dsl::Value KernelBuilder::dot(dsl::Value aBuf, dsl::Value aOffset, dsl::Value aStrideM, dsl::Value aStrideK, int64_t K,
                              dsl::Value ptr, dsl::Value offset, dsl::Value strideK, dsl::Value strideN,
                              dsl::Value acc) {
  mlir::Value cv = unwrap(acc);
  if (shapeOfType(cv.getType()).size() != 2)
    fail("dot: acc must be a 2-D tile, got rank " + std::to_string(shapeOfType(cv.getType()).size()));
  for (dsl::Value s : {aOffset, aStrideM, aStrideK, offset, strideK, strideN})
    if (!s.shape().empty() || s.isFloat() || s.isBool()) fail("dot: offsets and strides must be index scalars");
  return W(sj::DotSharedOp::create(B, L, cv.getType(), unwrap(aBuf), unwrap(aOffset), unwrap(aStrideM),
                                   unwrap(aStrideK), unwrap(ptr), unwrap(offset), unwrap(strideK), unwrap(strideN), cv,
                                   B.getI64IntegerAttr(K)));
}

std::vector<dsl::Value> KernelBuilder::cumulativeSum(dsl::Value t, int axis, bool reverse) {
  auto plus = [](const std::vector<dsl::Value>& l, const std::vector<dsl::Value>& r) {
    return std::vector<dsl::Value>{l[0] + r[0]};
  };
  return associativeScan({t}, axis, plus, {}, reverse);
}
std::vector<dsl::Value> KernelBuilder::associativeScan(const std::vector<dsl::Value>& tiles, int axis,
                                                       const ScanCombine& combine, const std::vector<dsl::Value>& inits,
                                                       bool reverse) {
  if (tiles.empty()) fail("associativeScan of no tiles");
  std::vector<mlir::Value> srcs;
  for (auto& t : tiles) srcs.push_back(unwrap(t));
  auto s = shapeOfType(srcs[0].getType());
  if (s.empty()) fail("associativeScan of a scalar, expected tiles");
  if (axis < 0 || axis >= (int)s.size()) fail("associativeScan axis out of range");
  std::vector<int64_t> ts(s.begin(), s.end());
  ts.erase(ts.begin() + axis);
  std::vector<Type> resultTypes, elemTypes;
  for (auto& v : srcs) {
    if (shapeOfType(v.getType()) != s) fail("associativeScan of tiles of different shapes");
    resultTypes.push_back(v.getType());
    elemTypes.push_back(elemOf(v.getType()));
  }
  for (auto e : elemTypes) resultTypes.push_back(withShape(e, ts));
  std::vector<mlir::Value> ins;
  if (!inits.empty() && inits.size() != tiles.size()) fail("associativeScan takes no inits or one per tile");
  for (size_t i = 0; i < inits.size(); ++i) {
    ins.push_back(unwrap(broadcastTo(inits[i], ts)));
    if (ins.back().getType() != resultTypes[tiles.size() + i]) fail("associativeScan init of the wrong type");
  }
  auto op = sj::ScanOp::create(B, L, resultTypes, srcs, ins, axis, reverse);
  Block* body = new Block();
  op.getCombine().push_back(body);
  for (int side = 0; side < 2; ++side)
    for (auto e : elemTypes) body->addArgument(e, L);
  {
    OpBuilder::InsertionGuard g(B);
    B.setInsertionPointToEnd(body);
    std::vector<dsl::Value> lhs, rhs;
    for (size_t i = 0; i < srcs.size(); ++i) {
      lhs.push_back(W(body->getArgument(i)));
      rhs.push_back(W(body->getArgument(srcs.size() + i)));
    }
    std::vector<mlir::Value> out;
    for (auto& v : combine(lhs, rhs)) out.push_back(unwrap(v));
    if (out.size() != srcs.size()) fail("associativeScan combine returns the wrong number of values");
    for (size_t i = 0; i < out.size(); ++i)
      if (out[i].getType() != elemTypes[i]) fail("associativeScan combine changes a scalar type");
    sj::YieldOp::create(B, L, out);
  }
  std::vector<dsl::Value> res;
  for (auto r : op.getResults()) res.push_back(W(r));
  return res;
}

dsl::Value KernelBuilder::shift(dsl::Value cur, dsl::Value fill, int axis, int s, int period) {
  mlir::Value c = unwrap(cur), f = unwrap(fill);
  auto sh = shapeOfType(c.getType());
  if (sh.size() != 2) fail("shift of a tile of rank " + std::to_string(sh.size()) + ", expected a 2-D tile");
  if (c.getType() != f.getType()) fail("shift: cur and fill must have one type and shape");
  if (axis < 0 || axis > 1) fail("shift axis out of range");
  if (period < 0 || (period > 0 && sh[axis] % period != 0))
    fail("shift period " + std::to_string(period) + " does not divide the axis' extent " + std::to_string(sh[axis]));
  const int64_t P = period > 0 ? period : sh[axis];
  if (s == 0 || std::abs(s) >= P)
    fail("shift by " + std::to_string(s) + " with segments of " + std::to_string(P) + " places, expected 0 < |s| < " +
         std::to_string(P));
  mlir::IntegerAttr p = period > 0 ? B.getI32IntegerAttr(period) : mlir::IntegerAttr{};
  return W(sj::ShiftOp::create(B, L, c.getType(), c, f, axis, s, p));
}

void KernelBuilder::setInnerLanes(int lanes) {
  if (!isPow2(lanes) || lanes > 32) fail("inner lanes must be a power of two <= 32, got " + std::to_string(lanes));
  impl_->func->setAttr("sj.inner_lanes", B.getI32IntegerAttr(lanes));
}
void KernelBuilder::setMinBlocksPerSM(int blocks) {
  if (blocks < 1 || blocks > 32) fail("blocks per SM must be in 1..32, got " + std::to_string(blocks));
  impl_->func->setAttr("sj.min_blocks", B.getI32IntegerAttr(blocks));
}
void KernelBuilder::setUnrollLines(int lines) {
  if (lines < 0) fail("unroll lines must be >= 0, got " + std::to_string(lines));
  impl_->func->setAttr("sj.unroll_lines", B.getI32IntegerAttr(lines));
}
void KernelBuilder::setShiftLanes(int lanes) {
  if (!isPow2(lanes) || lanes > 32) fail("shift lanes must be a power of two <= 32, got " + std::to_string(lanes));
  impl_->func->setAttr("sj.shift_lanes", B.getI32IntegerAttr(lanes));
}

void KernelBuilder::ifThen(dsl::Value cond, const std::function<void()>& body) {
  auto op = scf::IfOp::create(B, L, unwrap(cond), /*withElseRegion=*/false);
  OpBuilder::InsertionGuard g(B);
  B.setInsertionPoint(op.thenBlock()->getTerminator());
  body();
}
std::vector<dsl::Value> KernelBuilder::ifElse(dsl::Value cond, const std::function<std::vector<dsl::Value>()>& thenBody,
                                              const std::function<std::vector<dsl::Value>()>& elseBody) {
  // Build both arms in a detached region first, to learn the result types.
  auto build = [&](Block* blk, const std::function<std::vector<dsl::Value>()>& fn) {
    OpBuilder::InsertionGuard g(B);
    B.setInsertionPointToEnd(blk);
    std::vector<mlir::Value> vs;
    for (auto& v : fn()) vs.push_back(unwrap(v));
    scf::YieldOp::create(B, L, vs);
    return vs;
  };
  auto tmpThen = std::make_unique<Block>(), tmpElse = std::make_unique<Block>();
  auto tv = build(tmpThen.get(), thenBody);
  auto ev = build(tmpElse.get(), elseBody);
  if (tv.size() != ev.size()) fail("ifElse arms yield different counts");
  std::vector<Type> types;
  for (size_t i = 0; i < tv.size(); ++i) {
    if (tv[i].getType() != ev[i].getType()) fail("ifElse arms yield different types");
    types.push_back(tv[i].getType());
  }
  auto op = scf::IfOp::create(B, L, types, unwrap(cond), /*addThenBlock=*/false,
                              /*addElseBlock=*/false);
  op.getThenRegion().push_back(tmpThen.release());
  op.getElseRegion().push_back(tmpElse.release());
  std::vector<dsl::Value> out;
  for (auto r : op.getResults()) out.push_back(W(r));
  return out;
}
std::vector<dsl::Value> KernelBuilder::forLoop(
    dsl::Value lo, dsl::Value hi, dsl::Value step, const std::vector<dsl::Value>& inits,
    const std::function<std::vector<dsl::Value>(dsl::Value, const std::vector<dsl::Value>&)>& body) {
  std::vector<mlir::Value> iv;
  for (auto& v : inits) iv.push_back(unwrap(v));
  auto op = scf::ForOp::create(B, L, unwrap(lo), unwrap(hi), unwrap(step), iv,
                               [&](OpBuilder& nb, Location, mlir::Value i, ValueRange iters) {
                                 OpBuilder::InsertionGuard g(B);
                                 B.setInsertionPoint(nb.getInsertionBlock(), nb.getInsertionPoint());
                                 std::vector<dsl::Value> args;
                                 for (auto a : iters) args.push_back(W(a));
                                 std::vector<mlir::Value> next;
                                 for (auto& v : body(W(i), args)) next.push_back(unwrap(v));
                                 if (next.size() != iv.size()) fail("forLoop body yields the wrong number of values");
                                 for (size_t k = 0; k < next.size(); ++k)
                                   if (next[k].getType() != iv[k].getType())
                                     fail("forLoop body changes a carried type");
                                 scf::YieldOp::create(B, L, next);
                               });
  std::vector<dsl::Value> out;
  for (auto r : op.getResults()) out.push_back(W(r));
  return out;
}
dsl::Value KernelBuilder::arriveLast(dsl::Value counter, dsl::Value offset, dsl::Value count) {
  if (!unwrap(offset).getType().isIntOrIndex() || !unwrap(count).getType().isIntOrIndex() ||
      isa<RankedTensorType>(unwrap(offset).getType()) || isa<RankedTensorType>(unwrap(count).getType()))
    fail("arriveLast takes a scalar offset and count");
  return W(sj::ArriveLastOp::create(B, L, B.getI1Type(), unwrap(counter), unwrap(offset), unwrap(count)));
}
namespace {
void requireScalarIndex(mlir::Value offset, const char* what) {
  if (isa<RankedTensorType>(offset.getType())) fail(std::string(what) + " takes a scalar offset, got a tile");
  if (!offset.getType().isIntOrIndex()) fail(std::string(what) + " takes a scalar offset, got a float");
}
}  // namespace
dsl::Value KernelBuilder::ticket(dsl::Value counter, dsl::Value offset) {
  requireScalarIndex(unwrap(offset), "ticket");
  return W(sj::TicketOp::create(B, L, unwrap(offset).getType(), unwrap(counter), unwrap(offset)));
}
void KernelBuilder::waitFlag(dsl::Value flag, dsl::Value offset) {
  requireScalarIndex(unwrap(offset), "waitFlag");
  sj::WaitFlagOp::create(B, L, unwrap(flag), unwrap(offset));
}
void KernelBuilder::setFlag(dsl::Value flag, dsl::Value offset) {
  requireScalarIndex(unwrap(offset), "setFlag");
  sj::SetFlagOp::create(B, L, unwrap(flag), unwrap(offset));
}
void KernelBuilder::barrier(bool asyncProxy) { sj::BarrierOp::create(B, L, asyncProxy ? B.getUnitAttr() : UnitAttr()); }
dsl::Value KernelBuilder::sharedBuffer(int64_t elements) {
  if (elements < 1 || elements > kMaxSharedBufferFloats)
    fail("sharedBuffer: elements must be in 1.." + std::to_string(kMaxSharedBufferFloats) + " (48 KiB), got " +
         std::to_string(elements));
  Type t = sj::PtrType::get(impl_->ctx, B.getF32Type());
  return W(
      sj::SharedBufferOp::create(B, L, t, B.getI64IntegerAttr(elements), UnitAttr(), mlir::Value(), nullptr, nullptr)
          .getResult());
}
// The storage type of a dynamic shared buffer or view of `dtype` (`what` names the call).
static Type sharedStorage(OpBuilder& b, DType dtype, const char* what) {
  switch (dtype) {
    case DType::F32:
      return b.getF32Type();
    case DType::F16:
      return b.getF16Type();
    case DType::BF16:
      return b.getBF16Type();
    default:
      fail(std::string(what) + ": dtype must be float32, float16 or bfloat16, got " + dtypeName(dtype));
  }
}
dsl::Value KernelBuilder::sharedBuffer(int64_t elements, DType dtype) { return sharedBuffer(elements, dtype, 0); }
dsl::Value KernelBuilder::sharedBuffer(int64_t elements, DType dtype, int64_t swizzle) {
  Type e = sharedStorage(B, dtype, "sharedBuffer");
  const int64_t bytes = dtypeBytes(dtype);
  if (elements < 1) fail("sharedBuffer: elements must be at least 1, got " + std::to_string(elements));
  if (swizzle != 0 && (!isSwizzleBytes(swizzle) || bytes != 2))
    fail("sharedBuffer: swizzle must be 32, 64 or 128 bytes on a 16-bit buffer, got " + std::to_string(swizzle) +
         " on " + dtypeName(dtype));
  // The emitter carves the buffers in the same order.
  const int64_t total = dynamicBufferStart(impl_->dynamicSharedBytes, swizzle != 0) + elements * bytes;
  if (elements > kMaxDynamicSharedBytes || total > kMaxDynamicSharedBytes)
    fail("sharedBuffer: the kernel's dynamic shared buffers would take " + std::to_string(total) +
         " bytes, more than " + std::to_string(kMaxDynamicSharedBytes) + " (" + std::to_string(elements) + " " +
         dtypeName(dtype) + " asked)");
  impl_->dynamicSharedBytes = total;
  Type t = sj::PtrType::get(impl_->ctx, e);
  return W(sj::SharedBufferOp::create(B, L, t, B.getI64IntegerAttr(elements), B.getUnitAttr(), mlir::Value(), nullptr,
                                      swizzle ? B.getI64IntegerAttr(swizzle) : nullptr)
               .getResult());
}
dsl::Value KernelBuilder::sharedView(dsl::Value buffer, int64_t at, int64_t elements, DType dtype) {
  auto base = unwrap(buffer).getDefiningOp<sj::SharedBufferOp>();
  if (!base || !base.getDynamic() || base.getWithin() || base.getSwizzle())
    fail("sharedView: the buffer must be an unswizzled sharedBuffer(elements, dtype) of its own, not a view");
  Type e = sharedStorage(B, dtype, "sharedView");
  const int64_t baseBytes = base.getBytes();
  const int64_t offset = at * (baseBytes / base.getSize()), bytes = elements * dtypeBytes(dtype);
  if (at < 0 || elements < 1 || offset % 16 || offset + bytes > baseBytes)
    fail("sharedView: " + std::to_string(elements) + " " + dtypeName(dtype) + " from element " + std::to_string(at) +
         " (byte " + std::to_string(offset) + ") of a " + std::to_string(baseBytes) +
         "-byte buffer: expected a start at a multiple of 16 bytes and an end within it");
  return W(sj::SharedBufferOp::create(B, L, sj::PtrType::get(impl_->ctx, e), B.getI64IntegerAttr(elements),
                                      B.getUnitAttr(), unwrap(buffer), B.getI64IntegerAttr(offset), nullptr)
               .getResult());
}
void KernelBuilder::copyAsync(dsl::Value smem, dsl::Value smemOffsets, dsl::Value ptr, dsl::Value offsets,
                              dsl::Value mask) {
  mlir::Value sp = unwrap(smem), p = unwrap(ptr), off = unwrap(offsets);
  auto buf = sp.getDefiningOp<sj::SharedBufferOp>();
  if (!buf || !buf.getDynamic()) fail("copyAsync: smem must be a sharedBuffer(elements, dtype)");
  if (!isa<sj::PtrType>(p.getType())) fail("copyAsync: ptr must be a pointer argument");
  std::vector<int64_t> s = offsets.shape();
  if (s.empty()) fail("copyAsync: offsets must be a tile, got a scalar");
  if (smemOffsets.shape() != s) fail("copyAsync: smemOffsets must have the offsets' shape");
  if (smemOffsets.isFloat() || smemOffsets.isBool() || offsets.isFloat() || offsets.isBool())
    fail("copyAsync: offsets must be index tiles");
  mlir::Value m;
  if (mask.valid()) m = unwrap(broadcastTo(mask, s));
  sj::CopyAsyncOp::create(B, L, sp, unwrap(smemOffsets), p, off, m);
}
// copyTileAsync's and storeTile's operands, checked alike (`what` names the call).
static void checkTileCopy(const char* what, dsl::Value smem, int64_t pitch, dsl::Value ptr,
                          std::initializer_list<dsl::Value> scalars, int64_t rows, int64_t cols, int64_t vec) {
  const std::string w = what;
  auto buf = unwrap(smem).getDefiningOp<sj::SharedBufferOp>();
  if (!buf || !buf.getDynamic()) fail(w + ": smem must be a sharedBuffer(elements, dtype)");
  if (!isa<sj::PtrType>(unwrap(ptr).getType())) fail(w + ": ptr must be a pointer argument");
  for (const dsl::Value& v : scalars)
    if (!v.shape().empty() || v.isFloat() || v.isBool()) fail(w + ": offsets, strides and limits are index scalars");
  if (rows < 1 || cols < 1 || vec < 1 || cols % vec || pitch % vec || pitch < cols)
    fail(w + ": a " + std::to_string(rows) + "x" + std::to_string(cols) + " tile at pitch " + std::to_string(pitch) +
         " in vectors of " + std::to_string(vec) + " (vec must divide cols and pitch, pitch >= cols >= 1)");
}
void KernelBuilder::copyTileAsync(dsl::Value smem, dsl::Value smemBase, int64_t pitch, dsl::Value ptr, dsl::Value base,
                                  dsl::Value rowStride, int64_t rows, int64_t cols, dsl::Value rowsValid,
                                  dsl::Value colsValid, int64_t vec) {
  checkTileCopy("copyTileAsync", smem, pitch, ptr, {smemBase, base, rowStride, rowsValid, colsValid}, rows, cols, vec);
  auto ix = [&](dsl::Value v) { return unwrap(toIndex(v)); };
  sj::CopyTileAsyncOp::create(B, L, unwrap(smem), ix(smemBase), unwrap(ptr), ix(base), ix(rowStride), ix(rowsValid),
                              ix(colsValid), rows, cols, pitch, vec);
}
void KernelBuilder::storeTile(dsl::Value smem, dsl::Value smemBase, int64_t pitch, dsl::Value ptr, dsl::Value base,
                              dsl::Value rowStride, int64_t rows, int64_t cols, dsl::Value rowsValid,
                              dsl::Value colsValid, int64_t vec) {
  checkTileCopy("storeTile", smem, pitch, ptr, {smemBase, base, rowStride, rowsValid, colsValid}, rows, cols, vec);
  auto ix = [&](dsl::Value v) { return unwrap(toIndex(v)); };
  sj::StoreTileOp::create(B, L, unwrap(smem), ix(smemBase), unwrap(ptr), ix(base), ix(rowStride), ix(rowsValid),
                          ix(colsValid), rows, cols, pitch, vec);
}
void KernelBuilder::commitGroup() { sj::CommitGroupOp::create(B, L); }
void KernelBuilder::waitGroup(int pending) {
  if (pending < 0 || pending > 7) fail("waitGroup: pending must be 0..7, got " + std::to_string(pending));
  sj::WaitGroupOp::create(B, L, pending);
}
void KernelBuilder::returnIf(dsl::Value cond) { sj::ReturnIfOp::create(B, L, unwrap(cond)); }
void KernelBuilder::reportError(dsl::Value err, dsl::Value code, dsl::Value a, dsl::Value b, dsl::Value c) {
  auto i64 = [&](dsl::Value v) -> mlir::Value {
    mlir::Value x = unwrap(v);
    if (x.getType().isInteger(64)) return x;
    return arith::ExtSIOp::create(B, L, B.getI64Type(), x);
  };
  sj::ReportErrorOp::create(B, L, unwrap(err), i64(code), i64(a), i64(b), i64(c));
}

void* KernelBuilder::finish() {
  auto& I = *impl_;
  OpBuilder::InsertionGuard g(I.b);
  I.b.setInsertionPointToEnd(I.entry);
  func::ReturnOp::create(I.b, I.loc);
  I.func.setType(FunctionType::get(I.ctx, I.argTypes, {}));
  for (size_t i = 0; i < I.argTypes.size(); ++i) {
    I.func.setArgAttr(i, "sj.name", I.b.getStringAttr(I.argAttrs[i].first));
    I.func.setArgAttr(i, "sj.role", I.b.getStringAttr(I.argAttrs[i].second));
  }
  std::string diagnostics;
  {
    ScopedDiagnosticHandler handler(I.ctx, [&](Diagnostic& d) {
      diagnostics += "\n" + d.str();
      return success();
    });
    if (failed(mlir::verify(I.module))) fail("the built kernel does not verify:" + diagnostics);
  }
  return I.module.getOperation();
}
#undef W
#undef B
#undef L

// ---- composite math and operators -----------------------------------------------------------
Value sigmoid(Value x) {
  auto* b = x.builder();
  return b->divApprox(b->literalLike(x, 1.0), 1.0 + b->exp2(x * -1.4426950408889634));  // exp(-x) = exp2(-x log2 e)
}
Value silu(Value x) { return x * sigmoid(x); }
Value softplus(Value x) {
  auto* b = x.builder();
  return b->select(x > 20.0, x, b->log1p(b->exp(x)));
}
Value dtTransform(Value d, Value softplusOn, Value hasClamp, Value dtMin, Value dtMax) {
  auto* k = d.builder();
  d = k->ifElse(
      softplusOn, [&] { return std::vector<Value>{softplus(d)}; }, [&] { return std::vector<Value>{d}; })[0];
  return k->ifElse(
      hasClamp, [&] { return std::vector<Value>{k->minimum(k->maximum(d, dtMin), dtMax)}; },
      [&] { return std::vector<Value>{d}; })[0];
}
Value cdiv(Value a, Value b) { return (a + b - 1) / b; }

int dotPieces(const Specialization& s, const char* tensor) {
  switch (static_cast<DType>(s.get(std::string("dtype:") + tensor))) {
    case DType::BF16:
      return 1;
    case DType::F16:
      return 2;
    default:
      return 3;
  }
}

Value operator+(Value a, Value b) { return a.builder()->add(a, b); }
Value operator-(Value a, Value b) { return a.builder()->sub(a, b); }
Value operator*(Value a, Value b) { return a.builder()->mul(a, b); }
Value operator/(Value a, Value b) { return a.builder()->div(a, b); }
Value operator%(Value a, Value b) { return a.builder()->rem(a, b); }
Value operator-(Value a) { return a.builder()->neg(a); }
Value operator<(Value a, Value b) { return a.builder()->lt(a, b); }
Value operator<=(Value a, Value b) { return a.builder()->le(a, b); }
Value operator>(Value a, Value b) { return a.builder()->gt(a, b); }
Value operator>=(Value a, Value b) { return a.builder()->ge(a, b); }
Value operator==(Value a, Value b) { return a.builder()->eq(a, b); }
Value operator!=(Value a, Value b) { return a.builder()->ne(a, b); }
Value operator&&(Value a, Value b) { return a.builder()->logicalAnd(a, b); }
Value operator||(Value a, Value b) { return a.builder()->logicalOr(a, b); }
Value operator!(Value a) { return a.builder()->logicalNot(a); }

#define SSMJIT_DSL_LITERAL_IMPL(T)                                                       \
  Value operator+(Value a, T b) { return a + a.builder()->literalLike(a, (double)b); }   \
  Value operator+(T a, Value b) { return b.builder()->literalLike(b, (double)a) + b; }   \
  Value operator-(Value a, T b) { return a - a.builder()->literalLike(a, (double)b); }   \
  Value operator-(T a, Value b) { return b.builder()->literalLike(b, (double)a) - b; }   \
  Value operator*(Value a, T b) { return a * a.builder()->literalLike(a, (double)b); }   \
  Value operator*(T a, Value b) { return b.builder()->literalLike(b, (double)a) * b; }   \
  Value operator/(Value a, T b) { return a / a.builder()->literalLike(a, (double)b); }   \
  Value operator/(T a, Value b) { return b.builder()->literalLike(b, (double)a) / b; }   \
  Value operator%(Value a, T b) { return a % a.builder()->literalLike(a, (double)b); }   \
  Value operator<(Value a, T b) { return a < a.builder()->literalLike(a, (double)b); }   \
  Value operator<=(Value a, T b) { return a <= a.builder()->literalLike(a, (double)b); } \
  Value operator>(Value a, T b) { return a > a.builder()->literalLike(a, (double)b); }   \
  Value operator>=(Value a, T b) { return a >= a.builder()->literalLike(a, (double)b); } \
  Value operator==(Value a, T b) { return a == a.builder()->literalLike(a, (double)b); } \
  Value operator!=(Value a, T b) { return a != a.builder()->literalLike(a, (double)b); }
SSMJIT_DSL_LITERAL_IMPL(int)
SSMJIT_DSL_LITERAL_IMPL(int64_t)
SSMJIT_DSL_LITERAL_IMPL(double)
#undef SSMJIT_DSL_LITERAL_IMPL

}  // namespace ssmjit::dsl
