// Collectives over a tile's axis, across registers, lanes (shuffles) and warps (shared memory):
// reductions, shifts and scans. Each relies on the parent layout sj-assign-layouts chose for it.
#include "compiler/emit/EmitterCore.h"

namespace ssmjit::emit {
using namespace mlir;

void Emitter::emit(sj::ReduceOp r) {
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
  int pd;               // parent dim reduced
  int64_t Sa;           // extent along it
  int64_t nKept, nRed;  // registers along the kept axis and along the reduced axis
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
    forConst("j", 0, nKept, 1, [&] {
      // Elements through E: a loaded 16-bit tile is still its storage bits here.
      auto el = [&](Value v, const std::string& i) { return E(v, srcK, srcIdx("j", i)); };
      if (Value wt = r.getWeight()) {  // sum of src * weight: one fma an element
        // One chain: several independent chains need more registers, which cost the state
        // update and the decode verify programs an SM on the H100.
        line(ty + " acc = " + el(r.getSrc(), "0") + " * " + el(wt, "0") + ";");
        forConst("i", 1, nRed, 1,
                 [&] { line("acc = __fmaf_rn(" + el(r.getSrc(), "i") + ", " + el(wt, "i") + ", acc);"); });
      } else {
        line(ty + " acc = " + el(r.getSrc(), "0") + ";");
        forConst("i", 1, nRed, 1, [&] { line("acc = " + combine("acc", el(r.getSrc(), "i")) + ";"); });
      }
      int64_t laneStride = pd == 1 ? 1 : P_.tpw[1];
      for (int64_t o = 1; o < P_.tpw[pd]; o *= 2)
        line("acc = " + combine("acc", "__shfl_xor_sync(0xffffffffu, acc, " + I(o * laneStride) + ")") + ";");
      line(out + " = acc;");
    });
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
  forConst("j", 0, nKept, 1, [&] {
    line("if (" + lanePos + " == 0" + own + ") " + sm + "[" + warpPos + " * " + I(keptExtent) + " + " + keptCoord +
         "] = ssm_w[j];");
  });
  closeBlocks();
  const std::string out = scalar ? nm : nm + "[j]";
  const std::string fold = combine("acc", sm + "[w * " + I(keptExtent) + " + " + keptCoord + "]");
  void* key = r.getResult().getAsOpaquePointer();
  pending_.back().push_back({r.getOperation(), false, [=, this] {
                               names_[key] = nm;
                               line(decl);
                               forConst("j", 0, nKept, 1, [&] {
                                 line(ty + " acc = " + sm + "[" + keptCoord + "];");
                                 forConst("w", 1, W, 1, [&] { line("acc = " + fold + ";"); });
                                 line(out + " = acc;");
                               });
                             }});
}

// sj.shift. assign-layouts keeps the axis inside a warp: T lanes along it, each holding a
// contiguous run of n registers. Place j of a run takes place j - s, which lies dl runs away
// (a lane dl places along the axis, register jj of its run): a register move when dl = 0, else
// one shuffle. A receiver whose source lane falls off the tile's edge takes the fill tile
// instead, supplied by the lane at the wrapped position (whose own cur value nobody needs).
// A shift whose period is the run moves each run on its own: the fill's place is in the
// same thread, a register move too.
void Emitter::emit(sj::ShiftOp sh) {
  auto shape = shapeOf(sh.getResult());
  const int a = sh.getAxis();
  const int64_t s = static_cast<int32_t>(sh.getAmount());  // an I32Attr reads back unsigned
  const int64_t T = P_.tpw[a], run = P_.spt[a];
  if (P_.wpc[a] != 1 || T * run != shape[a])
    fail(sh, "shift of a [" + I(shape[0]) + ", " + I(shape[1]) + "] tile along axis " + I(a) +
                 ", which the layout does not keep in one warp (" + P_.str() + ")");
  const int64_t period = sh.getPeriod() ? static_cast<int32_t>(*sh.getPeriod()) : shape[a];
  if (period != shape[a] && period != run)
    fail(sh, "shift with segments of " + I(period) + " places, neither the axis (" + I(shape[a]) +
                 ") nor a thread's run (" + P_.str() + ")");
  const bool inThread = T == 1 || period == run;
  const int64_t n1 = n(1, shape[1]);
  const int64_t step = a == 1 ? 1 : n1;             // register distance of one place
  const int64_t laneStep = a == 1 ? 1 : P_.tpw[1];  // lane distance of one place
  const std::string pos =
      a == 1 ? "(ssm_lane % " + I(P_.tpw[1]) + ")" : "((ssm_lane / " + I(P_.tpw[1]) + ") % " + I(P_.tpw[0]) + ")";
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
      line("  " + nm + "[r] = __shfl_sync(0xffffffffu, ssm_give, ssm_lane + (((" + pos + " + dl + " + I(T) + ") % " +
           I(T) + ") - " + pos + ") * " + I(laneStep) + ");");
    }
    line("}");
  });
}

// sj.scan. assign-layouts gives each thread one contiguous run of the axis (T lanes along it,
// W warps). Per kept position: the run is combined in order; the lanes' run totals by a
// Kogge-Stone scan over shuffles; the warps' totals through shared memory, each warp folding
// those before it in order; then each element takes the combination of everything before its
// run. The combine region becomes a lambda over scalars.
void Emitter::emit(sj::ScanOp sc) {
  const size_t k = sc.getSrcs().size();
  auto ss = shapeOf(sc.getSrcs()[0]);
  const int axis = sc.getAxis();
  const bool twoD = ss.size() == 2;
  const Kind srcK = twoD ? Kind::Blocked : layoutOf(sc.getSrcs()[0]);
  const int pd = twoD ? axis : layout::sliceDim(srcK);
  const int64_t Sa = ss[axis], T = P_.tpw[pd], W = P_.wpc[pd];
  const int64_t nRed = n(pd, Sa);
  if (Sa != P_.threads(pd) * P_.spt[pd] || nRed != P_.spt[pd])
    fail(sc, "scan along an axis whose threads do not each hold one contiguous run (" + P_.str() + ", extent " + I(Sa) +
                 ")");
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
  const std::string lanePhys =
      pd == 1 ? "(ssm_lane % " + I(P_.tpw[1]) + ")" : "((ssm_lane / " + I(P_.tpw[1]) + ") % " + I(T) + ")";
  const std::string warpPhys = pd == 0 ? "(ssm_warp / " + I(P_.wpc[1]) + ")" : "(ssm_warp % " + I(P_.wpc[1]) + ")";
  const std::string lanePos = rev ? "(" + I(T - 1) + " - " + lanePhys + ")" : lanePhys;
  const std::string warpPos = rev ? "(" + I(W - 1) + " - " + warpPhys + ")" : warpPhys;
  std::string sm;
  if (W > 1) {  // [warp][kept position][component], as float or int words of the widest type
    const int64_t keptExtent = twoD ? ss[1 - axis] : 1;
    sm = "ssm_scan" + I(counter_++);
    for (size_t i = 0; i < k; ++i) line("__shared__ " + ty[i] + " " + sm + "_" + I(i) + "[" + I(W * keptExtent) + "];");
  }
  forConst("j", 0, nKept, 1, [&] {
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
    forConst("i", 1, nRed, 1, [&] {
      std::vector<std::string> x;
      for (size_t i = 0; i < k; ++i) x.push_back(E(sc.getSrcs()[i], srcK, idx("j", "i")));
      line(call(at(res, idx("j", "i - 1")), x, at(res, idx("j", "i"))));
    });
    // Lanes: t = inclusive total of the runs up to this lane.
    for (size_t i = 0; i < k; ++i) line(ty[i] + " t" + I(i) + " = " + res[i] + "[" + idx("j", I(nRed - 1)) + "];");
    for (int64_t o = 1; o < T; o *= 2) {
      line("{");
      ++ind_;
      for (size_t i = 0; i < k; ++i)
        line("const " + ty[i] + " u" + I(i) + " = " + shflBefore + "(0xffffffffu, t" + I(i) + ", " + I(o * laneStride) +
             ");");
      line("if (" + lanePos + " >= " + I(o) + ") " + call(list("u", ""), list("t", ""), list("t", "")));
      closeBlocks();
    }
    // e = the combination of everything before this thread's run (has_e: there is some).
    for (size_t i = 0; i < k; ++i)
      line(ty[i] + " e" + I(i) +
           (T > 1 ? " = " + shflBefore + "(0xffffffffu, t" + I(i) + ", " + I(laneStride) + ")" : " = t" + I(i)) + ";");
    line(std::string("bool has_e = ") + (T > 1 ? lanePos + " > 0" : "false") + ";");
    // The lane last in scan order, which holds the total.
    const std::string lastLane = "ssm_lane + (" + I(rev ? 0 : T - 1) + " - " + lanePhys + ") * " + I(laneStride);
    if (W > 1) {
      const int64_t keptExtent = twoD ? ss[1 - axis] : 1;
      const std::string kc = twoD ? coord(1 - pd, keptExtent, "j") : "0";
      // One writer per word: the owner of the kept position (replicas of a 1-D tile stay out).
      std::string own = "";
      const std::string other = pd == 0 ? "ssm_t1" : "ssm_t0";
      if (!twoD)
        own = " && " + other + " == 0";
      else if (keptExtent < P_.threads(1 - pd))
        own = " && " + other + " < " + I(keptExtent);
      line("if (" + lanePos + " == " + I(T - 1) + own + ") {");
      for (size_t i = 0; i < k; ++i)
        line("  " + sm + "_" + I(i) + "[" + warpPos + " * " + I(keptExtent) + " + " + kc + "] = t" + I(i) + ";");
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
      closeBlocks();
      std::vector<std::string> q;
      for (size_t i = 0; i < k; ++i) q.push_back(sm + "_" + I(i) + "[w * " + I(keptExtent) + " + " + kc + "]");
      line(call(list("p", ""), q, list("p", "")));
      closeBlocks();
      for (size_t i = 0; i < k; ++i) line(tot[i] + (totK == Kind::Scalar ? "" : "[j]") + " = p" + I(i) + ";");
      line("__syncthreads();");  // the shared words are reused by the next kept position
    } else {
      for (size_t i = 0; i < k; ++i)
        line(tot[i] + (totK == Kind::Scalar ? "" : "[j]") + " = " +
             (T > 1 ? "__shfl_sync(0xffffffffu, t" + I(i) + ", " + lastLane + ")" : "t" + I(i)) + ";");
    }
    line("if (has_e) {");
    ++ind_;
    forConst("i", 0, nRed, 1, [&] { line(call(list("e", ""), at(res, idx("j", "i")), at(res, idx("j", "i")))); });
    closeBlocks();
  });
}

}  // namespace ssmjit::emit
