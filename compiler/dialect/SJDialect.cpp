#include "compiler/dialect/SJDialect.h"

#include "compiler/Swizzle.h"

#include "llvm/ADT/TypeSwitch.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/OpImplementation.h"

using namespace mlir;
using namespace ssmjit::sj;

#include "compiler/dialect/SJDialect.cpp.inc"

#define GET_TYPEDEF_CLASSES
#include "compiler/dialect/SJTypes.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "compiler/dialect/SJAttrs.cpp.inc"

#define GET_OP_CLASSES
#include "compiler/dialect/SJOps.cpp.inc"

namespace {
// Prints the parent layout once, as `#blocked = #sj.blocked<...>` above the module.
struct SJAsmInterface : OpAsmDialectInterface {
  using OpAsmDialectInterface::OpAsmDialectInterface;
  AliasResult getAlias(Attribute attr, raw_ostream& os) const override {
    if (!isa<BlockedAttr>(attr)) return AliasResult::NoAlias;
    os << "blocked";
    return AliasResult::FinalAlias;
  }
};
}  // namespace

void SJDialect::initialize() {
  addTypes<
#define GET_TYPEDEF_LIST
#include "compiler/dialect/SJTypes.cpp.inc"
      >();
  addAttributes<
#define GET_ATTRDEF_LIST
#include "compiler/dialect/SJAttrs.cpp.inc"
      >();
  addInterfaces<SJAsmInterface>();
  addOperations<
#define GET_OP_LIST
#include "compiler/dialect/SJOps.cpp.inc"
      >();
}

void ssmjit::sj::registerDialects(MLIRContext& ctx) {
  ctx.loadDialect<SJDialect, func::FuncDialect, arith::ArithDialect, math::MathDialect, scf::SCFDialect>();
}

static ArrayRef<int64_t> shapeOf(Type t) {
  if (auto r = dyn_cast<RankedTensorType>(t)) return r.getShape();
  return {};
}

LogicalResult BlockedAttr::verify(function_ref<InFlightDiagnostic()> emitError, ArrayRef<int64_t> spt,
                                  ArrayRef<int64_t> tpw, ArrayRef<int64_t> wpc) {
  for (ArrayRef<int64_t> a : {spt, tpw, wpc})
    if (a.size() != 2 || a[0] < 1 || a[1] < 1) return emitError() << "expects spt, tpw and wpc of two positive sizes";
  if (tpw[0] * tpw[1] != 32) return emitError() << "expects tpw to cover a warp's 32 lanes, got " << tpw[0] * tpw[1];
  return success();
}

LogicalResult SliceAttr::verify(function_ref<InFlightDiagnostic()> emitError, unsigned dim, BlockedAttr) {
  if (dim > 1) return emitError() << "expects dim 0 or 1 of the 2-D parent, got " << dim;
  return success();
}

LogicalResult ExpandDimsOp::verify() {
  auto src = shapeOf(getSrc().getType());
  auto res = shapeOf(getResult().getType());
  int axis = getAxis();
  if (axis < 0 || axis > (int)src.size() || res.size() != src.size() + 1 || res[axis] != 1)
    return emitOpError("expects the result to be the source with a unit axis at ") << axis;
  return success();
}

LogicalResult BroadcastOp::verify() {
  auto src = shapeOf(getSrc().getType());
  auto res = shapeOf(getResult().getType());
  if (src.size() != res.size()) return emitOpError("expects equal ranks");
  for (size_t d = 0; d < src.size(); ++d)
    if (src[d] != res[d] && src[d] != 1)
      return emitOpError("can only repeat unit axes; axis ") << d << " is " << src[d];
  return success();
}

OpFoldResult BroadcastOp::fold(FoldAdaptor) {
  if (getSrc().getType() == getResult().getType()) return getSrc();
  return {};
}

OpFoldResult SplatOp::fold(FoldAdaptor adaptor) {
  // splat(constant) -> dense constant tile, so arith folding sees through it.
  if (auto c = dyn_cast_or_null<TypedAttr>(adaptor.getSrc()))
    if (isa<IntegerAttr, FloatAttr>(c)) return DenseElementsAttr::get(cast<ShapedType>(getResult().getType()), c);
  return {};
}

static Type elementOf(Type t) {
  if (auto s = dyn_cast<ShapedType>(t)) return s.getElementType();
  return t;
}

static LogicalResult checkShapes(Operation* op, Value offsets, Value v, const char* what) {
  if (shapeOf(offsets.getType()) != shapeOf(v.getType()))
    return op->emitOpError("expects ") << what << " to have the offsets' shape";
  return success();
}

LogicalResult LoadOp::verify() {
  Type storage = cast<PtrType>(getPtr().getType()).getElementType();
  Type res = elementOf(getResult().getType());
  if (isa<FloatType>(storage) && !res.isF32()) return emitOpError("loads of float storage give f32");
  if (isa<IntegerType>(storage) && res != elementOf(getOffsets().getType()))
    return emitOpError("loads of integer storage give the offsets' integer type");
  if (failed(checkShapes(*this, getOffsets(), getResult(), "the result"))) return failure();
  if (getMask() && failed(checkShapes(*this, getOffsets(), getMask(), "the mask"))) return failure();
  if (getOther() && getOther().getType() != getResult().getType())
    return emitOpError("expects `other` to have the result's type");
  return success();
}

LogicalResult StoreOp::verify() {
  if (failed(checkShapes(*this, getOffsets(), getValue(), "the value"))) return failure();
  if (getMask() && failed(checkShapes(*this, getOffsets(), getMask(), "the mask"))) return failure();
  return success();
}

LogicalResult ReduceOp::verify() {
  auto src = shapeOf(getSrc().getType());
  int axis = getAxis();
  if (axis < 0 || axis >= (int)src.size()) return emitOpError("axis out of range");
  auto res = shapeOf(getResult().getType());
  if (res.size() + 1 != src.size()) return emitOpError("expects the result to drop the axis");
  StringRef k = getKind();
  if (k != "sum" && k != "max" && k != "min") return emitOpError("kind must be sum, max or min");
  if (getWeight()) {
    if (k != "sum") return emitOpError("a weight needs kind sum, got ") << k;
    if (getWeight().getType() != getSrc().getType()) return emitOpError("expects the weight to have the source's type");
  }
  return success();
}

std::optional<int64_t> ssmjit::sj::constantInt(Value v) {
  if (auto c = v.getDefiningOp<arith::ConstantOp>())
    if (auto i = dyn_cast<IntegerAttr>(c.getValue())) return i.getValue().getSExtValue();
  return std::nullopt;
}

SharedBufferOp ssmjit::sj::fragmentBuffer(Value ptr) {
  auto buf = ptr.getDefiningOp<SharedBufferOp>();
  if (!buf || !buf.getDynamic()) return {};
  Type e = cast<PtrType>(buf.getType()).getElementType();
  return e.isBF16() || e.isF16() ? buf : SharedBufferOp();
}

SharedBufferOp ssmjit::sj::fragmentBuffer(DotOp d) { return fragmentBuffer(d.getPtr()); }

LogicalResult SharedBufferOp::verify() {
  Type e = cast<PtrType>(getType()).getElementType();
  if (getSize() < 1) return emitOpError("expects at least one element, got ") << getSize();
  if (!getDynamic() && !e.isF32()) return emitOpError("a static buffer holds f32");
  if (!e.isF32() && !e.isF16() && !e.isBF16()) return emitOpError("holds f32, f16 or bf16");
  if (auto sw = getSwizzle()) {
    if (!isSwizzleBytes(*sw)) return emitOpError("swizzle must be 32, 64 or 128 bytes, got ") << *sw;
    if (!getDynamic() || getWithin() || e.isF32()) return emitOpError("a swizzled buffer is 16-bit, dynamic, its own");
  }
  if (!getWithin()) return getOffset() ? emitOpError("has an offset but no buffer it is within") : success();
  auto base = getWithin().getDefiningOp<SharedBufferOp>();
  if (!base || !base.getDynamic() || base.getWithin() || base.getSwizzle() || !getDynamic())
    return emitOpError("is a view within an unswizzled dynamic buffer of its own, and dynamic itself");
  const int64_t offset = getOffset().value_or(0);
  if (offset < 0 || offset % 16 || offset + getBytes() > base.getBytes())
    return emitOpError("at byte ") << offset << " with " << getBytes() << " bytes: expected a multiple of 16 within "
                                   << base.getBytes() << " bytes";
  return success();
}

int64_t SharedBufferOp::getBytes() {
  return getSize() * (cast<PtrType>(getType()).getElementType().getIntOrFloatBitWidth() / 8);
}

LogicalResult CopyAsyncOp::verify() {
  auto buf = getSmem().getDefiningOp<SharedBufferOp>();
  if (!buf || !buf.getDynamic()) return emitOpError("copies into a dynamic shared buffer");
  if (shapeOf(getSmemOffsets().getType()) != shapeOf(getOffsets().getType()))
    return emitOpError("expects the shared and global offsets to have one shape");
  if (getMask() && shapeOf(getMask().getType()) != shapeOf(getOffsets().getType()))
    return emitOpError("expects the mask to have the offsets' shape");
  return success();
}

// A tile copy between a dynamic shared buffer and memory (copy_tile_async, store_tile).
template <class TileOp>
static LogicalResult verifyTileCopy(TileOp op, const char* buffer) {
  auto buf = op.getSmem().template getDefiningOp<SharedBufferOp>();
  if (!buf || !buf.getDynamic()) return op.emitOpError(buffer);
  const int64_t rows = op.getRows(), cols = op.getCols(), pitch = op.getPitch(), vec = op.getVec();
  if (rows < 1 || cols < 1)
    return op.emitOpError("needs a tile of at least one row and column, got ") << rows << "x" << cols;
  if (vec < 1 || cols % vec || pitch % vec)
    return op.emitOpError("vec ") << vec << " must divide cols " << cols << " and pitch " << pitch;
  if (pitch < cols) return op.emitOpError("pitch ") << pitch << " is below cols " << cols;
  return success();
}

LogicalResult CopyTileAsyncOp::verify() { return verifyTileCopy(*this, "copies into a dynamic shared buffer"); }

LogicalResult StoreTileOp::verify() { return verifyTileCopy(*this, "stores from a dynamic shared buffer"); }

LogicalResult WaitGroupOp::verify() {
  if (getPending() < 0 || getPending() > 7) return emitOpError("pending must be 0..7, got ") << getPending();
  return success();
}

// An operand in a 16-bit shared buffer is read as 8-element rows by ldmatrix: each 16-byte
// aligned. `what` names it; s0 and s1 are its strides.
static LogicalResult verifyFragmentOperand(Operation* op, const char* what, Value offset, Value s0, Value s1) {
  auto a = constantInt(s0), b = constantInt(s1);
  const bool unit0 = a && *a == 1, unit1 = b && *b == 1;
  auto pitch = unit1 ? a : b;
  if (!unit0 && !unit1) return op->emitOpError(what) << " from a 16-bit shared buffer needs a unit stride";
  if (!pitch || *pitch % 8 || *pitch <= 0)
    return op->emitOpError(what)
           << " from a 16-bit shared buffer needs its other stride a positive constant multiple of 8";
  if (auto off = constantInt(offset); off && *off % 8)
    return op->emitOpError(what) << "'s offset in a 16-bit shared buffer must be a multiple of 8, got " << *off;
  return success();
}

// b in a swizzled buffer, read by wgmma: rows of `swizzle` bytes, either k-contiguous (K within
// a row) or n-contiguous (N filling a row), and the operand starting where the pattern does (a
// multiple of 8 rows; the caller's guarantee where the offset is not a constant).
static LogicalResult verifyWgmmaB(Operation* op, SharedBufferOp buf, Value offset, Value strideK, Value strideN,
                                  int64_t K, int64_t N) {
  const int64_t row = *buf.getSwizzle() / 2;  // elements
  auto sk = constantInt(strideK), sn = constantInt(strideN);
  const bool kMajor = sk == std::optional<int64_t>(1) && sn == std::optional<int64_t>(row);
  const bool nMajor = sn == std::optional<int64_t>(1) && sk == std::optional<int64_t>(row);
  if (!kMajor && !nMajor)
    return op->emitOpError("b from a ") << *buf.getSwizzle() << "-byte swizzled buffer needs strides (k, n) (1, " << row
                                        << ") or (" << row << ", 1)";
  if (K % 16 || N % 8 || N > 256 || (kMajor && K > row) || (nMajor && N != row))
    return op->emitOpError("b from a swizzled buffer needs K a multiple of 16 and N of 8 up to 256, K up to ")
           << row << " (k-contiguous) or N " << row << " (n-contiguous), got " << K << " and " << N;
  if (auto off = constantInt(offset); off && *off % (8 * row))
    return op->emitOpError("b's offset in a swizzled buffer must be a multiple of ") << 8 * row << ", got " << *off;
  return success();
}

static LogicalResult verifyFragmentB(DotOp d, int64_t K, int64_t N) {
  if (d.getBPieces() != 1) return d.emitOpError("b from a 16-bit shared buffer is one term, got ") << d.getBPieces();
  if (SharedBufferOp b = fragmentBuffer(d); b.getSwizzle())
    return verifyWgmmaB(d, b, d.getOffset(), d.getStrideK(), d.getStrideN(), K, N);
  if (K % 16 || N % 16)
    return d.emitOpError("b from a 16-bit shared buffer needs K and N multiples of 16, got ") << K << " and " << N;
  return verifyFragmentOperand(d, "b", d.getOffset(), d.getStrideK(), d.getStrideN());
}

LogicalResult DotSharedOp::verify() {
  auto c = shapeOf(getAcc().getType());
  if (c.size() != 2) return emitOpError("accumulates a 2-D tile");
  if (getResult().getType() != getAcc().getType()) return emitOpError("the result has acc's type");
  SharedBufferOp a = fragmentBuffer(getAPtr()), b = fragmentBuffer(getPtr());
  if (!a || !b) return emitOpError("reads a and b from 16-bit dynamic shared buffers");
  if (a.getType() != b.getType()) return emitOpError("a and b must have one storage type");
  const int64_t K = getK();
  if (c[0] % 8 || K % 16 || c[1] % 16)
    return emitOpError("needs M a multiple of 8, K and N of 16, got ") << c[0] << ", " << K << " and " << c[1];
  if (a.getSwizzle()) return emitOpError("reads a from an unswizzled buffer (ldmatrix)");
  if (failed(verifyFragmentOperand(*this, "a", getAOffset(), getAStrideM(), getAStrideK()))) return failure();
  if (b.getSwizzle()) return verifyWgmmaB(*this, b, getOffset(), getStrideK(), getStrideN(), K, c[1]);
  return verifyFragmentOperand(*this, "b", getOffset(), getStrideK(), getStrideN());
}

LogicalResult DotOp::verify() {
  auto a = shapeOf(getA().getType()), c = shapeOf(getAcc().getType());
  if (a.size() != 2 || c.size() != 2) return emitOpError("multiplies 2-D tiles");
  if (a[0] != c[0]) return emitOpError("a has ") << a[0] << " rows, acc " << c[0];
  if (a[1] % 8 != 0 || c[1] % 8 != 0)
    return emitOpError("K and N must be multiples of 8, got ") << a[1] << " and " << c[1];
  if (getResult().getType() != getAcc().getType()) return emitOpError("the result has acc's type");
  if (!isa<FloatType>(cast<PtrType>(getPtr().getType()).getElementType()))
    return emitOpError("b must be float storage");
  for (int p : {(int)getAPieces(), (int)getBPieces()})
    if (p < 1 || p > 3) return emitOpError("pieces must be 1..3, got ") << p;
  if (fragmentBuffer(*this)) return verifyFragmentB(*this, a[1], c[1]);
  return success();
}

LogicalResult ShiftOp::verify() {
  auto s = shapeOf(getCur().getType());
  int axis = getAxis(), amount = getAmount();
  if (s.size() != 2) return emitOpError("shifts 2-D tiles, got rank ") << s.size();
  if (axis < 0 || axis > 1) return emitOpError("axis out of range");
  const int64_t P = getPeriod() ? static_cast<int32_t>(*getPeriod()) : s[axis];
  if (P < 1 || s[axis] % P != 0) return emitOpError("period ") << P << " does not divide the axis' " << s[axis];
  if (amount == 0 || std::abs(amount) >= P) return emitOpError("expects 0 < |amount| < ") << P << ", got " << amount;
  return success();
}

LogicalResult ScanOp::verify() {
  const size_t k = getSrcs().size();
  if (k == 0) return emitOpError("scans at least one tile");
  auto s = shapeOf(getSrcs()[0].getType());
  int axis = getAxis();
  if (axis < 0 || axis >= (int)s.size()) return emitOpError("axis out of range");
  if (getResults().size() != 2 * k) return emitOpError("expects ") << 2 * k << " results (scanned, totals)";
  Block& body = getCombine().front();
  if (body.getNumArguments() != 2 * k) return emitOpError("combine takes ") << 2 * k << " scalars";
  for (size_t i = 0; i < k; ++i) {
    Type t = getSrcs()[i].getType();
    if (shapeOf(t) != s) return emitOpError("scans tiles of one shape");
    if (getResults()[i].getType() != t) return emitOpError("scanned result ") << i << " must have its tile's type";
    auto ts = shapeOf(getResults()[k + i].getType());
    if (ts.size() + 1 != s.size()) return emitOpError("total ") << i << " must drop the axis";
    Type e = getElementTypeOrSelf(t);
    if (body.getArgument(i).getType() != e || body.getArgument(k + i).getType() != e)
      return emitOpError("combine argument types must be the tiles' element types");
  }
  if (!getInits().empty() && getInits().size() != k) return emitOpError("expects no inits or ") << k;
  for (size_t i = 0; i < getInits().size(); ++i)
    if (getInits()[i].getType() != getResults()[k + i].getType())
      return emitOpError("init ") << i << " must be shaped like the totals";
  auto y = dyn_cast<YieldOp>(body.getTerminator());
  if (!y || y.getValues().size() != k) return emitOpError("combine must yield ") << k << " values";
  return success();
}

Operation* SJDialect::materializeConstant(OpBuilder& builder, Attribute value, Type type, Location loc) {
  if (auto typed = dyn_cast<TypedAttr>(value))
    if (arith::ConstantOp::isBuildableWith(typed, type)) return arith::ConstantOp::create(builder, loc, type, typed);
  return nullptr;
}
