// The emitter's core: the kernel's signature and prologue, value names, layout arithmetic
// (which registers of which threads hold which coordinates), element access through the
// read-through ops, blocks with their deferred reductions, and the dispatch to one emit per op.
#include <algorithm>
#include <cmath>
#include <set>

#include "compiler/emit/EmitterCore.h"
#include "llvm/ADT/TypeSwitch.h"
#include "ssmjit/error.h"

namespace ssmjit {
using namespace mlir;

namespace emit {

[[noreturn]] void fail(Operation* op, const std::string& msg) {
  std::string where;
  if (op) where = " (at '" + op->getName().getStringRef().str() + "')";
  throw Error(Error::Kind::Compile, "cuda emitter: " + msg + where);
}

std::string cType(Type t) {
  t = getElementTypeOrSelf(t);
  if (t.isF32()) return "float";
  if (t.isInteger(1)) return "bool";
  if (t.isInteger(32)) return "int";
  if (t.isInteger(64)) return "long long";
  fail(nullptr, "no C type for a value type");
}

std::string storageCType(Type t) {
  if (t.isF32()) return "float";
  if (t.isF16()) return "ssm_f16";
  if (t.isBF16()) return "ssm_bf16";
  if (t.isInteger(32)) return "int";
  if (t.isInteger(64)) return "long long";
  fail(nullptr, "no storage type");
}

namespace {
std::string floatLit(double v) {
  if (std::isinf(v)) return v > 0 ? "__int_as_float(0x7f800000)" : "__int_as_float(0xff800000)";
  std::ostringstream s;
  s.precision(9);
  s << std::scientific << (float)v << "f";
  return s.str();
}
}  // namespace

std::vector<int64_t> shapeOf(Value v) {
  if (auto t = dyn_cast<RankedTensorType>(v.getType())) return {t.getShape().begin(), t.getShape().end()};
  return {};
}

bool isRemat(Value v) {
  Operation* d = v.getDefiningOp();
  return d && (isa<sj::RangeOp, sj::SplatOp>(d) || isa<arith::ConstantOp>(d));
}

Emitter::Emitter(func::FuncOp f) : f_(f), P_(layout::parentOf(f)) {
  warps_ = f->getAttrOfType<IntegerAttr>("sj.num_warps").getInt();
  if (auto u = f->getAttrOfType<IntegerAttr>("sj.unroll_lines")) unrollLines_ = u.getInt();
}

EmittedKernel Emitter::run() {
  EmittedKernel k;
  k.entry = f_.getSymName().str();
  k.numThreads = (int)(warps_ * 32);
  std::ostringstream sig;
  for (unsigned i = 0; i < f_.getNumArguments(); ++i) {
    BlockArgument a = f_.getArgument(i);
    std::string name = f_.getArgAttrOfType<StringAttr>(i, "sj.name").str();
    std::string cname = "p_" + name;
    names_[a.getAsOpaquePointer()] = cname;
    if (i) sig << ",\n    ";
    if (auto p = dyn_cast<sj::PtrType>(a.getType())) {
      sig << storageCType(p.getElementType()) << "* __restrict__ " << cname;
      k.params.push_back({name, KernelParam::Kind::Ptr});
    } else if (a.getType().isF32()) {
      sig << "float " << cname;
      k.params.push_back({name, KernelParam::Kind::F32});
    } else if (a.getType().isInteger(32)) {
      sig << "int " << cname;
      k.params.push_back({name, KernelParam::Kind::I32});
    } else if (a.getType().isInteger(64)) {
      sig << "long long " << cname;
      k.params.push_back({name, KernelParam::Kind::I64});
    } else {
      fail(nullptr, "argument '" + name + "' has a type no kernel parameter can take (unbound flag?)");
    }
  }
  os_ << "#include \"ssmjit_device.cuh\"\n\n";
  os_ << "// parent layout: " << P_.str() << ", " << warps_ << " warps\n";
  std::string bounds = std::to_string(k.numThreads);
  if (auto mb = f_->getAttrOfType<IntegerAttr>("sj.min_blocks")) bounds += ", " + std::to_string(mb.getInt());
  os_ << "extern \"C\" __global__ void __launch_bounds__(" << bounds << ") " << k.entry << "(\n    " << sig.str()
      << ") {\n";
  ind_ = 1;
  line("const int ssm_lane = threadIdx.x & 31, ssm_warp = threadIdx.x >> 5;");
  line("const int ssm_t0 = (ssm_warp / " + std::to_string(P_.wpc[1]) + ") * " + std::to_string(P_.tpw[0]) +
       " + ssm_lane / " + std::to_string(P_.tpw[1]) + ";");
  line("const int ssm_t1 = (ssm_warp % " + std::to_string(P_.wpc[1]) + ") * " + std::to_string(P_.tpw[1]) +
       " + ssm_lane % " + std::to_string(P_.tpw[1]) + ";");
  line("(void)ssm_t0; (void)ssm_t1;");
  carveDynamicShared();
  emitBlock(f_.getBody().front());
  os_ << "}\n";
  k.source = os_.str();
  k.dynamicSharedBytes = (int)dynamicBytes_;
  return k;
}

std::string Emitter::name(Value v) {
  auto it = names_.find(v.getAsOpaquePointer());
  if (it == names_.end()) fail(v.getDefiningOp(), "use of a value with no name");
  return it->second;
}

void Emitter::defineScalar(Value v, const std::string& expr) {
  const std::string nm = fresh();
  names_[v.getAsOpaquePointer()] = nm;
  line("const " + cType(v.getType()) + " " + nm + " = " + expr + ";");
}

std::string Emitter::declare(Value v, Kind k) {
  std::string nm = fresh();
  names_[v.getAsOpaquePointer()] = nm;
  auto s = shapeOf(v);
  if (s.empty()) {
    line(cType(v.getType()) + " " + nm + ";");
    return nm;
  }
  kinds_[v.getAsOpaquePointer()] = k;
  line(cType(v.getType()) + " " + nm + "[" + I(regs(k, s)) + "];");
  return nm;
}

void Emitter::forConst(const std::string& var, int64_t begin, int64_t end, int64_t step,
                       const std::function<void()>& body) {
  // Up to kEmitUnrollMax iterations are unrolled here, a block with a constant `var` each, rather
  // than left to `#pragma unroll`: NVVM's time on kernels of many short loops is mostly the loops
  // (the scan backward's main kernel compiles in about 40% less time), while longer bodies
  // repeated in the source cost its front end more than unrolling saves (the SSD's kernels).
  // A kernel's unroll_lines (setUnrollLines) also unrolls longer loops whose repeated text stays
  // within that many lines.
  constexpr int64_t kEmitUnrollMax = 4;
  const int64_t n = std::max<int64_t>(0, (end - begin + step - 1) / step);
  std::ostringstream text;
  std::swap(os_, text);
  ++ind_;
  body();
  --ind_;
  std::swap(os_, text);
  const std::string once = text.str();
  const int64_t lines = std::count(once.begin(), once.end(), '\n');
  if (n > kEmitUnrollMax && n * lines > unrollLines_) {
    line("#pragma unroll");
    line("for (int " + var + " = " + I(begin) + "; " + var + " < " + I(end) + "; " + var + " += " + I(step) + ") {");
    os_ << once;
    line("}");
    return;
  }
  for (int64_t v = begin; v < end; v += step) {
    line("{");
    ++ind_;
    line("const int " + var + " = " + I(v) + ";");
    --ind_;
    os_ << once;
    line("}");
  }
}

void Emitter::forRegs(int64_t R, const std::function<void()>& body, int64_t step) {
  forConst("r", 0, std::max(R, int64_t{1}), step, body);
}

void Emitter::forOwnedRegs(Kind k, const std::vector<int64_t>& shape, const std::function<void()>& body, int64_t step) {
  const std::string own = owner(k, shape);
  if (!own.empty()) {
    line("if (" + own + ") {");
    ++ind_;
  }
  forRegs(regs(k, shape), body, step);
  if (!own.empty()) {
    closeBlocks();
  }
}

// ---- layout arithmetic -----------------------------------------------------------------------
// Coordinate along parent dim d of local index j (an expression) for extent S.
// `thread`: another thread's index along d than this one's.
std::string Emitter::coord(int d, int64_t S, const std::string& j, const std::string& thread) const {
  const int64_t T = P_.threads(d), spt = P_.spt[d];
  const std::string t = !thread.empty() ? thread : d == 0 ? "ssm_t0" : "ssm_t1";
  if (S >= T * spt)
    return "((" + j + ") / " + I(spt) + " * " + I(T * spt) + " + " + t + " * " + I(spt) + " + (" + j + ") % " + I(spt) +
           ")";
  if (S >= T) return "(" + t + " * " + I(S / T) + " + (" + j + "))";
  return "(" + t + " % " + I(S) + ")";
}

// Is this thread the canonical owner of its elements (no replica with a smaller thread id)?
std::string Emitter::owner(Kind k, const std::vector<int64_t>& shape) const {
  std::vector<std::string> c;
  auto dimOwner = [&](int d, int64_t S) {
    if (S < P_.threads(d)) c.push_back(std::string(d == 0 ? "ssm_t0" : "ssm_t1") + " < " + I(S));
  };
  if (k == Kind::Blocked) dimOwner(0, shape[0]), dimOwner(1, shape[1]);
  if (k == Kind::Slice0 || k == Kind::Slice1) {
    int d = layout::sliceDim(k);
    dimOwner(d, shape[0]);
    c.push_back(std::string(d == 0 ? "ssm_t1" : "ssm_t0") + " == 0");
  }
  if (c.empty()) return "";
  std::string s = c[0];
  for (size_t i = 1; i < c.size(); ++i) s += " && " + c[i];
  return s;
}

int64_t Emitter::regs(Kind k, const std::vector<int64_t>& s) const {
  if (k == Kind::Blocked) return n(0, s[0]) * n(1, s[1]);
  if (k == Kind::Slice0 || k == Kind::Slice1) return n(layout::sliceDim(k), s[0]);
  return 1;
}

// Coordinates (per tile axis) of register r.
std::vector<std::string> Emitter::coords(Kind k, const std::vector<int64_t>& s, const std::string& r) const {
  if (k == Kind::Blocked) {
    int64_t n1 = n(1, s[1]);
    return {coord(0, s[0], "(" + r + ") / " + I(n1)), coord(1, s[1], "(" + r + ") % " + I(n1))};
  }
  return {coord(layout::sliceDim(k), s[0], r)};
}

layout::Kind Emitter::layoutOf(Value v) {
  auto it = kinds_.find(v.getAsOpaquePointer());
  if (it != kinds_.end()) return it->second;
  int r = (int)shapeOf(v).size();
  if (r == 0) return Kind::Scalar;
  if (r == 2) return Kind::Blocked;
  Attribute a = layout::layoutAttr(v);  // a rematerialised tile (#sj.any) is made where it is used
  return a && !isa<sj::AnyAttr>(a) ? layout::kindOf(a) : Kind::Slice0;
}

// The layout an op works in: that of its first tile operand/result with a definite layout.
layout::Kind Emitter::opLayout(Operation* op) {
  for (Value v : op->getResults())
    if (!shapeOf(v).empty() && !isRemat(v)) return layoutOf(v);
  for (Value v : op->getOperands())
    if (!shapeOf(v).empty() && !isRemat(v)) return layoutOf(v);
  for (Value v : op->getOperands())
    if (!shapeOf(v).empty()) return shapeOf(v).size() == 2 ? Kind::Blocked : Kind::Slice0;
  return Kind::Scalar;
}

// ---- element access ----------------------------------------------------------------------------
std::string Emitter::E(Value v, Kind k, const std::string& r) {
  auto shape = shapeOf(v);
  if (shape.empty()) return name(v);
  Operation* d = v.getDefiningOp();
  if (d && isa<sj::SplatOp>(d)) return name(cast<sj::SplatOp>(d).getSrc());
  if (d && isa<arith::ConstantOp>(d)) return constLiteral(cast<arith::ConstantOp>(d));
  if (d && isa<sj::RangeOp>(d)) {
    if (k == Kind::Blocked) fail(d, "a 1-D range used as a 2-D tile");
    return "(" + cType(v.getType()) + ")" + coords(k, shape, r)[0];
  }
  Kind have = layoutOf(v);
  if (have != k)
    fail(d, std::string("a tile in layout ") + layout::kindName(have) + " is used as " + layout::kindName(k));
  // Expansions and broadcasts are read through to their source at each use: materialised, each
  // was an array of copies that NVVM had to unroll and fold away (half the statements of an SSU
  // kernel, and much of its compile time).
  if (auto e = dyn_cast_or_null<sj::ExpandDimsOp>(d))  // the unit axis holds one register
    return E(e.getSrc(), e.getAxis() == 0 ? Kind::Slice0 : Kind::Slice1, r);
  if (auto b = dyn_cast_or_null<sj::BroadcastOp>(d)) return E(b.getSrc(), k, broadcastSource(b, r));
  if (const Raw* raw = rawOf(v)) {
    if (raw->words) return "ssm_word_to_float<" + raw->elem + ">(" + raw->name + "[" + r + "], (" + r + ") & 1)";
    return "ssm_to_float(" + raw->name + "[" + r + "])";
  }
  return name(v) + "[" + r + "]";
}

// The source register of a broadcast's register r (in the result's layout, which the source
// shares; a 1-D broadcast has a one-element source).
std::string Emitter::broadcastSource(sj::BroadcastOp b, const std::string& r) const {
  auto ss = shapeOf(b.getSrc()), rs = shapeOf(b.getResult());
  if (rs.size() != 2) return "0";
  const int64_t n1 = n(1, rs[1]), sn1 = n(1, ss[1]);
  const std::string j0 = ss[0] == 1 ? "0" : "((" + r + ") / " + I(n1) + ")";
  const std::string j1 = ss[1] == 1 ? "0" : "((" + r + ") % " + I(n1) + ")";
  return j0 + " * " + I(sn1) + " + " + j1;
}

Attribute splatValue(arith::ConstantOp c) {
  Attribute a = c.getValue();
  if (auto d = dyn_cast<DenseElementsAttr>(a)) return d.isSplat() ? d.getSplatValue<Attribute>() : Attribute();
  return a;
}

std::string Emitter::constLiteral(arith::ConstantOp c) {
  Attribute a = splatValue(c);
  if (!a) fail(c, "non-splat tile constant");
  if (auto fa = dyn_cast<FloatAttr>(a)) return floatLit(fa.getValueAsDouble());
  if (auto ia = dyn_cast<IntegerAttr>(a)) {
    if (ia.getType().isInteger(1)) return ia.getValue().getBoolValue() ? "true" : "false";
    if (ia.getType().isInteger(64)) return I(ia.getValue().getSExtValue()) + "LL";
    return I(ia.getValue().getSExtValue());
  }
  fail(c, "unsupported constant");
}

// ---- blocks ------------------------------------------------------------------------------------
void Emitter::emitBlock(Block& b) {
  pending_.emplace_back();
  bool readAny = false;
  for (Operation& op : b) {
    readAny |= readPendingUsedBy(&op);
    emitOp(&op);
  }
  pending_.pop_back();
  if (readAny && &b != &f_.getBody().front()) line("__syncthreads();  // the reductions' words are written again");
}

// Reads the deferred reductions of this block that `op` (or an op inside it) uses.
bool Emitter::readPendingUsedBy(Operation* op) {
  auto& pend = pending_.back();
  if (pend.empty()) return false;
  std::set<Operation*> used;
  std::function<void(Value)> note = [&](Value v) {
    Operation* d = v.getDefiningOp();
    if (!d) return;
    // Splats, expansions and broadcasts are read through at each use.
    if (isa<sj::SplatOp, sj::ExpandDimsOp, sj::BroadcastOp>(d)) return note(d->getOperand(0));
    if (isa<sj::ReduceOp>(d)) used.insert(d);
  };
  op->walk([&](Operation* o) {
    for (Value v : o->getOperands()) note(v);
  });
  bool any = false;
  for (auto it = pend.begin(); it != pend.end();) {
    if (!used.count(it->op)) {
      ++it;
      continue;
    }
    if (!it->synced) {
      line("__syncthreads();  // every warp's partials of the reductions above are written");
      for (Pending& p : pend) p.synced = true;
    }
    it->read();
    it = pend.erase(it);
    any = true;
  }
  return any;
}

void Emitter::emitOp(Operation* op) {
  llvm::TypeSwitch<Operation*>(op)
      // Yields are emitted by their parents; ranges, splats and broadcasts are read through at
      // each use (E).
      .Case<func::ReturnOp, scf::YieldOp, sj::YieldOp, sj::RangeOp, sj::SplatOp, sj::BroadcastOp>([](Operation*) {})
      .Case<arith::ConstantOp, sj::ProgramIdOp, sj::ExpandDimsOp, sj::LoadOp, sj::StoreOp, sj::SharedBufferOp,
            sj::ArriveLastOp, sj::TicketOp, sj::WaitFlagOp, sj::SetFlagOp, sj::ReportErrorOp, scf::IfOp, scf::ForOp,
            sj::ReturnIfOp, sj::BarrierOp, sj::ReduceOp, sj::ShiftOp, sj::ScanOp, sj::DotOp, sj::DotSharedOp,
            sj::CopyAsyncOp, sj::CopyTileAsyncOp, sj::StoreTileOp, sj::CommitGroupOp, sj::WaitGroupOp>(
          [&](auto x) { emit(x); })
      .Default([&](Operation* o) { emitElementwise(o); });
}

}  // namespace emit

EmittedKernel emitCuda(func::FuncOp kernel) { return emit::Emitter(kernel).run(); }

}  // namespace ssmjit
