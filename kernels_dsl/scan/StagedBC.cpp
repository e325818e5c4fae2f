#include "kernels_dsl/scan/StagedBC.h"

#include <algorithm>

namespace ssmjit::kernels {
using namespace dsl;

namespace {
// A row's token t sits at t + 4 (t / 32): the lanes of a quarter-warp read their runs (BT /
// time_lanes tokens, 16 bytes an access) from distinct banks; unpadded, runs of 8 tokens put
// lanes l and l + 4 on the same banks.
int64_t rowStrideFor(int64_t BT) { return BT + BT / 32 * 4; }
}  // namespace

bool StagedBC::fits(int64_t N, int64_t BT, int64_t sets) {
  return sets * N * rowStrideFor(BT) <= kMaxSharedBufferFloats;
}

StagedBC::StagedBC(KernelBuilder& k, int64_t N, int64_t BD, int64_t BT, bool stageB, bool stageC, Value g0, Value row,
                   Source b, Source c)
    : k_(k),
      N_(N),
      BD_(BD),
      BT_(BT),
      RS_(std::max(nextPow2(N), BD)),
      rowStride_(rowStrideFor(BT)),
      rowC_(stageB ? N : 0),
      stageB_(stageB),
      stageC_(stageC),
      g0_(g0),
      row_(row),
      b_(b),
      c_(c) {
  if (!any()) return;
  smem_ = k.sharedBuffer((rowC_ + (stageC ? N : 0)) * rowStride_);
  Value rT = k.range(BT);
  padT_ = k.expandDims(rT + (rT / 32) * 4, 0);  // [1, BT]: a token's place in its row
  rS_ = k.expandDims(k.range(RS_), 1);          // [RS, 1]; rows >= N masked
  if (RS_ != N) rowMask_ = k.broadcastTo(rS_ < N, {RS_, BT});
}

Value StagedBC::base(const Source& s) const { return row_ * s.sRow + g0_ * s.sGroup + rS_ * s.sN; }

void StagedBC::queue(PackedRuns& runs) const {
  if (stageB_) runs.load(b_.ptr, base(b_), rowMask_);
  if (stageC_) runs.load(c_.ptr, base(c_), rowMask_);
}

void StagedBC::store(Value v, bool c) {
  Value sOff = (rS_ + (c ? rowC_ : 0)) * rowStride_ + padT_;
  k_.store(smem_, sOff, v, rowMask_);
}

std::vector<Value> StagedBC::load(Value tokMask, Value tOff) const {
  Value m = tokMask.valid() ? (rowMask_.valid() ? rowMask_ && tokMask : k_.broadcastTo(tokMask, {RS_, BT_})) : rowMask_;
  std::vector<Value> rows;
  for (const Source* s : {stageB_ ? &b_ : nullptr, stageC_ ? &c_ : nullptr}) {
    if (!s) continue;
    Value off = base(*s) + tOff;
    rows.push_back(m.valid() ? k_.load(s->ptr, off, m, k_.constFloat(0)) : k_.load(s->ptr, off));
  }
  return rows;
}

void StagedBC::fill(const std::vector<Value>& queued, Value tokMask, Value tOff) {
  if (!any()) return;
  k_.barrier();  // the previous tile's reads of the buffer are done
  const std::vector<Value> rows = queued.empty() ? load(tokMask, tOff) : queued;
  if (stageB_) store(rows[0], false);
  if (stageC_) store(rows[stageB_ ? 1 : 0], true);
  k_.barrier();
}

Value StagedBC::row(int64_t n, bool c) const {
  return k_.load(smem_, k_.broadcastTo(padT_ + (n + (c ? rowC_ : 0)) * rowStride_, {BD_, BT_}));
}

Value StagedBC::row(Value n, bool c) const {
  return k_.load(smem_, k_.broadcastTo(padT_ + (n + (c ? rowC_ : 0)) * rowStride_, {BD_, BT_}));
}

}  // namespace ssmjit::kernels
