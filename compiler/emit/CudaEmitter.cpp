#include "compiler/emit/CudaEmitter.h"

#include <cctype>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include "compiler/dialect/SJDialect.h"
#include "compiler/passes/Layout.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "ssmjit/error.h"

namespace ssmjit {
using namespace mlir;
using layout::Kind;

namespace {

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
bool isNarrowFloat(Type t) { return t.isF16() || t.isBF16(); }

std::string storageCType(Type t) {
  if (t.isF32()) return "float";
  if (t.isF16()) return "ssm_f16";
  if (t.isBF16()) return "ssm_bf16";
  if (t.isInteger(32)) return "int";
  if (t.isInteger(64)) return "long long";
  fail(nullptr, "no storage type");
}
std::string floatLit(double v) {
  if (std::isinf(v)) return v > 0 ? "__int_as_float(0x7f800000)" : "__int_as_float(0xff800000)";
  std::ostringstream s;
  s.precision(9);
  s << std::scientific << (float)v << "f";
  return s.str();
}
std::vector<int64_t> shapeOf(Value v) {
  if (auto t = dyn_cast<RankedTensorType>(v.getType())) return {t.getShape().begin(), t.getShape().end()};
  return {};
}

class Emitter {
 public:
  explicit Emitter(func::FuncOp f) : f_(f) {
    P_ = layout::parentOf(f);
    warps_ = f->getAttrOfType<IntegerAttr>("sj.num_warps").getInt();
  }

  EmittedKernel run() {
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
    os_ << "extern \"C\" __global__ void __launch_bounds__(" << bounds << ") " << k.entry
        << "(\n    " << sig.str() << ") {\n";
    ind_ = 1;
    line("const int ssm_lane = threadIdx.x & 31, ssm_warp = threadIdx.x >> 5;");
    line("const int ssm_t0 = (ssm_warp / " + std::to_string(P_.wpc[1]) + ") * " + std::to_string(P_.tpw[0]) +
         " + ssm_lane / " + std::to_string(P_.tpw[1]) + ";");
    line("const int ssm_t1 = (ssm_warp % " + std::to_string(P_.wpc[1]) + ") * " + std::to_string(P_.tpw[1]) +
         " + ssm_lane % " + std::to_string(P_.tpw[1]) + ";");
    line("(void)ssm_t0; (void)ssm_t1;");
    emitBlock(f_.getBody().front());
    os_ << "}\n";
    k.source = os_.str();
    return k;
  }

 private:
  func::FuncOp f_;
  layout::Parent P_;
  int64_t warps_ = 4;
  std::ostringstream os_;
  int ind_ = 0;
  int counter_ = 0;
  std::map<void*, std::string> names_;
  std::map<void*, Kind> kinds_;  // layout of array-valued tiles
  // 16-bit float loads kept as their storage bits (name and C type of the raw array or scalar);
  // each use converts. Why: a conversion right after the load makes the thread wait for the load
  // there, and a load issued early (the next token's inputs, prefetched through a rolled loop) then
  // stalls where it is issued instead of where its value is first used.
  // An array loaded V >= 2 elements at a time keeps, for each element, the 32-bit word that holds it
  // (element r in half r % 2): its conversion is then one shift or mask, where a 16-bit element
  // would first be extracted from the word (an extra instruction and a move).
  struct Raw {
    std::string name, storage;  // storage: the C type of the variable's elements
    std::string elem;           // the 16-bit float type (ssm_bf16 or ssm_f16)
    bool words = false;
  };
  // Values of one form may be carried through a loop in one variable.
  static bool sameForm(const Raw& a, const Raw& b) {
    return a.storage == b.storage && a.elem == b.elem && a.words == b.words;
  }
  std::map<void*, Raw> raw_;
  const Raw* rawOf(Value v) const {
    auto it = raw_.find(v.getAsOpaquePointer());
    return it == raw_.end() ? nullptr : &it->second;
  }

  void line(const std::string& s) { os_ << std::string(2 * ind_, ' ') << s << "\n"; }
  std::string fresh() { return "v" + std::to_string(counter_++); }
  static std::string I(int64_t v) { return std::to_string(v); }

  // ---- layout arithmetic -------------------------------------------------------------------
  int64_t n(int d, int64_t S) const { return layout::perThread(P_, d, S); }
  // Coordinate along parent dim d of local index j (an expression) for extent S.
  // `thread`: another thread's index along d than this one's.
  std::string coord(int d, int64_t S, const std::string& j, const std::string& thread = "") const {
    const int64_t T = P_.threads(d), spt = P_.spt[d];
    const std::string t = !thread.empty() ? thread : d == 0 ? "ssm_t0" : "ssm_t1";
    if (S >= T * spt)
      return "((" + j + ") / " + I(spt) + " * " + I(T * spt) + " + " + t + " * " + I(spt) + " + (" + j + ") % " + I(spt) + ")";
    if (S >= T) return "(" + t + " * " + I(S / T) + " + (" + j + "))";
    return "(" + t + " % " + I(S) + ")";
  }
  // Is this thread the canonical owner of its elements (no replica with a smaller thread id)?
  std::string owner(Kind k, const std::vector<int64_t>& shape) const {
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
  int64_t regs(Kind k, const std::vector<int64_t>& s) const {
    if (k == Kind::Blocked) return n(0, s[0]) * n(1, s[1]);
    if (k == Kind::Slice0 || k == Kind::Slice1) return n(layout::sliceDim(k), s[0]);
    return 1;
  }
  // Coordinates (per tile axis) of register r.
  std::vector<std::string> coords(Kind k, const std::vector<int64_t>& s, const std::string& r) const {
    if (k == Kind::Blocked) {
      int64_t n1 = n(1, s[1]);
      return {coord(0, s[0], "(" + r + ") / " + I(n1)), coord(1, s[1], "(" + r + ") % " + I(n1))};
    }
    return {coord(layout::sliceDim(k), s[0], r)};
  }

  Kind layoutOf(Value v) {
    auto it = kinds_.find(v.getAsOpaquePointer());
    if (it != kinds_.end()) return it->second;
    int r = (int)shapeOf(v).size();
    if (r == 0) return Kind::Scalar;
    if (r == 2) return Kind::Blocked;
    Attribute a = layout::layoutAttr(v);  // a rematerialised tile (#sj.any) is made where it is used
    return a && !isa<sj::AnyAttr>(a) ? layout::kindOf(a) : Kind::Slice0;
  }
  // The layout an op works in: that of its first tile operand/result with a definite layout.
  Kind opLayout(Operation* op) {
    for (Value v : op->getResults())
      if (!shapeOf(v).empty() && !isRemat(v)) return layoutOf(v);
    for (Value v : op->getOperands())
      if (!shapeOf(v).empty() && !isRemat(v)) return layoutOf(v);
    for (Value v : op->getOperands())
      if (!shapeOf(v).empty()) return shapeOf(v).size() == 2 ? Kind::Blocked : Kind::Slice0;
    return Kind::Scalar;
  }
  static bool isRemat(Value v) {
    Operation* d = v.getDefiningOp();
    return d && (isa<sj::RangeOp, sj::SplatOp>(d) || isa<arith::ConstantOp>(d));
  }

  // Element r of value v, seen in layout k (scalars ignore r).
  std::string E(Value v, Kind k, const std::string& r) {
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
    if (have != k) fail(d, std::string("a tile in layout ") + layout::kindName(have) + " is used as " + layout::kindName(k));
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
  std::string name(Value v) {
    auto it = names_.find(v.getAsOpaquePointer());
    if (it == names_.end()) fail(v.getDefiningOp(), "use of a value with no name");
    return it->second;
  }
  // The value of a scalar constant or of every element of a splat tile constant; null otherwise.
  static Attribute splatValue(arith::ConstantOp c) {
    Attribute a = c.getValue();
    if (auto d = dyn_cast<DenseElementsAttr>(a)) return d.isSplat() ? d.getSplatValue<Attribute>() : Attribute();
    return a;
  }
  std::string constLiteral(arith::ConstantOp c) {
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

  // Declares the result of op (array or scalar) and returns its name.
  std::string declare(Value v, Kind k, bool isConst = false) {
    std::string nm = fresh();
    names_[v.getAsOpaquePointer()] = nm;
    auto s = shapeOf(v);
    if (s.empty()) {
      if (!isConst) line(cType(v.getType()) + " " + nm + ";");
      return nm;
    }
    kinds_[v.getAsOpaquePointer()] = k;
    line(cType(v.getType()) + " " + nm + "[" + I(regs(k, s)) + "];");
    return nm;
  }
  void forRegs(int64_t R, const std::function<void()>& body, int64_t step = 1) {
    if (R <= step) {
      line("{");
      ++ind_;
      line("const int r = 0;");
      body();
      --ind_;
      line("}");
      return;
    }
    line("#pragma unroll");
    line("for (int r = 0; r < " + I(R) + "; r += " + I(step) + ") {");
    ++ind_;
    body();
    --ind_;
    line("}");
  }

  // ---- ops ----------------------------------------------------------------------------------
  // A block's cross-warp reductions are deferred: each writes its warps' partials to its own
  // shared words where it stands, and the block passes one __syncthreads before the first use of
  // any of them, reading each result just before its first use. Why: a barrier per reduction
  // serialised the scan backward's 2N per-token dB/dC reductions (64 barriers a tile at N 16),
  // where now the shuffles of all of them overlap. The words of a reduction are written again
  // only when its block runs again, so a block that read any ends with a barrier (not the
  // kernel's body, which runs once).
  struct Pending {
    Operation* op;
    bool synced;                      // a barrier followed its shared-memory writes
    std::function<void()> read;       // declares the result and reads it from shared memory
  };
  std::vector<std::vector<Pending>> pending_;  // per block being emitted, innermost last

  void emitBlock(Block& b) {
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
  bool readPendingUsedBy(Operation* op) {
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

  std::string exprOf(Operation* op, const std::vector<std::string>& a) {
    if (isa<arith::AddIOp, arith::AddFOp>(op)) return "(" + a[0] + " + " + a[1] + ")";
    if (isa<arith::SubIOp, arith::SubFOp>(op)) return "(" + a[0] + " - " + a[1] + ")";
    if (isa<arith::MulIOp, arith::MulFOp>(op)) return "(" + a[0] + " * " + a[1] + ")";
    if (auto d = dyn_cast<arith::DivFOp>(op); d && arith::bitEnumContainsAll(d.getFastmath(), arith::FastMathFlags::afn))
      return "__fdividef(" + a[0] + ", " + a[1] + ")";
    if (isa<arith::DivSIOp, arith::DivFOp>(op)) return "(" + a[0] + " / " + a[1] + ")";
    if (isa<arith::RemSIOp>(op)) return "(" + a[0] + " % " + a[1] + ")";
    if (isa<arith::AndIOp>(op)) return "(" + a[0] + " & " + a[1] + ")";
    if (isa<arith::OrIOp>(op)) return "(" + a[0] + " | " + a[1] + ")";
    if (isa<arith::XOrIOp>(op)) return "(" + a[0] + " ^ " + a[1] + ")";
    if (isa<arith::MaxNumFOp, arith::MaximumFOp>(op)) return "fmaxf(" + a[0] + ", " + a[1] + ")";
    if (isa<arith::MinNumFOp, arith::MinimumFOp>(op)) return "fminf(" + a[0] + ", " + a[1] + ")";
    if (isa<arith::MaxSIOp>(op)) return "max(" + a[0] + ", " + a[1] + ")";
    if (isa<arith::MinSIOp>(op)) return "min(" + a[0] + ", " + a[1] + ")";
    if (isa<arith::NegFOp>(op)) return "(-" + a[0] + ")";
    if (isa<arith::SelectOp>(op)) return "(" + a[0] + " ? " + a[1] + " : " + a[2] + ")";
    if (isa<math::FmaOp>(op)) return "__fmaf_rn(" + a[0] + ", " + a[1] + ", " + a[2] + ")";
    if (isa<math::ExpOp>(op)) return "expf(" + a[0] + ")";
    if (isa<math::Exp2Op>(op)) return "ssm_exp2(" + a[0] + ")";
    if (isa<math::LogOp>(op)) return "logf(" + a[0] + ")";
    if (isa<math::Log1pOp>(op)) return "log1pf(" + a[0] + ")";
    if (auto c = dyn_cast<arith::CmpIOp>(op)) {
      static const std::map<arith::CmpIPredicate, const char*> m = {
          {arith::CmpIPredicate::slt, "<"}, {arith::CmpIPredicate::sle, "<="}, {arith::CmpIPredicate::sgt, ">"},
          {arith::CmpIPredicate::sge, ">="}, {arith::CmpIPredicate::eq, "=="}, {arith::CmpIPredicate::ne, "!="}};
      auto it = m.find(c.getPredicate());
      if (it == m.end()) fail(op, "unsupported integer comparison");
      return "(" + a[0] + " " + it->second + " " + a[1] + ")";
    }
    if (auto c = dyn_cast<arith::CmpFOp>(op)) {
      static const std::map<arith::CmpFPredicate, const char*> m = {
          {arith::CmpFPredicate::OLT, "<"}, {arith::CmpFPredicate::OLE, "<="}, {arith::CmpFPredicate::OGT, ">"},
          {arith::CmpFPredicate::OGE, ">="}, {arith::CmpFPredicate::OEQ, "=="}, {arith::CmpFPredicate::UNE, "!="}};
      auto it = m.find(c.getPredicate());
      if (it == m.end()) fail(op, "unsupported float comparison");
      return "(" + a[0] + " " + it->second + " " + a[1] + ")";
    }
    if (isa<arith::ExtSIOp, arith::TruncIOp, arith::SIToFPOp>(op))
      return "((" + cType(op->getResult(0).getType()) + ")" + a[0] + ")";
    if (isa<arith::ExtUIOp, arith::UIToFPOp>(op))  // only from i1 here
      return "((" + cType(op->getResult(0).getType()) + ")(" + a[0] + " ? 1 : 0))";
    return "";
  }

  void emitOp(Operation* op) {
    if (isa<func::ReturnOp, scf::YieldOp, sj::YieldOp>(op)) return;  // yields: their parents
    if (auto c = dyn_cast<arith::ConstantOp>(op)) {
      if (shapeOf(c.getResult()).empty()) {
        std::string nm = fresh();
        names_[c.getResult().getAsOpaquePointer()] = nm;
        line("const " + cType(c.getType()) + " " + nm + " = " + constLiteral(c) + ";");
      }
      return;  // tile constants are rematerialised at each use
    }
    if (isa<sj::RangeOp, sj::SplatOp>(op)) return;  // rematerialised at each use
    if (auto p = dyn_cast<sj::ProgramIdOp>(op)) {
      static const char* axes[] = {"blockIdx.x", "blockIdx.y", "blockIdx.z"};
      std::string nm = fresh();
      names_[p.getResult().getAsOpaquePointer()] = nm;
      line("const int " + nm + " = (int)" + std::string(axes[p.getAxis()]) + ";");
      return;
    }
    if (isa<sj::ExpandDimsOp, sj::BroadcastOp>(op)) {  // read through at each use (E)
      if (isa<sj::ExpandDimsOp>(op) && shapeOf(op->getResult(0)).size() != 2) fail(op, "expand_dims must give a 2-D tile");
      return;
    }
    if (auto l = dyn_cast<sj::LoadOp>(op)) return emitLoad(l);
    if (auto s = dyn_cast<sj::StoreOp>(op)) return emitStore(s);
    if (auto r = dyn_cast<sj::ReduceOp>(op)) return emitReduce(r);
    if (auto d = dyn_cast<sj::DotOp>(op)) return emitDot(d);
    if (auto sh = dyn_cast<sj::ShiftOp>(op)) return emitShift(sh);
    if (auto sc = dyn_cast<sj::ScanOp>(op)) return emitScan(sc);
    if (auto r = dyn_cast<sj::ReturnIfOp>(op)) return line("if (" + name(r.getCond()) + ") return;");
    if (auto a = dyn_cast<sj::ArriveLastOp>(op)) {
      std::string nm = fresh();
      names_[a.getResult().getAsOpaquePointer()] = nm;
      return line("const bool " + nm + " = ssm_arrive_last(" + name(a.getCounter()) + " + " + name(a.getOffset()) +
                  ", " + name(a.getCount()) + ");");
    }
    if (isa<sj::BarrierOp>(op)) return line("__syncthreads();");
    if (auto sb = dyn_cast<sj::SharedBufferOp>(op)) {
      std::string nm = fresh();
      names_[sb.getResult().getAsOpaquePointer()] = nm;
      return line("__shared__ __align__(16) float " + nm + "[" + I(sb.getSize()) + "];");
    }
    if (auto r = dyn_cast<sj::ReportErrorOp>(op))
      return line("ssm_report_error(" + name(r.getErr()) + ", " + name(r.getCode()) + ", " + name(r.getA()) +
                  ", " + name(r.getB()) + ", " + name(r.getC()) + ");");
    if (auto i = dyn_cast<scf::IfOp>(op)) return emitIf(i);
    if (auto fo = dyn_cast<scf::ForOp>(op)) return emitFor(fo);
    // Elementwise.
    if (op->getNumResults() == 1 && !exprOf(op, std::vector<std::string>(op->getNumOperands(), "x")).empty()) {
      Value res = op->getResult(0);
      if (shapeOf(res).empty()) {
        std::vector<std::string> a;
        for (Value v : op->getOperands()) a.push_back(name(v));
        std::string nm = fresh();
        names_[res.getAsOpaquePointer()] = nm;
        line("const " + cType(res.getType()) + " " + nm + " = " + exprOf(op, a) + ";");
        return;
      }
      Kind k = opLayout(op);
      std::string nm = declare(res, k);
      forRegs(regs(k, shapeOf(res)), [&] {
        std::vector<std::string> a;
        for (Value v : op->getOperands()) a.push_back(E(v, k, "r"));
        line(nm + "[r] = " + exprOf(op, a) + ";");
      });
      return;
    }
    fail(op, "operation not supported by the CUDA emitter");
  }

  // The source register of a broadcast's register r (in the result's layout, which the source
  // shares; a 1-D broadcast has a one-element source).
  std::string broadcastSource(sj::BroadcastOp b, const std::string& r) const {
    auto ss = shapeOf(b.getSrc()), rs = shapeOf(b.getResult());
    if (rs.size() != 2) return "0";
    const int64_t n1 = n(1, rs[1]), sn1 = n(1, ss[1]);
    const std::string j0 = ss[0] == 1 ? "0" : "((" + r + ") / " + I(n1) + ")";
    const std::string j1 = ss[1] == 1 ? "0" : "((" + r + ") % " + I(n1) + ")";
    return j0 + " * " + I(sn1) + " + " + j1;
  }

  std::string ptrName(Value p) { return name(p); }

  void emitLoad(sj::LoadOp l) {
    Value res = l.getResult();
    Type storage = cast<sj::PtrType>(l.getPtr().getType()).getElementType();
    bool isFloat = isa<FloatType>(storage);
    std::string other = l.getOther() ? "" : (isFloat ? "0.0f" : "0");
    if (rawLoadStorage(res)) return emitRawLoad(l);
    if (shapeOf(res).empty()) {
      std::string nm = fresh();
      names_[res.getAsOpaquePointer()] = nm;
      std::string load = "ssm_load(" + ptrName(l.getPtr()) + " + " + name(l.getOffsets()) + ")";
      if (!isFloat) load = "(" + cType(res.getType()) + ")" + load;
      if (l.getMask())
        load = name(l.getMask()) + " ? " + load + " : " + (l.getOther() ? name(l.getOther()) : other);
      line("const " + cType(res.getType()) + " " + nm + " = " + load + ";");
      return;
    }
    Kind k = layoutOf(res);
    int64_t vec = l->getAttrOfType<IntegerAttr>("sj.vec") ? l->getAttrOfType<IntegerAttr>("sj.vec").getInt() : 1;
    std::string nm = declare(res, k);
    std::string fill = [&] {
      return l.getOther() ? E(l.getOther(), k, "r + ssm_k") : other;
    }();
    forRegs(regs(k, shapeOf(res)), [&] {
      std::string addr = ptrName(l.getPtr()) + " + " + E(l.getOffsets(), k, "r");
      std::string ld = "ssm_ld<" + I(vec) + ">(&" + nm + "[r], " + addr + ");";
      if (l.getMask()) {
        line("if (" + E(l.getMask(), k, "r") + ") " + ld);
        line("else {");
        line("  #pragma unroll");
        line("  for (int ssm_k = 0; ssm_k < " + I(vec) + "; ++ssm_k) " + nm + "[r + ssm_k] = " + fill + ";");
        line("}");
      } else {
        line(ld);
      }
    }, vec);
  }

  static bool isZeroConstant(Value v) {
    auto c = v.getDefiningOp<arith::ConstantOp>();
    if (!c) return false;
    auto f = dyn_cast_or_null<FloatAttr>(splatValue(c));
    return f && f.getValueAsDouble() == 0.0 && !f.getValue().isNegative();
  }

  // The storage type of a value emitted as raw 16-bit bits (a 16-bit float load whose masked-off
  // elements are 0.0), else a null type.
  static Type rawLoadStorage(Value v) {
    auto l = v.getDefiningOp<sj::LoadOp>();
    if (!l) return {};
    Type storage = cast<sj::PtrType>(l.getPtr().getType()).getElementType();
    if (!isNarrowFloat(storage) || (l.getOther() && !isZeroConstant(l.getOther()))) return {};
    return storage;
  }

  static int64_t vecOf(sj::LoadOp l) {
    auto a = l->getAttrOfType<IntegerAttr>("sj.vec");
    return a ? a.getInt() : 1;
  }
  // How a raw 16-bit load is kept (rawLoadStorage(v) is set): words for a tile loaded in vectors.
  static Raw rawForm(Value v, const std::string& name) {
    const std::string elem = storageCType(rawLoadStorage(v));
    const bool words = !shapeOf(v).empty() && vecOf(v.getDefiningOp<sj::LoadOp>()) >= 2;
    return Raw{name, words ? "unsigned" : elem, elem, words};
  }

  // A 16-bit float load as storage bits; masked-off elements are +0.0 (all bits zero).
  void emitRawLoad(sj::LoadOp l) {
    Value res = l.getResult();
    const std::string nm = fresh(), ptr = ptrName(l.getPtr());
    const Raw raw = rawForm(res, nm);
    const std::string& T = raw.storage;
    raw_[res.getAsOpaquePointer()] = raw;
    if (shapeOf(res).empty()) {
      const std::string at = ptr + "[" + name(l.getOffsets()) + "]";
      line("const " + T + " " + nm + " = " + (l.getMask() ? name(l.getMask()) + " ? " + at + " : " + T + "{0}" : at) + ";");
      names_[res.getAsOpaquePointer()] = "ssm_to_float(" + nm + ")";
      return;
    }
    Kind k = layoutOf(res);
    const int64_t vec = vecOf(l), n = regs(k, shapeOf(res));
    line(T + " " + nm + "[" + I(n) + "] = {};");
    names_[res.getAsOpaquePointer()] = nm;
    kinds_[res.getAsOpaquePointer()] = k;
    const std::string fn = raw.words ? "ssm_ld_words<" : "ssm_ld_raw<";
    forRegs(n, [&] {
      std::string ld = fn + I(vec) + ">(&" + nm + "[r], " + ptr + " + " + E(l.getOffsets(), k, "r") + ");";
      line(l.getMask() ? "if (" + E(l.getMask(), k, "r") + ") " + ld : ld);
    }, vec);
  }

  void emitStore(sj::StoreOp s) {
    Value v = s.getValue();
    if (shapeOf(v).empty()) {
      std::string st = "ssm_store(" + ptrName(s.getPtr()) + " + " + name(s.getOffsets()) + ", " + name(v) + ");";
      // A scalar store is uniform: one thread writes it.
      std::string cond = "threadIdx.x == 0";
      if (s.getMask()) cond += " && " + name(s.getMask());
      line("if (" + cond + ") " + st);
      return;
    }
    Kind k = opLayout(s);
    auto shape = shapeOf(v);
    int64_t vec = s->getAttrOfType<IntegerAttr>("sj.vec") ? s->getAttrOfType<IntegerAttr>("sj.vec").getInt() : 1;
    std::string own = owner(k, shape);
    if (!own.empty()) {
      line("if (" + own + ") {");
      ++ind_;
    }
    // Gather the value registers of one vector, then store them together.
    forRegs(regs(k, shape), [&] {
      line("float ssm_v[" + I(vec) + "];");
      line("#pragma unroll");
      line("for (int ssm_k = 0; ssm_k < " + I(vec) + "; ++ssm_k) ssm_v[ssm_k] = (float)" + E(v, k, "r + ssm_k") + ";");
      std::string st = "ssm_st<" + I(vec) + ">(" + ptrName(s.getPtr()) + " + " + E(s.getOffsets(), k, "r") + ", ssm_v);";
      if (s.getMask()) line("if (" + E(s.getMask(), k, "r") + ") " + st);
      else line(st);
    }, vec);
    if (!own.empty()) {
      --ind_;
      line("}");
    }
  }

  void emitReduce(sj::ReduceOp r) {
    auto ss = shapeOf(r.getSrc());
    int axis = r.getAxis();
    std::string kind = r.getKind().str();
    std::string ty = cType(r.getResult().getType());
    auto combine = [&](const std::string& a, const std::string& b) {
      if (kind == "sum") return a + " + " + b;
      if (ty == "float") return std::string(kind == "max" ? "fmaxf(" : "fminf(") + a + ", " + b + ")";
      return std::string(kind == "max" ? "max(" : "min(") + a + ", " + b + ")";
    };
    // The parent dim reduced over, the source's layout and registers per kept position.
    Kind srcK = ss.size() == 2 ? Kind::Blocked : layoutOf(r.getSrc());
    int pd;              // parent dim reduced
    int64_t Sa;          // extent along it
    int64_t nKept, nRed; // registers along the kept axis and along the reduced axis
    std::function<std::string(const std::string&, const std::string&)> srcIdx;
    Kind outK;
    if (ss.size() == 2) {
      pd = axis;
      Sa = ss[axis];
      int64_t n0 = n(0, ss[0]), n1 = n(1, ss[1]);
      nKept = axis == 0 ? n1 : n0;
      nRed = axis == 0 ? n0 : n1;
      srcIdx = [=](const std::string& kept, const std::string& red) {
        return axis == 0 ? "(" + red + ") * " + I(n1) + " + " + kept : "(" + kept + ") * " + I(n1) + " + " + red;
      };
      outK = axis == 0 ? Kind::Slice0 : Kind::Slice1;
    } else {
      pd = layout::sliceDim(srcK);
      Sa = ss[0];
      nKept = 1;
      nRed = n(pd, ss[0]);
      srcIdx = [](const std::string&, const std::string& red) { return red; };
      outK = Kind::Scalar;
    }
    if (Sa < P_.threads(pd)) fail(r, "reduction over fewer elements than threads along the axis");
    if (srcK != layoutOf(r.getSrc()) || isRemat(r.getSrc())) fail(r, "reduction of a rematerialised tile");
    std::string nm = fresh();
    bool scalar = outK == Kind::Scalar;
    if (!scalar) kinds_[r.getResult().getAsOpaquePointer()] = outK;
    const std::string decl = ty + " " + nm + (scalar ? "" : "[" + I(nKept) + "]") + ";";
    // Within the warp: the thread's registers along pd, then the lanes along pd (lane = l0 * tpw1 + l1).
    auto warpSums = [&](const std::string& out) {
      line("#pragma unroll");
      line("for (int j = 0; j < " + I(nKept) + "; ++j) {");
      ++ind_;
      // Elements through E: a loaded 16-bit tile is still its storage bits here.
      auto el = [&](Value v, const std::string& i) { return E(v, srcK, srcIdx("j", i)); };
      if (Value wt = r.getWeight()) {  // sum of src * weight: one fma an element
        // One chain. Four (element i on chain i % 4, for 16 or more elements) were measured on the
        // H100 and dropped (stop 35): SSU tokens fp32 L 8 9% slower at batch 16, bf16 L 4 8% slower
        // at batch 64, the decode verify up to 6% slower; L 16 within 2% (more registers, 3
        // programs an SM where 4 fitted).
        line(ty + " acc = " + el(r.getSrc(), "0") + " * " + el(wt, "0") + ";");
        line("#pragma unroll");
        line("for (int i = 1; i < " + I(nRed) + "; ++i) acc = __fmaf_rn(" + el(r.getSrc(), "i") + ", " + el(wt, "i") +
             ", acc);");
      } else {
        line(ty + " acc = " + el(r.getSrc(), "0") + ";");
        line("#pragma unroll");
        line("for (int i = 1; i < " + I(nRed) + "; ++i) acc = " + combine("acc", el(r.getSrc(), "i")) + ";");
      }
      int64_t laneStride = pd == 1 ? 1 : P_.tpw[1];
      for (int64_t o = 1; o < P_.tpw[pd]; o *= 2)
        line("acc = " + combine("acc", "__shfl_xor_sync(0xffffffffu, acc, " + I(o * laneStride) + ")") + ";");
      line(out + " = acc;");
      --ind_;
      line("}");
    };
    if (P_.wpc[pd] == 1) {
      names_[r.getResult().getAsOpaquePointer()] = nm;
      line(decl);
      warpSums(scalar ? nm : nm + "[j]");
      return;
    }
    // Across the warps along pd: each warp's sums go to shared memory here; the block reads them
    // back before the result's first use (emitBlock), so a barrier serves many reductions.
    const int64_t W = P_.wpc[pd];
    const int64_t keptExtent = scalar ? 1 : ss[1 - axis];
    const std::string sm = "ssm_red" + I(counter_++);
    const std::string warpPos = pd == 0 ? "(ssm_warp / " + I(P_.wpc[1]) + ")" : "(ssm_warp % " + I(P_.wpc[1]) + ")";
    const std::string lanePos = pd == 0 ? "(ssm_lane / " + I(P_.tpw[1]) + ")" : "(ssm_lane % " + I(P_.tpw[1]) + ")";
    const std::string keptCoord = scalar ? "0" : coord(1 - pd, keptExtent, "j");
    std::string own = "";
    if (!scalar && keptExtent < P_.threads(1 - pd))
      own = std::string(" && ") + (pd == 0 ? "ssm_t1" : "ssm_t0") + " < " + I(keptExtent);
    line("__shared__ " + ty + " " + sm + "[" + I(W * keptExtent) + "];");
    line("{");
    ++ind_;
    line(ty + " ssm_w[" + I(nKept) + "];");
    warpSums("ssm_w[j]");
    line("#pragma unroll");
    line("for (int j = 0; j < " + I(nKept) + "; ++j)");
    line("  if (" + lanePos + " == 0" + own + ") " + sm + "[" + warpPos + " * " + I(keptExtent) + " + " + keptCoord + "] = ssm_w[j];");
    --ind_;
    line("}");
    const std::string out = scalar ? nm : nm + "[j]";
    const std::string fold = combine("acc", sm + "[w * " + I(keptExtent) + " + " + keptCoord + "]");
    void* key = r.getResult().getAsOpaquePointer();
    pending_.back().push_back({r.getOperation(), false, [=, this] {
      names_[key] = nm;
      line(decl);
      line("#pragma unroll");
      line("for (int j = 0; j < " + I(nKept) + "; ++j) {");
      ++ind_;
      line(ty + " acc = " + sm + "[" + keptCoord + "];");
      line("#pragma unroll");
      line("for (int w = 1; w < " + I(W) + "; ++w) acc = " + fold + ";");
      line(out + " = acc;");
      --ind_;
      line("}");
    }});
  }

  // sj.dot on mma.m16n8k16 (bf16 in, f32 accumulate). In an mma parent layout (assign-layouts)
  // lane 4 g + q holds rows over g and columns over q. A thread's rows 2i and 2i + 1 play an
  // mma's rows g and g + 8, and its registers 4s..4s+3 along a row the A fragment's k slots
  // 2q + {0, 1} and 8 + 2q + {0, 1} of k-step s; the accumulators' column slots 2q + {0, 1} of
  // n-tile m are its registers 2m + {0, 1}. Which tile columns those are is the layout's affair:
  // b is gathered to match, k at the thread's own columns of those registers and n at those of
  // register 2m + (g & 1) of lane q = g / 2. So a and the result stay in the parent layout and
  // only b moves. A thread with an odd row count gives its last mma's second row zeros.
  void emitDot(sj::DotOp d) {
    if (!(P_.spt[1] % 2 == 0 && P_.tpw[0] == 8 && P_.tpw[1] == 4 && P_.wpc[1] == 1))
      fail(d, "dot outside the mma parent layout (" + P_.str() + ")");
    auto as = shapeOf(d.getA()), cs = shapeOf(d.getAcc());
    const int64_t K = as[1], N = cs[1];
    const int64_t nr = n(0, as[0]), nk = n(1, K), nn = n(1, N);
    const int pa = (int)d.getAPieces(), pb = (int)d.getBPieces(), pmax = std::max(pa, pb);
    const std::string nm = declare(d.getResult(), Kind::Blocked);
    forRegs(nr * nn, [&] { line(nm + "[r] = " + E(d.getAcc(), Kind::Blocked, "r") + ";"); });
    // b[k][n]: k at this thread's columns of a's registers 4 ks + e, n at lane g / 2's of the
    // result's register 2 m + (g & 1).
    auto bLoad = [&](int e) {
      return "ssm_load(" + name(d.getPtr()) + " + " + name(d.getOffset()) + " + " + coord(1, K, "4 * ks + " + I(e)) +
             " * " + name(d.getStrideK()) + " + ssm_n * " + name(d.getStrideN()) + ")";
    };
    const bool halfStep = K == 8;  // one k-step of 8: the fragments' upper halves are zeros
    line("{");
    ++ind_;
    line("const int ssm_g = ssm_lane >> 2;");
    line("#pragma unroll");
    line("for (int ks = 0; ks < " + I(halfStep ? 1 : K / 16) + "; ++ks) {");
    ++ind_;
    const int64_t pairs = (nr + 1) / 2;
    // a loaded from bf16 in vectors keeps each pair's 32-bit word: one piece is that word.
    const Raw* rawA = rawOf(d.getA());
    const bool rawPairs = pa == 1 && rawA && rawA->words && rawA->elem == "ssm_bf16";
    // A fragments: [pair][register][piece].
    line("unsigned ssm_a[" + I(pairs) + "][4][" + I(pa) + "];");
    for (int64_t i = 0; i < pairs; ++i)
      for (int e = 0; e < 4; ++e) {
        const int64_t row = 2 * i + (e & 1);
        const std::string at = "ssm_a[" + I(i) + "][" + I(e) + "]";
        if (row >= nr || (halfStep && e >= 2)) {
          line("ssm_bf16_pieces<" + I(pa) + ">(0.0f, 0.0f, " + at + ");");
          continue;
        }
        const std::string r0 = I(row * nk) + " + 4 * ks + " + I(2 * (e >> 1));
        if (rawPairs) {  // the loaded bf16 pair is the fragment register
          line(at + "[0] = " + rawA->name + "[" + r0 + "];");
          continue;
        }
        line("ssm_bf16_pieces<" + I(pa) + ">(" + E(d.getA(), Kind::Blocked, r0) + ", " +
             E(d.getA(), Kind::Blocked, r0 + " + 1") + ", " + at + ");");
      }
    line("#pragma unroll");
    line("for (int m = 0; m < " + I(N / 8) + "; ++m) {");
    ++ind_;
    line("const int ssm_n = " + coord(1, N, "2 * m + (ssm_g & 1)", "(ssm_g >> 1)") + ";");
    line("unsigned ssm_b[2][" + I(pb) + "];");
    line("ssm_bf16_pieces<" + I(pb) + ">(" + bLoad(0) + ", " + bLoad(1) + ", ssm_b[0]);");
    if (halfStep)
      line("ssm_bf16_pieces<" + I(pb) + ">(0.0f, 0.0f, ssm_b[1]);");
    else
      line("ssm_bf16_pieces<" + I(pb) + ">(" + bLoad(2) + ", " + bLoad(3) + ", ssm_b[1]);");
    for (int64_t i = 0; i < pairs; ++i) {
      const bool second = 2 * i + 1 < nr;
      const std::string c0 = nm + "[" + I(2 * i * nn) + " + 2 * m]", c1 = nm + "[" + I(2 * i * nn) + " + 2 * m + 1]";
      if (!second) line("float ssm_z0 = 0.0f, ssm_z1 = 0.0f;");
      const std::string c2 = second ? nm + "[" + I((2 * i + 1) * nn) + " + 2 * m]" : "ssm_z0";
      const std::string c3 = second ? nm + "[" + I((2 * i + 1) * nn) + " + 2 * m + 1]" : "ssm_z1";
      // Terms by weight, smallest first (pa + pb - 2 down to 0), those of weight >= 2^-24 only.
      for (int w = pmax - 1; w >= 0; --w)
        for (int x = 0; x < pa; ++x) {
          const int y = w - x;
          if (y < 0 || y >= pb) continue;
          const std::string a = "ssm_a[" + I(i) + "]", xs = "[" + I(x) + "]";
          line("ssm_mma_bf16(" + c0 + ", " + c1 + ", " + c2 + ", " + c3 + ", " + a + "[0]" + xs + ", " + a + "[1]" +
               xs + ", " + a + "[2]" + xs + ", " + a + "[3]" + xs + ", ssm_b[0][" + I(y) + "], ssm_b[1][" + I(y) + "]);");
        }
    }
    --ind_;
    line("}");
    --ind_;
    line("}");
    --ind_;
    line("}");
  }

  // sj.shift. assign-layouts keeps the axis inside a warp: T lanes along it, each holding a
  // contiguous run of n registers. Place j of a run takes place j - s, which lies dl runs away
  // (a lane dl places along the axis, register jj of its run): a register move when dl = 0, else
  // one shuffle. A receiver whose source lane falls off the tile's edge takes the fill tile
  // instead, supplied by the lane at the wrapped position (whose own cur value nobody needs).
  // A shift whose period is the run moves each run on its own: the fill's place is in the
  // same thread, a register move too.
  void emitShift(sj::ShiftOp sh) {
    auto shape = shapeOf(sh.getResult());
    const int a = sh.getAxis();
    const int64_t s = static_cast<int32_t>(sh.getAmount());  // an I32Attr reads back unsigned
    const int64_t T = P_.tpw[a], run = P_.spt[a];
    if (P_.wpc[a] != 1 || T * run != shape[a])
      fail(sh, "shift along an axis the layout does not keep in one warp (" + P_.str() + ")");
    const int64_t period = sh.getPeriod() ? static_cast<int32_t>(*sh.getPeriod()) : shape[a];
    if (period != shape[a] && period != run)
      fail(sh, "shift with segments of " + I(period) + " places, neither the axis (" + I(shape[a]) +
                   ") nor a thread's run (" + P_.str() + ")");
    const bool inThread = T == 1 || period == run;
    const int64_t n1 = n(1, shape[1]);
    const int64_t step = a == 1 ? 1 : n1;             // register distance of one place
    const int64_t laneStep = a == 1 ? 1 : P_.tpw[1];  // lane distance of one place
    const std::string pos = a == 1 ? "(ssm_lane % " + I(P_.tpw[1]) + ")"
                                   : "((ssm_lane / " + I(P_.tpw[1]) + ") % " + I(P_.tpw[0]) + ")";
    const std::string nm = declare(sh.getResult(), Kind::Blocked);
    const std::string ty = cType(sh.getResult().getType());
    forRegs(regs(Kind::Blocked, shape), [&] {
      line("const int j = " + std::string(a == 1 ? "r % " + I(n1) : "r / " + I(n1)) + ";");
      line("const int q = j - (" + I(s) + ");");
      line("const int dl = q >= 0 ? q / " + I(run) + " : -((" + I(run - 1) + " - q) / " + I(run) + ");");
      const std::string from = "r + (q - dl * " + I(run) + " - j) * " + I(step);  // register jj
      line("if (dl == 0) {");
      line("  " + nm + "[r] = " + E(sh.getCur(), Kind::Blocked, from) + ";");
      line("} else {");
      if (inThread) {
        line("  " + nm + "[r] = " + E(sh.getFill(), Kind::Blocked, from) + ";");
      } else {
        line("  const int ssm_recv = " + pos + " - dl;");
        line("  const " + ty + " ssm_give = (ssm_recv < 0 || ssm_recv >= " + I(T) + ") ? " +
             E(sh.getFill(), Kind::Blocked, from) + " : " + E(sh.getCur(), Kind::Blocked, from) + ";");
        line("  " + nm + "[r] = __shfl_sync(0xffffffffu, ssm_give, ssm_lane + (((" + pos + " + dl + " + I(T) +
             ") % " + I(T) + ") - " + pos + ") * " + I(laneStep) + ");");
      }
      line("}");
    });
  }

  // sj.scan. assign-layouts gives each thread one contiguous run of the axis (T lanes along it,
  // W warps). Per kept position: the run is combined in order; the lanes' run totals by a
  // Kogge-Stone scan over shuffles; the warps' totals through shared memory, each warp folding
  // those before it in order; then each element takes the combination of everything before its
  // run. The combine region becomes a lambda over scalars.
  void emitScan(sj::ScanOp sc) {
    const size_t k = sc.getSrcs().size();
    auto ss = shapeOf(sc.getSrcs()[0]);
    const int axis = sc.getAxis();
    const bool twoD = ss.size() == 2;
    const Kind srcK = twoD ? Kind::Blocked : layoutOf(sc.getSrcs()[0]);
    const int pd = twoD ? axis : layout::sliceDim(srcK);
    const int64_t Sa = ss[axis], T = P_.tpw[pd], W = P_.wpc[pd];
    const int64_t nRed = n(pd, Sa);
    if (Sa != P_.threads(pd) * P_.spt[pd] || nRed != P_.spt[pd])
      fail(sc, "scan along an axis whose threads do not each hold one contiguous run (" + P_.str() + ", extent " +
                   I(Sa) + ")");
    for (Value v : sc.getSrcs())
      if (isRemat(v) || layoutOf(v) != srcK) fail(sc, "scan of a rematerialised tile");
    const int64_t n1 = twoD ? n(1, ss[1]) : 1;
    const int64_t nKept = twoD ? (axis == 0 ? n1 : n(0, ss[0])) : 1;
    // Positions are in scan order: a reverse scan reads its run, lanes and warps from the end.
    const bool rev = sc.getReverse();
    auto idx = [&](const std::string& kept, const std::string& pos) -> std::string {
      const std::string red = rev ? I(nRed - 1) + " - (" + pos + ")" : pos;
      if (!twoD) return red;
      return axis == 0 ? "(" + red + ") * " + I(n1) + " + " + kept : "(" + kept + ") * " + I(n1) + " + " + red;
    };
    const std::string shflBefore = rev ? "__shfl_down_sync" : "__shfl_up_sync";  // from the lane before in scan order
    std::vector<std::string> ty;
    for (Value v : sc.getSrcs()) ty.push_back(cType(v.getType()));
    // The combine lambda: comb(l..., r..., out&...).
    Block& body = sc.getCombine().front();
    const std::string comb = "ssm_comb" + I(counter_++);
    std::string params;
    for (unsigned i = 0; i < body.getNumArguments(); ++i) {
      std::string a = "ssm_a" + I(counter_++);
      names_[body.getArgument(i).getAsOpaquePointer()] = a;
      params += (i ? ", " : "") + ty[i % k] + " " + a;
    }
    for (size_t i = 0; i < k; ++i) params += ", " + ty[i] + "& ssm_o" + I(i);
    line("auto " + comb + " = [&](" + params + ") {");
    ++ind_;
    emitBlock(body);
    auto y = cast<sj::YieldOp>(body.getTerminator());
    for (size_t i = 0; i < k; ++i) line("ssm_o" + I(i) + " = " + name(y.getValues()[i]) + ";");
    --ind_;
    line("};");
    // call(lhs, rhs, out): lists of k expressions.
    auto call = [&](const std::vector<std::string>& l, const std::vector<std::string>& r,
                    const std::vector<std::string>& o) {
      std::string s = comb + "(";
      for (auto* list : {&l, &r, &o})
        for (auto& e : *list) s += e + ", ";
      s.resize(s.size() - 2);
      return s + ");";
    };
    std::vector<std::string> res(k), tot(k);
    for (size_t i = 0; i < k; ++i) res[i] = declare(sc.getResults()[i], srcK);
    const Kind totK = twoD ? (axis == 0 ? Kind::Slice0 : Kind::Slice1) : Kind::Scalar;
    for (size_t i = 0; i < k; ++i) {
      tot[i] = fresh();
      names_[sc.getResults()[k + i].getAsOpaquePointer()] = tot[i];
      if (totK != Kind::Scalar) kinds_[sc.getResults()[k + i].getAsOpaquePointer()] = totK;
      line(ty[i] + " " + tot[i] + (totK == Kind::Scalar ? "" : "[" + I(nKept) + "]") + ";");
    }
    auto list = [&](const std::string& prefix, const std::string& suffix) {
      std::vector<std::string> v;
      for (size_t i = 0; i < k; ++i) v.push_back(prefix + I(i) + suffix);
      return v;
    };
    auto at = [&](const std::vector<std::string>& arr, const std::string& r) {
      std::vector<std::string> v;
      for (auto& a : arr) v.push_back(a + "[" + r + "]");
      return v;
    };
    const int64_t laneStride = pd == 1 ? 1 : P_.tpw[1];
    const std::string lanePhys = pd == 1 ? "(ssm_lane % " + I(P_.tpw[1]) + ")" : "((ssm_lane / " + I(P_.tpw[1]) + ") % " + I(T) + ")";
    const std::string warpPhys = pd == 0 ? "(ssm_warp / " + I(P_.wpc[1]) + ")" : "(ssm_warp % " + I(P_.wpc[1]) + ")";
    const std::string lanePos = rev ? "(" + I(T - 1) + " - " + lanePhys + ")" : lanePhys;
    const std::string warpPos = rev ? "(" + I(W - 1) + " - " + warpPhys + ")" : warpPhys;
    std::string sm;
    if (W > 1) {  // [warp][kept position][component], as float or int words of the widest type
      const int64_t keptExtent = twoD ? ss[1 - axis] : 1;
      sm = "ssm_scan" + I(counter_++);
      for (size_t i = 0; i < k; ++i)
        line("__shared__ " + ty[i] + " " + sm + "_" + I(i) + "[" + I(W * keptExtent) + "];");
    }
    line("#pragma unroll");
    line("for (int j = 0; j < " + I(nKept) + "; ++j) {");
    ++ind_;
    for (size_t i = 0; i < k; ++i)
      line(res[i] + "[" + idx("j", "0") + "] = " + E(sc.getSrcs()[i], srcK, idx("j", "0")) + ";");
    if (!sc.getInits().empty()) {  // the inits go before the first run of the axis
      std::vector<std::string> in;
      for (Value v : sc.getInits()) in.push_back(E(v, totK, "j"));
      std::string first;
      if (T > 1) first = lanePos + " == 0";
      if (W > 1) first += (first.empty() ? "" : " && ") + warpPos + " == 0";
      line((first.empty() ? "" : "if (" + first + ") ") + call(in, at(res, idx("j", "0")), at(res, idx("j", "0"))));
    }
    line("#pragma unroll");
    line("for (int i = 1; i < " + I(nRed) + "; ++i) {");
    ++ind_;
    {
      std::vector<std::string> x;
      for (size_t i = 0; i < k; ++i) x.push_back(E(sc.getSrcs()[i], srcK, idx("j", "i")));
      line(call(at(res, idx("j", "i - 1")), x, at(res, idx("j", "i"))));
    }
    --ind_;
    line("}");
    // Lanes: t = inclusive total of the runs up to this lane.
    for (size_t i = 0; i < k; ++i) line(ty[i] + " t" + I(i) + " = " + res[i] + "[" + idx("j", I(nRed - 1)) + "];");
    for (int64_t o = 1; o < T; o *= 2) {
      line("{");
      ++ind_;
      for (size_t i = 0; i < k; ++i)
        line("const " + ty[i] + " u" + I(i) + " = " + shflBefore + "(0xffffffffu, t" + I(i) + ", " + I(o * laneStride) + ");");
      line("if (" + lanePos + " >= " + I(o) + ") " + call(list("u", ""), list("t", ""), list("t", "")));
      --ind_;
      line("}");
    }
    // e = the combination of everything before this thread's run (has_e: there is some).
    for (size_t i = 0; i < k; ++i)
      line(ty[i] + " e" + I(i) + (T > 1 ? " = " + shflBefore + "(0xffffffffu, t" + I(i) + ", " + I(laneStride) + ")" : " = t" + I(i)) + ";");
    line(std::string("bool has_e = ") + (T > 1 ? lanePos + " > 0" : "false") + ";");
    // The lane last in scan order, which holds the total.
    const std::string lastLane = "ssm_lane + (" + I(rev ? 0 : T - 1) + " - " + lanePhys + ") * " + I(laneStride);
    if (W > 1) {
      const int64_t keptExtent = twoD ? ss[1 - axis] : 1;
      const std::string kc = twoD ? coord(1 - pd, keptExtent, "j") : "0";
      // One writer per word: the owner of the kept position (replicas of a 1-D tile stay out).
      std::string own = "";
      const std::string other = pd == 0 ? "ssm_t1" : "ssm_t0";
      if (!twoD) own = " && " + other + " == 0";
      else if (keptExtent < P_.threads(1 - pd)) own = " && " + other + " < " + I(keptExtent);
      line("if (" + lanePos + " == " + I(T - 1) + own + ") {");
      for (size_t i = 0; i < k; ++i) line("  " + sm + "_" + I(i) + "[" + warpPos + " * " + I(keptExtent) + " + " + kc + "] = t" + I(i) + ";");
      line("}");
      line("__syncthreads();");
      for (size_t i = 0; i < k; ++i) line(ty[i] + " p" + I(i) + " = " + sm + "_" + I(i) + "[" + kc + "];");
      line("for (int w = 1; w <= " + I(W - 1) + "; ++w) {");
      ++ind_;
      // Before this warp: p = warps [0, w) once w reaches this warp; total: all W.
      line("if (w == " + warpPos + ") {");
      ++ind_;
      line("if (has_e) " + call(list("p", ""), list("e", ""), list("e", "")));
      line("else {");
      for (size_t i = 0; i < k; ++i) line("  e" + I(i) + " = p" + I(i) + ";");
      line("}");
      line("has_e = true;");
      --ind_;
      line("}");
      std::vector<std::string> q;
      for (size_t i = 0; i < k; ++i) q.push_back(sm + "_" + I(i) + "[w * " + I(keptExtent) + " + " + kc + "]");
      line(call(list("p", ""), q, list("p", "")));
      --ind_;
      line("}");
      for (size_t i = 0; i < k; ++i) line(tot[i] + (totK == Kind::Scalar ? "" : "[j]") + " = p" + I(i) + ";");
      line("__syncthreads();");  // the shared words are reused by the next kept position
    } else {
      for (size_t i = 0; i < k; ++i)
        line(tot[i] + (totK == Kind::Scalar ? "" : "[j]") + " = " +
             (T > 1 ? "__shfl_sync(0xffffffffu, t" + I(i) + ", " + lastLane + ")" : "t" + I(i)) + ";");
    }
    line("if (has_e) {");
    ++ind_;
    line("#pragma unroll");
    line("for (int i = 0; i < " + I(nRed) + "; ++i) " + call(list("e", ""), at(res, idx("j", "i")), at(res, idx("j", "i"))));
    --ind_;
    line("}");
    --ind_;
    line("}");
  }

  // Whether expression `e` reads variable `nm` (names are "v<number>", so a match must not run on).
  static bool reads(const std::string& e, const std::string& nm) {
    for (size_t p = e.find(nm); p != std::string::npos; p = e.find(nm, p + 1)) {
      const size_t q = p + nm.size();
      const bool startOk = p == 0 || !(std::isalnum(static_cast<unsigned char>(e[p - 1])) || e[p - 1] == '_');
      const bool endOk = q == e.size() || !(std::isalnum(static_cast<unsigned char>(e[q])) || e[q] == '_');
      if (startOk && endOk) return true;
    }
    return false;
  }

  // Copies the yielded values into the result variables. A tile is assigned directly unless its
  // expression reads a target assigned before it or itself (a loop's yield may read the values
  // it replaces): those go through a temporary first. Copies of whole tiles are what NVVM spends
  // its time folding away, so the common case (the yield reads none) makes none.
  void assignYield(scf::YieldOp y, const std::vector<std::string>& targets, const std::vector<Value>& results) {
    std::vector<std::string> tmps(targets.size());
    std::vector<std::string> direct(targets.size());  // the expression of register r, if direct
    for (size_t i = 0; i < targets.size(); ++i) {
      Value res = results[i];
      auto s = shapeOf(res);
      if (const Raw* rr = rawOf(res)) {  // a raw carried value: copy the bits
        const Raw* src = rawOf(y.getOperand(i));
        if (!src) fail(y, "a raw carried value is yielded a converted one");
        if (!sameForm(*src, *rr)) fail(y, "a raw carried value is yielded another form");
        const std::string t = tmps[i] = fresh();
        if (s.empty()) {
          line(rr->storage + " " + t + " = " + src->name + ";");
        } else {
          line(rr->storage + " " + t + "[" + I(regs(layoutOf(res), s)) + "];");
          forRegs(regs(layoutOf(res), s), [&] { line(t + "[r] = " + src->name + "[r];"); });
        }
      } else if (s.empty()) {
        const std::string t = tmps[i] = fresh();
        line(cType(res.getType()) + " " + t + " = " + name(y.getOperand(i)) + ";");
      } else {
        Kind k = layoutOf(res);
        const std::string e = E(y.getOperand(i), k, "r");
        bool hazard = false;
        for (size_t j = 0; j <= i && !hazard; ++j) hazard = reads(e, targets[j]);
        if (!hazard) {
          direct[i] = e;
          continue;
        }
        const std::string t = tmps[i] = fresh();
        line(cType(res.getType()) + " " + t + "[" + I(regs(k, s)) + "];");
        forRegs(regs(k, s), [&] { line(t + "[r] = " + e + ";"); });
      }
    }
    for (size_t i = 0; i < targets.size(); ++i) {
      auto s = shapeOf(results[i]);
      if (s.empty()) line(targets[i] + " = " + tmps[i] + ";");
      else if (!direct[i].empty()) {
        if (direct[i] != targets[i] + "[r]")  // a value yielded unchanged needs no copy
          forRegs(regs(layoutOf(results[i]), s), [&] { line(targets[i] + "[r] = " + direct[i] + ";"); });
      } else forRegs(regs(layoutOf(results[i]), s), [&] { line(targets[i] + "[r] = " + tmps[i] + "[r];"); });
    }
  }

  std::vector<std::string> declareResults(Operation* op) {
    std::vector<std::string> out;
    for (OpResult r : op->getResults()) out.push_back(declare(r, layoutOf(r)));
    return out;
  }

  void emitIf(scf::IfOp i) {
    auto targets = declareResults(i);
    std::vector<Value> results(i.getResults().begin(), i.getResults().end());
    line("if (" + name(i.getCondition()) + ") {");
    ++ind_;
    emitBlock(*i.thenBlock());
    assignYield(i.thenYield(), targets, results);
    --ind_;
    if (i.elseBlock() && !i.elseBlock()->empty()) {
      line("} else {");
      ++ind_;
      emitBlock(*i.elseBlock());
      assignYield(i.elseYield(), targets, results);
      --ind_;
    }
    line("}");
  }

  void emitFor(scf::ForOp fo) {
    std::vector<Value> results(fo.getResults().begin(), fo.getResults().end());
    auto yield = cast<scf::YieldOp>(fo.getBody()->getTerminator());
    // A value carried as raw 16-bit bits when it enters and leaves the body so (the prefetched
    // next-token inputs): its conversion then waits until the next iteration uses it.
    std::vector<const Raw*> rawInit(results.size(), nullptr);
    for (size_t k = 0; k < results.size(); ++k) {
      // The init is emitted already; the yielded value is not yet: ask the IR.
      const Raw* a = rawOf(fo.getInitArgs()[k]);
      Value y = yield.getOperand(k);
      if (!a || !rawLoadStorage(y)) continue;
      const Raw b = rawForm(y, "");
      if (sameForm(*a, b)) rawInit[k] = a;
    }
    std::vector<std::string> targets;
    for (size_t k = 0; k < results.size(); ++k) {
      Value r = results[k];
      if (!rawInit[k]) {
        targets.push_back(declare(r, layoutOf(r)));
        continue;
      }
      const std::string nm = fresh(), T = rawInit[k]->storage;
      Raw carried = *rawInit[k];  // the init's form, in a variable of its own
      carried.name = nm;
      auto s = shapeOf(r);
      Value arg = fo.getRegionIterArgs()[k];
      for (Value v : {r, arg}) {
        raw_[v.getAsOpaquePointer()] = carried;
        names_[v.getAsOpaquePointer()] = s.empty() ? "ssm_to_float(" + nm + ")" : nm;
        if (!s.empty()) kinds_[v.getAsOpaquePointer()] = layoutOf(fo.getInitArgs()[k]);
      }
      if (s.empty()) {
        line(T + " " + nm + " = " + rawInit[k]->name + ";");
      } else {
        line(T + " " + nm + "[" + I(regs(layoutOf(r), s)) + "];");
        forRegs(regs(layoutOf(r), s), [&] { line(nm + "[r] = " + rawInit[k]->name + "[r];"); });
      }
      targets.push_back(nm);
    }
    // Carried values live in the result variables; the body's block arguments alias them.
    for (size_t k = 0; k < targets.size(); ++k) {
      if (rawInit[k]) continue;  // initialised above
      Value init = fo.getInitArgs()[k];
      auto s = shapeOf(init);
      if (s.empty()) line(targets[k] + " = " + name(init) + ";");
      else forRegs(regs(layoutOf(results[k]), s), [&] { line(targets[k] + "[r] = " + E(init, layoutOf(results[k]), "r") + ";"); });
      names_[fo.getRegionIterArgs()[k].getAsOpaquePointer()] = targets[k];
      if (!s.empty()) kinds_[fo.getRegionIterArgs()[k].getAsOpaquePointer()] = layoutOf(results[k]);
    }
    std::string iv = fresh();
    names_[fo.getInductionVar().getAsOpaquePointer()] = iv;
    std::string t = cType(fo.getInductionVar().getType());
    line("#pragma unroll 1");  // the unroll-loops pass decided to keep this loop rolled
    line("for (" + t + " " + iv + " = " + name(fo.getLowerBound()) + "; " + iv + " < " + name(fo.getUpperBound()) +
         "; " + iv + " += " + name(fo.getStep()) + ") {");
    ++ind_;
    emitBlock(*fo.getBody());
    assignYield(yield, targets, results);
    --ind_;
    line("}");
  }
};

}  // namespace

EmittedKernel emitCuda(func::FuncOp kernel) { return Emitter(kernel).run(); }

}  // namespace ssmjit
