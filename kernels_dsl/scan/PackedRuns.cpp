#include "kernels_dsl/scan/PackedRuns.h"

#include <functional>

namespace ssmjit::kernels {
using namespace dsl;

PackedRuns::PackedRuns(KernelBuilder& k, Value ts, int64_t BT, int64_t run, Value rowEnd, bool perRow)
    : k_(k), BT_(BT), run_(run), perRow_(perRow), ts_(ts), rowEnd_(rowEnd) {
  a0_ = (ts / run) * run;
  sh_ = ts - a0_;
}

void PackedRuns::load(Value p, Value base, Value mask) {
  Value t = k_.expandDims(k_.range(BT_), 0);  // [1, BT]
  Value at, aligned;                          // perRow: [R, 1], the row's token ts and its run's start
  if (perRow_) {
    at = base + ts_, aligned = (at / run_) * run_;
  } else {
    t = a0_ + t;  // constant along a run when rowEnd's divisor is, so the loads stay vectors
  }
  Value off = perRow_ ? aligned + t : base + t;
  auto masked = [&](Value o, Value tok) {
    Value m = mask;
    if (rowEnd_.valid()) {
      Value inRow = k_.broadcastTo(tok < rowEnd_, o.shape());
      m = m.valid() ? m && inRow : inRow;
    }
    return m.valid() ? k_.load(p, o, m, k_.constFloat(0)) : k_.load(p, o);
  };
  cur_.push_back(masked(off, t));
  next_.push_back(masked(off + run_, t + run_));
  if (perRow_) rowSh_.push_back(at - aligned);
}

std::vector<Value> PackedRuns::realign() const {
  if (perRow_) {  // shifts by run/2, .., 2, 1 where the row's sh has that bit
    std::vector<Value> r;
    for (size_t x = 0; x < cur_.size(); ++x) {
      Value cur = cur_[x], next = next_[x];
      for (int64_t b = run_ / 2; b >= 1; b /= 2) {
        Value on = k_.broadcastTo((rowSh_[x] / b) % 2 == 1, cur.shape());
        const int s = static_cast<int>(-b), p = static_cast<int>(run_);
        Value moved = k_.shift(cur, next, 1, s, p);
        // next's places moved in from past it are never read: the shifts add up to sh < run.
        if (b > 1) next = k_.select(on, k_.shift(next, next, 1, s, p), next);
        cur = k_.select(on, moved, cur);
      }
      r.push_back(cur);
    }
    return r;
  }
  std::function<std::vector<Value>(int64_t)> from = [&](int64_t s) {
    auto moved = [&, s] {
      std::vector<Value> r;
      for (size_t x = 0; x < cur_.size(); ++x)
        r.push_back(s == 0 ? cur_[x] : k_.shift(cur_[x], next_[x], 1, static_cast<int>(-s), static_cast<int>(run_)));
      return r;
    };
    if (s == run_ - 1) return moved();
    return k_.ifElse(sh_ == s, moved, [&, s] { return from(s + 1); });
  };
  return from(0);
}

}  // namespace ssmjit::kernels
