// The float64 CPU reference of selective_scan (see ssmjit/reference.h).
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/ops/SelectiveScanCheck.h"
#include "runtime/reference/ElementAccess.h"
#include "runtime/reference/RefHelpers.h"
#include "runtime/reference/ScanSequences.h"
#include "ssmjit/error.h"
#include "ssmjit/reference.h"

namespace ssmjit::reference {
namespace {
constexpr const char* kOp = "reference::selective_scan";
}  // namespace

void selective_scan(const SelectiveScanArgs& a) {
  const detail::ScanDims d = detail::checkSelectiveScanArgs(a, DeviceKind::CPU, kOp);
  // Sequences (row, start, length), every check before anything is written.
  const ScanSequences q = scanSequences(kOp, a, d);
  const auto& [row, start, len] = q;
  std::vector<int64_t> in, fin;
  if (a.initial_states.defined())
    in = scanSlots(kOp, "initial_state_indices", a.initial_state_indices, d.nseq, d.initSlots);
  if (a.final_states.defined())
    fin = scanSlots(kOp, "final_state_indices", a.final_state_indices, d.nseq, d.finalSlots);

  // Every initial state is read before any final state is written (in-place updates).
  std::vector<double> h(at(d.nseq * d.D * d.N), 0.0);
  auto H = [&](int64_t i, int64_t ch, int64_t n) -> double& { return h[at((i * d.D + ch) * d.N + n)]; };
  if (!in.empty())
    for (int64_t i = 0; i < d.nseq; ++i)
      if (in[at(i)] >= 0)
        for (int64_t ch = 0; ch < d.D; ++ch)
          for (int64_t n = 0; n < d.N; ++n) H(i, ch, n) = el(a.initial_states, {in[at(i)], ch, n});

  const int64_t per = d.D / d.G;
  auto bc = [&](const TensorView& t, bool varying, int64_t r, int64_t ch, int64_t n, int64_t tok) {
    return varying ? el(t, {r, ch / per, n, tok}) : el(t, {ch, n});
  };
  for (int64_t i = 0; i < d.nseq; ++i) {
    const int64_t r = row[at(i)];
    for (int64_t ch = 0; ch < d.D; ++ch)
      for (int64_t t = 0; t < len[at(i)]; ++t) {
        const int64_t tok = start[at(i)] + t;
        const double u = el(a.u, {r, ch, tok});
        double dt = el(a.delta, {r, ch, tok}) + (a.delta_bias.defined() ? el(a.delta_bias, {ch}) : 0.0);
        if (a.delta_softplus) dt = dt > 20.0 ? dt : std::log1p(std::exp(dt));
        double y = a.D.defined() ? el(a.D, {ch}) * u : 0.0;
        for (int64_t n = 0; n < d.N; ++n) {
          double& s = H(i, ch, n);
          s = std::exp(dt * el(a.A, {ch, n})) * s + dt * bc(a.B, d.bVarying, r, ch, n, tok) * u;
          y += bc(a.C, d.cVarying, r, ch, n, tok) * s;
        }
        if (a.z.defined()) {
          const double z = el(a.z, {r, ch, tok});
          y *= z / (1.0 + std::exp(-z));
        }
        const TensorView& o = a.out;
        storeElement(o, r * o.strides[0] + ch * o.strides[1] + tok * o.strides[2], y);
      }
  }
  if (!fin.empty())
    for (int64_t i = 0; i < d.nseq; ++i)
      if (fin[at(i)] >= 0)
        for (int64_t ch = 0; ch < d.D; ++ch)
          for (int64_t n = 0; n < d.N; ++n) {
            const TensorView& f = a.final_states;
            storeElement(f, fin[at(i)] * f.strides[0] + ch * f.strides[1] + n * f.strides[2], H(i, ch, n));
          }
}

}  // namespace ssmjit::reference
