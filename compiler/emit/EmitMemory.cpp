// Memory: loads (16-bit float loads kept as their storage bits, see Raw), stores (one owner
// thread per element, in vectors of sj.vec), shared buffers, the arrival counter and error reports.
#include "compiler/Swizzle.h"
#include "compiler/emit/EmitterCore.h"

namespace ssmjit::emit {
using namespace mlir;

namespace {
bool isNarrowFloat(Type t) { return t.isF16() || t.isBF16(); }

bool isZeroConstant(Value v) {
  auto c = v.getDefiningOp<arith::ConstantOp>();
  if (!c) return false;
  auto f = dyn_cast_or_null<FloatAttr>(splatValue(c));
  return f && f.getValueAsDouble() == 0.0 && !f.getValue().isNegative();
}

int64_t vecOf(Operation* access) {
  auto a = access->getAttrOfType<IntegerAttr>("sj.vec");
  return a ? a.getInt() : 1;
}
}  // namespace

// The storage type of a value emitted as raw 16-bit bits (a 16-bit float load whose masked-off
// elements are 0.0), else a null type.
Type Emitter::rawLoadStorage(Value v) {
  auto l = v.getDefiningOp<sj::LoadOp>();
  if (!l) return {};
  Type storage = cast<sj::PtrType>(l.getPtr().getType()).getElementType();
  if (!isNarrowFloat(storage) || (l.getOther() && !isZeroConstant(l.getOther()))) return {};
  return storage;
}

// How a raw 16-bit load is kept (rawLoadStorage(v) is set): words for a tile loaded in vectors.
Emitter::Raw Emitter::rawForm(Value v, const std::string& name) {
  const std::string elem = storageCType(rawLoadStorage(v));
  const bool words = !shapeOf(v).empty() && vecOf(v.getDefiningOp()) >= 2;
  return Raw{name, words ? "unsigned" : elem, elem, words};
}

void Emitter::emit(sj::LoadOp l) {
  Value res = l.getResult();
  Type storage = cast<sj::PtrType>(l.getPtr().getType()).getElementType();
  bool isFloat = isa<FloatType>(storage);
  std::string other = l.getOther() ? "" : (isFloat ? "0.0f" : "0");
  if (rawLoadStorage(res)) return emitRawLoad(l);
  if (shapeOf(res).empty()) {
    std::string load = "ssm_load(" + address(l.getPtr(), name(l.getOffsets())) + ")";
    if (!isFloat) load = "(" + cType(res.getType()) + ")" + load;
    if (l.getMask()) load = name(l.getMask()) + " ? " + load + " : " + (l.getOther() ? name(l.getOther()) : other);
    return defineScalar(res, load);
  }
  Kind k = layoutOf(res);
  const int64_t vec = vecOf(l);
  std::string nm = declare(res, k);
  const std::string fill = l.getOther() ? E(l.getOther(), k, "r + ssm_k") : other;
  forRegs(
      regs(k, shapeOf(res)),
      [&] {
        std::string addr = address(l.getPtr(), E(l.getOffsets(), k, "r"));
        std::string ld = "ssm_ld<" + I(vec) + ">(&" + nm + "[r], " + addr + ");";
        if (l.getMask()) {
          line("if (" + E(l.getMask(), k, "r") + ") " + ld);
          line("else {");
          ++ind_;
          forConst("ssm_k", 0, vec, 1, [&] { line(nm + "[r + ssm_k] = " + fill + ";"); });
          closeBlocks();
        } else {
          line(ld);
        }
      },
      vec);
}

// A 16-bit float load as storage bits; masked-off elements are +0.0 (all bits zero).
void Emitter::emitRawLoad(sj::LoadOp l) {
  Value res = l.getResult();
  const std::string nm = fresh(), ptr = name(l.getPtr());
  const Raw raw = rawForm(res, nm);
  const std::string& T = raw.storage;
  raw_[res.getAsOpaquePointer()] = raw;
  if (shapeOf(res).empty()) {
    const std::string at = ptr + "[" + offsetIn(l.getPtr(), name(l.getOffsets())) + "]";
    line("const " + T + " " + nm + " = " + (l.getMask() ? name(l.getMask()) + " ? " + at + " : " + T + "{0}" : at) +
         ";");
    names_[res.getAsOpaquePointer()] = "ssm_to_float(" + nm + ")";
    return;
  }
  Kind k = layoutOf(res);
  const int64_t vec = vecOf(l), n = regs(k, shapeOf(res));
  line(T + " " + nm + "[" + I(n) + "] = {};");
  names_[res.getAsOpaquePointer()] = nm;
  kinds_[res.getAsOpaquePointer()] = k;
  const std::string fn = raw.words ? "ssm_ld_words<" : "ssm_ld_raw<";
  forRegs(
      n,
      [&] {
        std::string ld = fn + I(vec) + ">(&" + nm + "[r], " + address(l.getPtr(), E(l.getOffsets(), k, "r")) + ");";
        line(l.getMask() ? "if (" + E(l.getMask(), k, "r") + ") " + ld : ld);
      },
      vec);
}

void Emitter::emit(sj::StoreOp s) {
  Value v = s.getValue();
  if (shapeOf(v).empty()) {
    std::string st = "ssm_store(" + address(s.getPtr(), name(s.getOffsets())) + ", " + name(v) + ");";
    // A scalar store is uniform: one thread writes it.
    std::string cond = "threadIdx.x == 0";
    if (s.getMask()) cond += " && " + name(s.getMask());
    line("if (" + cond + ") " + st);
    return;
  }
  Kind k = opLayout(s);
  auto shape = shapeOf(v);
  const int64_t vec = vecOf(s);
  // Gather the value registers of one vector, then store them together.
  forOwnedRegs(
      k, shape,
      [&] {
        line("float ssm_v[" + I(vec) + "];");
        forConst("ssm_k", 0, vec, 1, [&] { line("ssm_v[ssm_k] = (float)" + E(v, k, "r + ssm_k") + ";"); });
        std::string st = "ssm_st<" + I(vec) + ">(" + address(s.getPtr(), E(s.getOffsets(), k, "r")) + ", ssm_v);";
        if (s.getMask())
          line("if (" + E(s.getMask(), k, "r") + ") " + st);
        else
          line(st);
      },
      vec);
}

void Emitter::emit(sj::SharedBufferOp b) {
  std::string nm = fresh();
  names_[b.getResult().getAsOpaquePointer()] = nm;
  if (!b.getDynamic()) {
    line("__shared__ __align__(16) float " + nm + "[" + I(b.getSize()) + "];");
    return;
  }
  const std::string T = storageCType(cast<sj::PtrType>(b.getType()).getElementType());
  line(T + "* const " + nm + " = reinterpret_cast<" + T + "*>(ssm_smem + " + I(dynamicOffsets_.at(b)) + ");");
}

std::string Emitter::offsetIn(Value ptr, const std::string& offset) {
  auto b = ptr.getDefiningOp<sj::SharedBufferOp>();
  if (!b || !b.getSwizzle()) return offset;
  return "ssm_swizzle<" + I(*b.getSwizzle() / 16 - 1) + ">(" + offset + ")";
}

std::string Emitter::address(Value ptr, const std::string& offset) { return name(ptr) + " + " + offsetIn(ptr, offset); }

// One extern array for all dynamic buffers, each at its next multiple of dynamicBufferAlignment.
void Emitter::carveDynamicShared() {
  int64_t align = dynamicBufferAlignment(false);
  f_.walk([&](sj::SharedBufferOp b) {
    if (!b.getDynamic()) return;
    if (b.getWithin()) {  // a view: its buffer's bytes (carved before it: walked in order)
      dynamicOffsets_[b] = dynamicOffsets_.at(b.getWithin().getDefiningOp<sj::SharedBufferOp>()) + *b.getOffset();
      return;
    }
    const bool swizzled = b.getSwizzle().has_value();
    align = std::max(align, dynamicBufferAlignment(swizzled));
    dynamicOffsets_[b] = dynamicBufferStart(dynamicBytes_, swizzled);
    dynamicBytes_ = dynamicOffsets_[b] + b.getBytes();
  });
  if (dynamicBytes_ > 0)
    line("extern __shared__ __align__(" + I(align) + ") unsigned char ssm_smem[];  // " + I(dynamicBytes_) + " bytes");
}

void Emitter::emit(sj::ArriveLastOp a) {
  defineScalar(a.getResult(), "ssm_arrive_last(" + name(a.getCounter()) + " + " + name(a.getOffset()) + ", " +
                                  name(a.getCount()) + ")");
}

void Emitter::emit(sj::TicketOp t) {
  defineScalar(t.getResult(), "ssm_ticket(" + name(t.getCounter()) + " + " + name(t.getOffset()) + ")");
}

void Emitter::emit(sj::WaitFlagOp w) {
  line("ssm_wait_flag(" + name(w.getFlag()) + " + " + name(w.getOffset()) + ");");
}

void Emitter::emit(sj::SetFlagOp f) { line("ssm_set_flag(" + name(f.getFlag()) + " + " + name(f.getOffset()) + ");"); }

void Emitter::emit(sj::ReportErrorOp r) {
  line("ssm_report_error(" + name(r.getErr()) + ", " + name(r.getCode()) + ", " + name(r.getA()) + ", " +
       name(r.getB()) + ", " + name(r.getC()) + ");");
}

}  // namespace ssmjit::emit
