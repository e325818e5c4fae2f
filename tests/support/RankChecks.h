// What the multi-GPU worker tests share (RankProcesses.h runs them): joining the other ranks,
// device views of buffers, and the error measure their fp32 results are held to.
#pragma once
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/DeviceBuffer.h"
#include "runtime/Driver.h"
#include "ssmjit/parallel.h"
#include "tests/support/RankProcesses.h"

namespace ssmjit::testing {

// fp32 results that differ from one GPU's only in the order of their sums.
constexpr double kRankBound = 1e-4;

inline std::unique_ptr<Communicator> join(const WorkerRank& w, std::vector<std::pair<std::string, std::string>> cfg,
                                          double timeout = 120) {
  CommunicatorOptions o;
  o.rank = w.rank;
  o.size = w.size;
  o.rendezvous = w.rendezvous;
  o.timeout_s = timeout;
  o.config = std::move(cfg);
  return Communicator::create(o);
}

// A view of `b` on the current device (the id the ops compare between tensors).
inline TensorView onDevice(const DeviceBuffer& b, DType t, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(b.data(), t, shape, DeviceKind::CUDA, driver::currentDeviceId());
}

// Worst |got - ref| / (|ref| + rms(ref)) over the rows of `ref` that `rows` selects (row i of got
// is row rows[i] of ref), `cols` columns each.
inline double worstError(const std::vector<float>& got, const std::vector<float>& ref, int64_t cols,
                         const std::vector<int64_t>& rows) {
  double sq = 0;
  for (float v : ref) sq += double(v) * v;
  const double rms = std::sqrt(sq / double(ref.size()));
  double worst = 0;
  for (size_t i = 0; i < rows.size(); ++i)
    for (int64_t c = 0; c < cols; ++c) {
      const double r = ref[rows[i] * cols + c], g = got[i * cols + c];
      worst = std::max(worst, std::isfinite(g) ? std::abs(g - r) / (std::abs(r) + rms) : INFINITY);
    }
  return worst;
}

// start, start + 1, ..., start + n - 1.
inline std::vector<int64_t> range(int64_t start, int64_t n) {
  std::vector<int64_t> r(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) r[i] = start + i;
  return r;
}

}  // namespace ssmjit::testing
