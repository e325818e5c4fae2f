#include "kernels_dsl/scan/PackedRuns.h"

#include <functional>

namespace ssmjit::kernels {
using namespace dsl;

PackedRuns::PackedRuns(KernelBuilder& k, Value ts, int64_t BT, int64_t run, Value rowEnd)
    : k_(k), BT_(BT), run_(run), rowEnd_(rowEnd) {
  a0_ = (ts / run) * run;
  sh_ = ts - a0_;
}

void PackedRuns::load(Value p, Value base, Value mask) {
  Value t = a0_ + k_.expandDims(k_.range(BT_), 0);  // [1, BT]: constant along a run when rowEnd's
                                                    // divisor is, so the loads stay vectors
  Value off = base + t;
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
}

std::vector<Value> PackedRuns::realign() const {
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
