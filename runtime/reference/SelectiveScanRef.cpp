// The float64 CPU reference of selective_scan (see ssmjit/reference.h).
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/ops/SelectiveScanCheck.h"
#include "runtime/reference/ElementAccess.h"
#include "ssmjit/error.h"
#include "ssmjit/reference.h"

namespace ssmjit::reference {
namespace {

constexpr const char* kOp = "reference::selective_scan";
[[noreturn]] void invalid(const std::string& msg) { throw Error(Error::Kind::InvalidArgument, std::string(kOp) + ": " + msg); }
size_t at(int64_t i) { return static_cast<size_t>(i); }
double el(const TensorView& t, std::initializer_list<int64_t> idx) {
  int64_t off = 0, k = 0;
  for (int64_t i : idx) off += i * t.strides[k++];
  return loadElement(t, off);
}

// Each sequence's slot: idx[i] (in [0, S) or -1), or i.
std::vector<int64_t> slotsOf(const char* name, const TensorView& idx, int64_t n, int64_t S) {
  std::vector<int64_t> s(at(n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t v = idx.defined() ? loadIndex(idx, i * idx.strides[0]) : i;
    if (v != -1 && (v < 0 || v >= S))
      invalid(std::string(name) + "[" + std::to_string(i) + "] = " + std::to_string(v) + ", expected -1 or a slot in [0, " +
              std::to_string(S) + ")");
    s[at(i)] = v;
  }
  return s;
}

}  // namespace

void selective_scan(const SelectiveScanArgs& a) {
  const detail::ScanDims d = detail::checkSelectiveScanArgs(a, DeviceKind::CPU, kOp);
  // Sequences (row, start, length), every check before anything is written.
  std::vector<int64_t> row(at(d.nseq)), start(at(d.nseq)), len(at(d.nseq));
  for (int64_t i = 0; i < d.nseq; ++i) {
    if (!d.packed) {
      row[at(i)] = i, start[at(i)] = 0, len[at(i)] = d.L;
      continue;
    }
    const TensorView& cu = a.cu_seqlens;
    const int64_t s = loadIndex(cu, i * cu.strides[0]), e = loadIndex(cu, (i + 1) * cu.strides[0]);
    const std::string at0 = "cu_seqlens[" + std::to_string(i) + "] = " + std::to_string(s);
    const std::string at1 = "cu_seqlens[" + std::to_string(i + 1) + "] = " + std::to_string(e);
    if (i == 0 && s != 0) invalid(at0 + ", expected 0");
    if (e <= s) invalid(at1 + " after " + at0 + ", expected strictly increasing entries (no empty sequence)");
    if (i == d.nseq - 1 && e != d.L)
      invalid(at1 + " (the last entry), expected T = " + std::to_string(d.L) + " (u's seqlen)");
    if (a.max_seqlen > 0 && e - s > a.max_seqlen)
      invalid("sequence " + std::to_string(i) + " has " + std::to_string(e - s) + " tokens, expected at most max_seqlen = " +
              std::to_string(a.max_seqlen));
    row[at(i)] = 0, start[at(i)] = s, len[at(i)] = e - s;
  }
  std::vector<int64_t> in, fin;
  if (a.initial_states.defined()) in = slotsOf("initial_state_indices", a.initial_state_indices, d.nseq, d.initSlots);
  if (a.final_states.defined()) fin = slotsOf("final_state_indices", a.final_state_indices, d.nseq, d.finalSlots);

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
