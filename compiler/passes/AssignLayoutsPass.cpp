// sj-assign-layouts (Passes.td): the kernel's parent blocked layout and every tile's layout.
#include <map>

#include "compiler/dialect/SJDialect.h"
#include "compiler/passes/Layout.h"
#include "compiler/passes/Passes.h"
#include "llvm/ADT/EquivalenceClasses.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

namespace ssmjit::passes {
#define GEN_PASS_DEF_ASSIGNLAYOUTSPASS
#include "compiler/passes/Passes.h.inc"

using namespace mlir;
using layout::Kind;

namespace {

bool isRemat(Value v) {
  Operation* d = v.getDefiningOp();
  return d && (isa<sj::RangeOp, sj::SplatOp>(d) || isa<arith::ConstantOp>(d));
}
int rankOf(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  return t ? (int)t.getRank() : 0;
}
int storageBytes(Value ptr) {
  Type e = cast<sj::PtrType>(ptr.getType()).getElementType();
  return (int)e.getIntOrFloatBitWidth() / 8;
}

struct AssignLayoutsPass : impl::AssignLayoutsPassBase<AssignLayoutsPass> {
  void runOnOperation() override {
    for (auto f : getOperation().getOps<func::FuncOp>())
      if (failed(assign(f))) return signalPassFailure();
  }

  static layout::Parent chooseParent(func::FuncOp f) {
    int64_t warps = f->getAttrOfType<IntegerAttr>("sj.num_warps").getInt();
    int64_t S0 = 1, S1 = 1;
    bool any2d = false;
    int minBytes = 4, maxGlobalBytes = 1;
    auto widen = [&](Value v) {
      if (auto t = dyn_cast<RankedTensorType>(v.getType()))
        if (t.getRank() == 2 && t.getNumElements() > S0 * S1) S0 = t.getDimSize(0), S1 = t.getDimSize(1), any2d = true;
    };
    // The emitter shifts and scans a 2-D tile only where the layout holds its whole extent along
    // the axis in one warp: such tiles set the parent's shape, whatever larger tiles the kernel
    // also has (a packed scan's ranking of its sequences, say).
    f.walk([&](sj::ShiftOp s) { widen(s.getResult()); });
    f.walk([&](sj::ScanOp s) { widen(s.getSrcs()[0]); });
    const bool shaped = any2d;
    f.walk([&](Operation* op) {
      if (!shaped)
        for (Value r : op->getResults()) widen(r);
      auto access = [&](Value ptr) {
        minBytes = std::min(minBytes, storageBytes(ptr));
        if (!ptr.getDefiningOp<sj::SharedBufferOp>()) maxGlobalBytes = std::max(maxGlobalBytes, storageBytes(ptr));
      };
      if (auto l = dyn_cast<sj::LoadOp>(op); l && rankOf(l.getOffsets()) == 2) access(l.getPtr());
      if (auto s = dyn_cast<sj::StoreOp>(op); s && rankOf(s.getOffsets()) == 2) access(s.getPtr());
    });
    if (!any2d) {  // 1-D kernel: every thread along the fastest dim
      f.walk([&](Operation* op) {
        for (Value r : op->getResults())
          if (auto t = dyn_cast<RankedTensorType>(r.getType())) S1 = std::max(S1, t.getDimSize(0));
      });
    }
    // A kernel with a dot takes an mma.m16n8k16 layout: lanes 4 g + q hold rows over the 8 lane
    // groups g (then the warps) and columns over the 4 lanes q, in runs of one 16-byte vector of
    // the widest global element (at least a pair). A thread's consecutive rows are then an mma's
    // rows g and g + 8, and its registers along a row the fragments' columns in their order
    // (sj.dot gathers b to match), so a and the result need no conversion. Why the widest: with
    // a run of two vectors, each load instruction uses half of every 32-byte sector it touches.
    // A dot reading b with ldmatrix takes runs of a pair: ldmatrix hands lane q the fragment
    // columns 2q, 2q + 1 of 8 consecutive ones, so the registers must hold those columns.
    bool dots = false, fragments = false;
    f.walk([&](sj::DotOp d) { dots = true, fragments |= bool(sj::fragmentBuffer(d)); });
    f.walk([&](sj::DotSharedOp) { dots = fragments = true; });
    if (dots) {
      layout::Parent p;
      p.spt[1] = fragments ? 2 : std::min<int64_t>(8, std::max<int64_t>(2, 16 / maxGlobalBytes));
      p.tpw[0] = 8, p.tpw[1] = 4, p.wpc[0] = warps, p.wpc[1] = 1;
      return p;
    }
    layout::Parent p;
    int64_t vec = std::max<int64_t>(1, 16 / minBytes);
    p.spt[1] = std::min(vec, S1);
    // Along the fastest axis, only as many lanes as one 128-byte coalesced segment needs: the
    // rest of the warp goes down axis 0, so each thread keeps more of a row and a reduction
    // along axis 1 needs log2(lanes) shuffles instead of 5 per row (shuffles, not bytes, bounded
    // the multi-token state update).
    const int64_t lanesPerSegment = std::max<int64_t>(1, 128 / (p.spt[1] * minBytes));
    p.tpw[1] = std::min<int64_t>({32, S1 / p.spt[1], any2d ? lanesPerSegment : 32});
    if (auto lanes = f->getAttrOfType<IntegerAttr>("sj.inner_lanes"))  // the kernel's choice
      p.tpw[1] = std::min<int64_t>({lanes.getInt(), std::max<int64_t>(1, S1 / p.spt[1])});
    p.tpw[0] = 32 / p.tpw[1];
    p.wpc[0] = any2d ? std::min<int64_t>(warps, std::max<int64_t>(1, S0 / p.tpw[0])) : 1;
    p.wpc[1] = warps / p.wpc[0];
    keepShiftsInWarps(f, S0, S1, warps, p);
    if (!any2d) {  // a 1-D scan: one contiguous run a thread
      bool scans = false;
      f.walk([&](sj::ScanOp) { scans = true; });
      if (scans && S1 >= p.tpw[1] * p.wpc[1]) p.spt[1] = S1 / (p.tpw[1] * p.wpc[1]);
    }
    return p;
  }

  // sj.shift moves a 2-D tile along an axis with register moves and warp shuffles, and sj.scan
  // combines along an axis run by run, so along that axis one warp holds the whole extent, each
  // thread a contiguous run (sj.shift_lanes lanes when the kernel sets it); the warps go along
  // the other axis.
  static void keepShiftsInWarps(func::FuncOp f, int64_t S0, int64_t S1, int64_t warps, layout::Parent& p) {
    int axis = -1;
    f.walk([&](sj::ShiftOp s) { axis = s.getAxis(); });
    f.walk([&](sj::ScanOp s) {
      if (rankOf(s.getSrcs()[0]) == 2) axis = s.getAxis();
    });
    if (axis < 0) return;
    const int a = axis, o = 1 - axis;
    const int64_t Sa = a == 0 ? S0 : S1, So = a == 0 ? S1 : S0;
    const int64_t run = std::min(std::max<int64_t>(p.spt[a], 1), Sa);
    p.tpw[a] = std::min<int64_t>(32, Sa / run);
    if (auto lanes = f->getAttrOfType<IntegerAttr>("sj.shift_lanes"))  // the kernel's choice
      p.tpw[a] = std::min<int64_t>(lanes.getInt(), Sa);
    p.spt[a] = Sa / p.tpw[a];
    p.tpw[o] = 32 / p.tpw[a];
    p.spt[o] = o == 1 ? std::max<int64_t>(1, std::min(p.spt[1], So / (p.tpw[1] * warps))) : 1;
    p.wpc[a] = 1;
    p.wpc[o] = warps;
  }

  LogicalResult assign(func::FuncOp f) {
    MLIRContext* ctx = f.getContext();
    const sj::BlockedAttr parent = chooseParent(f).attr(ctx);
    f->setAttr("sj.parent", parent);

    // Union-find over 1-D non-rematerialisable values; each class collects required kinds.
    llvm::EquivalenceClasses<void*> classes;
    std::map<void*, Kind> required;  // value -> kind forced on it
    LogicalResult result = success();
    auto key = [](Value v) { return v.getAsOpaquePointer(); };
    auto track = [&](Value v) -> bool {
      if (rankOf(v) != 1 || isRemat(v)) return false;
      classes.insert(key(v));
      return true;
    };
    auto unite = [&](Value a, Value b) {
      if (track(a) && track(b)) classes.unionSets(key(a), key(b));
    };
    auto require = [&](Value v, Kind k, Operation* at) {
      if (!track(v)) return;
      auto it = required.find(key(v));
      if (it != required.end() && it->second != k) {
        at->emitError("assign-layouts: a 1-D tile is needed as both ")
            << layout::kindName(it->second) << " and " << layout::kindName(k)
            << " (layout conversion is not supported yet)";
        result = failure();
      }
      required[key(v)] = k;
    };

    f.walk([&](Operation* op) {
      if (auto e = dyn_cast<sj::ExpandDimsOp>(op)) {
        if (rankOf(e.getSrc()) == 1) require(e.getSrc(), e.getAxis() == 0 ? Kind::Slice0 : Kind::Slice1, op);
        return;
      }
      if (auto r = dyn_cast<sj::ReduceOp>(op)) {
        if (rankOf(r.getResult()) == 1) require(r.getResult(), r.getAxis() == 0 ? Kind::Slice0 : Kind::Slice1, op);
        if (r.getWeight()) unite(r.getSrc(), r.getWeight());  // read element by element together
        return;
      }
      if (auto sc = dyn_cast<sj::ScanOp>(op)) {  // scanned tiles keep the layout; totals slice it
        const size_t k = sc.getSrcs().size();
        for (size_t i = 0; i < k; ++i) {
          unite(sc.getSrcs()[0], sc.getSrcs()[i]);
          unite(sc.getSrcs()[i], sc.getResults()[i]);
          if (rankOf(sc.getResults()[k + i]) == 1)
            require(sc.getResults()[k + i], sc.getAxis() == 0 ? Kind::Slice0 : Kind::Slice1, op);
          if (i < sc.getInits().size()) unite(sc.getInits()[i], sc.getResults()[k + i]);
        }
        return;
      }
      if (auto y = dyn_cast<scf::YieldOp>(op)) {
        Operation* parentOp = y->getParentOp();
        for (unsigned i = 0; i < y.getNumOperands(); ++i) {
          unite(y.getOperand(i), parentOp->getResult(i));
          if (auto fo = dyn_cast<scf::ForOp>(parentOp)) {
            unite(fo.getRegionIterArgs()[i], parentOp->getResult(i));
            unite(fo.getInitArgs()[i], parentOp->getResult(i));
          }
        }
        return;
      }
      if (isa<scf::ForOp, scf::IfOp>(op)) return;
      // Elementwise ops, loads and stores: all 1-D tile operands and results share a layout.
      Value first;
      auto visit = [&](Value v) {
        if (rankOf(v) != 1 || isRemat(v)) return;
        if (!first)
          first = v, track(v);
        else
          unite(first, v);
      };
      for (Value v : op->getOperands()) visit(v);
      for (Value v : op->getResults()) visit(v);
    });
    if (failed(result)) return failure();

    // Resolve each class's kind.
    std::map<void*, Kind> leaderKind;
    for (auto& [v, k] : required) {
      void* leader = classes.getLeaderValue(v);
      auto it = leaderKind.find(leader);
      if (it != leaderKind.end() && it->second != k)
        return f.emitError("assign-layouts: conflicting layouts for one 1-D tile (")
               << layout::kindName(it->second) << " vs " << layout::kindName(k)
               << "); layout conversion is not supported yet";
      leaderKind[leader] = k;
    }
    auto layoutOf = [&](Value v) -> Attribute {  // null: unsupported
      int r = rankOf(v);
      if (r == 0) return sj::ScalarAttr::get(ctx);
      if (r == 2) return parent;
      if (r > 2) return {};
      if (isRemat(v)) return sj::AnyAttr::get(ctx);
      auto lit = classes.findLeader(key(v));
      if (lit == classes.member_end()) return layout::attrOf(Kind::Slice0, parent);
      auto it = leaderKind.find(*lit);
      return layout::attrOf(it == leaderKind.end() ? Kind::Slice0 : it->second, parent);
    };

    bool bad = false;
    f.walk([&](Operation* op) {
      if (op->getNumResults() == 0) return;
      SmallVector<Attribute> ls;
      for (Value r : op->getResults()) {
        Attribute l = layoutOf(r);
        if (!l) {
          op->emitError("assign-layouts: tiles of rank > 2 are not supported");
          bad = true;
          return;
        }
        ls.push_back(l);
      }
      op->setAttr("sj.layouts", ArrayAttr::get(ctx, ls));
    });
    return bad ? failure() : success();
  }
};

}  // namespace

}  // namespace ssmjit::passes
