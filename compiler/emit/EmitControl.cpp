// Control flow: scf.if and scf.for (results and carried values live in variables the yields
// assign), early returns and barriers.
#include <cctype>

#include "compiler/emit/EmitterCore.h"

namespace ssmjit::emit {
using namespace mlir;

namespace {
// Whether expression `e` reads variable `nm` (names are "v<number>", so a match must not run on).
bool reads(const std::string& e, const std::string& nm) {
  for (size_t p = e.find(nm); p != std::string::npos; p = e.find(nm, p + 1)) {
    const size_t q = p + nm.size();
    const bool startOk = p == 0 || !(std::isalnum(static_cast<unsigned char>(e[p - 1])) || e[p - 1] == '_');
    const bool endOk = q == e.size() || !(std::isalnum(static_cast<unsigned char>(e[q])) || e[q] == '_');
    if (startOk && endOk) return true;
  }
  return false;
}
}  // namespace

// Copies the yielded values into the result variables. A tile is assigned directly unless its
// expression reads a target assigned before it or itself (a loop's yield may read the values
// it replaces): those go through a temporary first. Copies of whole tiles are what NVVM spends
// its time folding away, so the common case (the yield reads none) makes none.
void Emitter::assignYield(scf::YieldOp y, const std::vector<std::string>& targets, const std::vector<Value>& results) {
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
    if (s.empty())
      line(targets[i] + " = " + tmps[i] + ";");
    else if (!direct[i].empty()) {
      if (direct[i] != targets[i] + "[r]")  // a value yielded unchanged needs no copy
        forRegs(regs(layoutOf(results[i]), s), [&] { line(targets[i] + "[r] = " + direct[i] + ";"); });
    } else
      forRegs(regs(layoutOf(results[i]), s), [&] { line(targets[i] + "[r] = " + tmps[i] + "[r];"); });
  }
}

void Emitter::emit(scf::IfOp i) {
  std::vector<std::string> targets;
  for (OpResult r : i.getResults()) targets.push_back(declare(r, layoutOf(r)));
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

void Emitter::emit(scf::ForOp fo) {
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
    if (s.empty())
      line(targets[k] + " = " + name(init) + ";");
    else
      forRegs(regs(layoutOf(results[k]), s),
              [&] { line(targets[k] + "[r] = " + E(init, layoutOf(results[k]), "r") + ";"); });
    names_[fo.getRegionIterArgs()[k].getAsOpaquePointer()] = targets[k];
    if (!s.empty()) kinds_[fo.getRegionIterArgs()[k].getAsOpaquePointer()] = layoutOf(results[k]);
  }
  std::string iv = fresh();
  names_[fo.getInductionVar().getAsOpaquePointer()] = iv;
  std::string t = cType(fo.getInductionVar().getType());
  line("#pragma unroll 1");  // the unroll-loops pass decided to keep this loop rolled
  line("for (" + t + " " + iv + " = " + name(fo.getLowerBound()) + "; " + iv + " < " + name(fo.getUpperBound()) + "; " +
       iv + " += " + name(fo.getStep()) + ") {");
  ++ind_;
  emitBlock(*fo.getBody());
  assignYield(yield, targets, results);
  closeBlocks();
}

void Emitter::emit(sj::ReturnIfOp r) { line("if (" + name(r.getCond()) + ") return;"); }

void Emitter::emit(sj::BarrierOp b) {
  if (b.getAsyncProxy()) line("ssm_fence_async_shared();");
  line("__syncthreads();");
}

}  // namespace ssmjit::emit
