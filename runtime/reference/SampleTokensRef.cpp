// Float64 reference of sample_tokens (see ssmjit/reference.h and the contract in ssmjit/ops.h):
// the kept sets by sorting, the draw by a running sum in index order, the uniform from the same
// Philox function as the kernel (kernels_dsl/sample/Philox.h).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>

#include "kernels_dsl/sample/Philox.h"
#include "runtime/ops/SampleTokensCheck.h"
#include "runtime/reference/ElementAccess.h"
#include "ssmjit/reference.h"

namespace ssmjit::reference {
namespace {

constexpr double kLog2e = 1.4426950408889634;
constexpr double kLowest = -3.0e38, kHighest = 3.0e38;  // as the kernel's bounds on scaled logits

std::vector<double> argmaxOneHot(const std::vector<double>& x) {
  std::vector<double> p(x.size(), 0.0);
  size_t best = x.size();
  for (size_t v = 0; v < x.size(); ++v)
    if (!std::isnan(x[v]) && (best == x.size() || x[v] > x[best])) best = v;
  if (!p.empty()) p[best == x.size() ? 0 : best] = 1.0;
  return p;
}

// The lowest value of the `count` largest in `y` over `in`: everything at or above it is kept.
double thresholdOfTop(const std::vector<double>& y, const std::vector<bool>& in, size_t count) {
  std::vector<double> vals;
  for (size_t v = 0; v < y.size(); ++v)
    if (in[v]) vals.push_back(y[v]);
  std::sort(vals.begin(), vals.end(), std::greater<double>());
  return vals[std::min(count, vals.size()) - 1];
}

// An int64 step counter's entry, exactly.
void storeStep(const TensorView& step, int64_t off, int64_t v) {
  std::memcpy(static_cast<int64_t*>(step.data) + off, &v, sizeof v);
}

}  // namespace

double sample_uniform(uint64_t seed, int64_t key, int64_t step) {
  const int64_t w = kernels::philoxWord<int64_t>(static_cast<int64_t>(seed & 0xFFFFFFFFu),
                                                  static_cast<int64_t>(seed >> 32), key, step);
  return static_cast<double>(w / 256) * 0x1p-24;
}

std::vector<double> sample_probabilities(const std::vector<double>& x, double temperature, int top_k, double top_p) {
  if (temperature <= 0) return argmaxOneHot(x);
  const size_t V = x.size();
  std::vector<double> y(V, 0.0);
  std::vector<bool> in(V, false);
  double m = kLowest;
  for (size_t v = 0; v < V; ++v) {
    const double ys = x[v] * (kLog2e / temperature);  // NaN compares false: never drawable
    in[v] = ys > kLowest;
    y[v] = std::min(ys, kHighest);
    if (in[v]) m = std::max(m, y[v]);
  }
  std::vector<double> p(V, 0.0);
  const size_t drawable = static_cast<size_t>(std::count(in.begin(), in.end(), true));
  if (drawable == 0) return p;
  if (top_k > 0 && static_cast<size_t>(top_k) < V) {
    const double t = thresholdOfTop(y, in, static_cast<size_t>(top_k));
    for (size_t v = 0; v < V; ++v) in[v] = in[v] && y[v] >= t;
  }
  for (size_t v = 0; v < V; ++v) p[v] = in[v] ? std::exp2(y[v] - m) : 0.0;
  if (top_p < 1) {
    // The smallest prefix of the values, largest first, whose mass reaches top_p of the kept.
    const double total = std::accumulate(p.begin(), p.end(), 0.0);
    std::vector<size_t> order;
    for (size_t v = 0; v < V; ++v)
      if (in[v]) order.push_back(v);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return y[a] > y[b]; });
    double mass = 0, t = y[order.back()];
    for (size_t v : order) {
      mass += p[v];
      if (mass >= top_p * total) {
        t = y[v];
        break;
      }
    }
    for (size_t v = 0; v < V; ++v)
      if (y[v] < t) p[v] = 0.0;
  }
  const double total = std::accumulate(p.begin(), p.end(), 0.0);
  for (double& q : p) q /= total;
  return p;
}

int64_t sample_draw(const std::vector<double>& p, double u) {
  double run = 0;
  int64_t last = -1;
  for (size_t v = 0; v < p.size(); ++v) {
    if (p[v] <= 0) continue;
    run += p[v];
    last = static_cast<int64_t>(v);
    if (run > u) return last;
  }
  return std::max<int64_t>(last, 0);
}

void sample_tokens(const SampleArgs& a) {
  const detail::SampleDims d = detail::checkSampleArgs(a, DeviceKind::CPU, "reference::sample_tokens");
  if (d.batch == 0) return;
  const TensorView& L = a.logits;
  for (int64_t b = 0; b < d.batch; ++b) {
    const int64_t key =
        a.row_state_indices.defined() ? loadIndex(a.row_state_indices, b * a.row_state_indices.strides[0]) : b;
    if (key == -1) continue;
    std::vector<double> x(static_cast<size_t>(d.V));
    for (int64_t v = 0; v < d.V; ++v) x[v] = loadElement(L, b * L.strides[0] + v * L.strides[1]);
    const std::vector<double> p = sample_probabilities(x, a.temperature, a.top_k, a.top_p);
    double u = 0;
    if (!d.greedy) {
      const int64_t at = d.perRow ? b * a.step.strides[0] : 0, count = loadIndex(a.step, at);
      u = sample_uniform(a.seed, key, count);
      if (d.perRow) storeStep(a.step, at, count + 1);
    }
    storeElement(a.token_ids, b * a.token_ids.strides[0], static_cast<double>(sample_draw(p, u)));
  }
  if (!d.greedy && !d.perRow) storeStep(a.step, 0, loadIndex(a.step, 0) + 1);
}

}  // namespace ssmjit::reference
