// The walk over the first sequence's tiles that the context-parallel scan's incoming-state
// kernels share (IncomingShare.h).
#include "kernels_dsl/parallel/IncomingShare.h"

#include <cmath>

namespace ssmjit::kernels {
using namespace dsl;

IncomingShare incomingShare(KernelBuilder& k, int64_t BD) {
  IncomingShare s;
  s.d = k.programId(0) * BD + k.range(BD);
  s.mD = s.d < k.arg("D");
  Value cu = k.arg("cu"), sCu = k.arg("s_cu"), L = k.arg("L");
  s.len = k.ifElse(
      k.arg("has_cu"), [&] { return std::vector<Value>{k.minimum(k.toIndex(k.load(cu, k.constInt(1) * sCu)), L)}; },
      [&] { return std::vector<Value>{L}; })[0];
  return s;
}

Value firstFinalSlot(KernelBuilder& k) {
  return k.ifElse(
      k.arg("has_fidx"),
      [&] { return std::vector<Value>{k.toIndex(k.load(k.arg("fidx"), k.constInt(0) * k.arg("s_fidx")))}; },
      [&] { return std::vector<Value>{k.constInt(0)}; })[0];
}

void setDecay(KernelBuilder& k, IncomingShare& s, Value slowestA, Value finite) {
  Value negInf = k.constFloat(-INFINITY);
  s.slowest = slowestA;
  s.decays = k.arg("softplus") && (k.reduce(k.select(s.mD, slowestA, negInf), 0, "max") <= k.constFloat(0)) && finite;
}

Value dtPrime(KernelBuilder& k, const IncomingShare& s, Value tE, Value m) {
  Value zero = k.constFloat(0);
  Value dE = k.expandDims(s.d, 1), mD = s.mD;
  Value bias = k.ifElse(
      k.arg("has_dbias"),
      [&] { return std::vector<Value>{k.expandDims(k.load(k.arg("dbias"), s.d * k.arg("s_dbias_d"), mD, zero), 1)}; },
      [&] {
        return std::vector<Value>{k.splat(zero, {s.d.shape()[0], 1})};
      })[0];
  Value dt = k.load(k.arg("delta"), dE * k.arg("s_delta_d") + tE * k.arg("s_delta_t"), m, zero) + bias;
  dt = k.ifElse(
      k.arg("softplus"), [&] { return std::vector<Value>{softplus(dt)}; }, [&] { return std::vector<Value>{dt}; })[0];
  return k.select(m, dt, zero);
}

std::vector<Value> cumulativeDt(KernelBuilder& k, const IncomingShare& s, Value tE, Value m, Value carry) {
  auto add = [](const std::vector<Value>& l, const std::vector<Value>& r) { return std::vector<Value>{l[0] + r[0]}; };
  return k.associativeScan({dtPrime(k, s, tE, m)}, 1, add, {carry});
}

std::vector<Value> walkShares(KernelBuilder& k, const IncomingShare& s, int64_t BT, Value lo, Value hi,
                              const std::vector<Value>& inits, const ShareTile& tile) {
  Value negInf = k.constFloat(-INFINITY), underflow = k.constFloat(kUnderflow2);
  return k.forLoop(lo, hi, k.constInt(BT), inits, [&](Value t0, const std::vector<Value>& carries) {
    // A NaN sum keeps the tile live (a NaN comparison is false).
    Value gone = s.decays && (k.reduce(k.select(s.mD, s.slowest * carries[0], negInf), 0, "max") < underflow);
    return k.ifElse(
        gone, [&] { return carries; }, [&] { return tile(t0, carries); });
  });
}

}  // namespace ssmjit::kernels
