#include "kernels_dsl/PackedRuns.h"

#include <functional>

namespace ssmjit::kernels {
using namespace dsl;

PackedRuns::PackedRuns(KernelBuilder& k, Value ts, int64_t BT, int64_t run) : k_(k), BT_(BT), run_(run) {
  a0_ = (ts / run) * run;
  sh_ = ts - a0_;
}

void PackedRuns::load(Value p, Value base, Value mask) {
  Value rT = k_.range(BT_);
  Value off = base + (a0_ + k_.expandDims(rT, 0));
  // Only the first run's lanes supply the run after the tile (shift's fill).
  Value firstRun = k_.broadcastTo(k_.expandDims(rT < run_, 0), off.shape());
  Value zero = k_.constFloat(0);
  cur_.push_back(mask.valid() ? k_.load(p, off, mask, zero) : k_.load(p, off));
  fill_.push_back(k_.load(p, off + BT_, mask.valid() ? mask && firstRun : firstRun, zero));
}

std::vector<Value> PackedRuns::realign() const {
  std::function<std::vector<Value>(int64_t)> from = [&](int64_t s) {
    auto moved = [&, s] {
      std::vector<Value> r;
      for (size_t x = 0; x < cur_.size(); ++x)
        r.push_back(s == 0 ? cur_[x] : k_.shift(cur_[x], fill_[x], 1, static_cast<int>(-s)));
      return r;
    };
    if (s == run_ - 1) return moved();
    return k_.ifElse(sh_ == s, moved, [&, s] { return from(s + 1); });
  };
  return from(0);
}

}  // namespace ssmjit::kernels
