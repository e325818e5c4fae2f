// The float64 CPU reference of the causal-conv1d ops (see ssmjit/reference.h).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/ops/CausalConv1dCheck.h"
#include "runtime/reference/ElementAccess.h"
#include "ssmjit/error.h"
#include "ssmjit/reference.h"

namespace ssmjit::reference {
namespace {

[[noreturn]] void invalid(const char* op, const std::string& msg) {
  throw Error(Error::Kind::InvalidArgument, std::string(op) + ": " + msg);
}

double act(double v, bool silu) { return silu ? v / (1.0 + std::exp(-v)) : v; }

// The slot of each of `n` sequences: idx[i] (checked against [0, S) or -1), or i.
std::vector<int64_t> slotsOf(const char* op, const char* name, const char* minusOne,
                             const TensorView& idx, int64_t n, int64_t S) {
  std::vector<int64_t> s(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t v = idx.defined() ? loadIndex(idx, i * idx.strides[0]) : i;
    if (v != -1 && (v < 0 || v >= S))
      invalid(op, std::string(name) + "[" + std::to_string(i) + "] = " + std::to_string(v) +
                      ", expected -1 (" + minusOne + ") or a slot in [0, " + std::to_string(S) +
                      ")");
    s[static_cast<size_t>(i)] = v;
  }
  return s;
}

}  // namespace

void causal_conv1d(const CausalConv1dArgs& a) {
  const char* op = "reference::causal_conv1d";
  const detail::ConvDims d = detail::checkConv1dArgs(a, DeviceKind::CPU, op);
  const int64_t W = d.W, K = d.W - 1;
  const int tAx = d.channelLast ? 1 : 2, dAx = d.channelLast ? 2 : 1;
  auto xOff = [&](const TensorView& t, int64_t b, int64_t tok, int64_t ch) {
    return b * t.strides[0] + tok * t.strides[tAx] + ch * t.strides[dAx];
  };
  auto stOff = [](const TensorView& t, int64_t slot, int64_t ch, int64_t j) {
    return slot * t.strides[0] + ch * t.strides[1] + j * t.strides[2];
  };

  // ----- every index first, so that a bad one throws before anything is written
  struct Seq {
    int64_t row, start, len;
  };
  std::vector<Seq> seqs;
  if (d.packedCu) {
    const TensorView& cu = a.cu_seqlens;
    std::vector<int64_t> c(static_cast<size_t>(d.nseq + 1));
    for (int64_t i = 0; i <= d.nseq; ++i) c[static_cast<size_t>(i)] = loadIndex(cu, i * cu.strides[0]);
    if (c[0] != 0)
      invalid(op, "cu_seqlens[0] = " + std::to_string(c[0]) + ", expected 0 (the first sequence "
                  "starts at token 0)");
    for (int64_t i = 1; i <= d.nseq; ++i)
      if (c[static_cast<size_t>(i)] <= c[static_cast<size_t>(i - 1)])
        invalid(op, "cu_seqlens[" + std::to_string(i) + "] = " +
                        std::to_string(c[static_cast<size_t>(i)]) + ", expected more than cu_seqlens[" +
                        std::to_string(i - 1) + "] = " + std::to_string(c[static_cast<size_t>(i - 1)]) +
                        " (strictly increasing: every sequence has at least one token)");
    if (c[static_cast<size_t>(d.nseq)] != d.L)
      invalid(op, "cu_seqlens[" + std::to_string(d.nseq) + "] = " +
                      std::to_string(c[static_cast<size_t>(d.nseq)]) + ", expected T = " +
                      std::to_string(d.L) + " (x's seqlen: the sequences cover the row)");
    for (int64_t i = 0; i < d.nseq; ++i)
      seqs.push_back({0, c[static_cast<size_t>(i)], c[static_cast<size_t>(i + 1)] - c[static_cast<size_t>(i)]});
  } else if (!d.packedPos) {
    for (int64_t b = 0; b < d.batch; ++b) seqs.push_back({b, 0, d.L});
  }
  const bool hasInit = a.initial_states.defined(), hasFinal = a.final_states.defined();
  std::vector<int64_t> initSlot, finalSlot;
  if (hasInit)
    initSlot = slotsOf(op, "initial_state_indices", "zeros", a.initial_state_indices, d.nseq,
                       d.initSlots);
  if (hasFinal)
    finalSlot = slotsOf(op, "final_state_indices", "not written", a.final_state_indices, d.nseq,
                        d.finalSlots);

  // ----- out and the final states, from the inputs only
  std::vector<double> wt(static_cast<size_t>(W)), outv(static_cast<size_t>(d.batch * d.L * d.D));
  auto outIdx = [&](int64_t b, int64_t tok, int64_t ch) {
    return static_cast<size_t>((b * d.L + tok) * d.D + ch);
  };
  auto loadWeights = [&](int64_t ch) {
    for (int64_t k = 0; k < W; ++k)
      wt[static_cast<size_t>(k)] =
          loadElement(a.weight, ch * a.weight.strides[0] + k * a.weight.strides[1]);
    return a.bias.defined() ? loadElement(a.bias, ch * a.bias.strides[0]) : 0.0;
  };
  if (d.packedPos) {
    const TensorView& pos = a.seq_pos;
    std::vector<int64_t> p(static_cast<size_t>(d.L));
    for (int64_t t = 0; t < d.L; ++t) p[static_cast<size_t>(t)] = loadIndex(pos, t * pos.strides[1]);
    for (int64_t ch = 0; ch < d.D; ++ch) {
      const double bias = loadWeights(ch);
      for (int64_t t = 0; t < d.L; ++t) {
        double acc = bias;
        for (int64_t k = 0; k < W; ++k) {
          const int64_t back = K - k;  // taps back from token t
          const int64_t src = t - back;
          const bool inSeq = back == 0 || (back <= p[static_cast<size_t>(t)] && src >= 0);
          const double v = inSeq ? loadElement(a.x, xOff(a.x, 0, src, ch)) : 0.0;
          acc += wt[static_cast<size_t>(k)] * v;
        }
        outv[outIdx(0, t, ch)] = act(acc, a.silu);
      }
    }
  }

  // Final states per sequence: [seq][ch][j].
  std::vector<double> finalv(hasFinal ? seqs.size() * static_cast<size_t>(d.D * K) : 0);
  for (size_t i = 0; i < seqs.size(); ++i) {
    const Seq& s = seqs[i];
    const int64_t islot = hasInit ? initSlot[i] : -1;
    // xx(p): position p of the sequence (p < 0: its initial state, or 0).
    auto xx = [&](int64_t ch, int64_t p) {
      if (p >= 0) return loadElement(a.x, xOff(a.x, s.row, s.start + p, ch));
      if (islot < 0) return 0.0;
      return loadElement(a.initial_states, stOff(a.initial_states, islot, ch, K + p));
    };
    for (int64_t ch = 0; ch < d.D; ++ch) {
      const double bias = loadWeights(ch);
      for (int64_t t = 0; t < s.len; ++t) {
        double acc = bias;
        for (int64_t k = 0; k < W; ++k) acc += wt[static_cast<size_t>(k)] * xx(ch, t - K + k);
        outv[outIdx(s.row, s.start + t, ch)] = act(acc, a.silu);
      }
      if (hasFinal)
        for (int64_t j = 0; j < K; ++j)
          finalv[(i * static_cast<size_t>(d.D) + static_cast<size_t>(ch)) * static_cast<size_t>(K) +
                 static_cast<size_t>(j)] = xx(ch, s.len - K + j);
    }
  }

  // ----- the writes
  for (int64_t b = 0; b < d.batch; ++b)
    for (int64_t t = 0; t < d.L; ++t)
      for (int64_t ch = 0; ch < d.D; ++ch)
        storeElement(a.out, xOff(a.out, b, t, ch), outv[outIdx(b, t, ch)]);
  if (hasFinal)
    for (size_t i = 0; i < seqs.size(); ++i) {
      const int64_t fs = finalSlot[i];
      if (fs < 0) continue;
      for (int64_t ch = 0; ch < d.D; ++ch)
        for (int64_t j = 0; j < K; ++j)
          storeElement(a.final_states, stOff(a.final_states, fs, ch, j),
                       finalv[(i * static_cast<size_t>(d.D) + static_cast<size_t>(ch)) *
                                  static_cast<size_t>(K) +
                              static_cast<size_t>(j)]);
    }
}

void causal_conv1d_update(const CausalConv1dUpdateArgs& a) {
  const char* op = "reference::causal_conv1d_update";
  const detail::ConvUpdateDims d = detail::checkConv1dUpdateArgs(a, DeviceKind::CPU, op);
  const int64_t W = d.W, K = d.W - 1;
  const TensorView& st = a.conv_state;
  const std::vector<int64_t> slots =
      slotsOf(op, "state_indices", "pad", a.state_indices, d.batch, d.S);
  auto xOff = [](const TensorView& t, int64_t b, int64_t tok, int64_t ch) {
    return b * t.strides[0] + tok * t.strides[1] + ch * t.strides[2];
  };
  std::vector<double> win(static_cast<size_t>(K)), wt(static_cast<size_t>(W));
  for (int64_t b = 0; b < d.batch; ++b) {
    const int64_t s = slots[static_cast<size_t>(b)];
    if (s == -1) continue;  // pad row: nothing read, nothing written
    for (int64_t ch = 0; ch < d.D; ++ch) {
      for (int64_t k = 0; k < W; ++k)
        wt[static_cast<size_t>(k)] =
            loadElement(a.weight, ch * a.weight.strides[0] + k * a.weight.strides[1]);
      const double bias = a.bias.defined() ? loadElement(a.bias, ch * a.bias.strides[0]) : 0.0;
      for (int64_t j = 0; j < K; ++j)
        win[static_cast<size_t>(j)] =
            loadElement(st, s * st.strides[0] + ch * st.strides[1] + j * st.strides[2]);
      for (int64_t t = 0; t < d.L; ++t) {
        const double xv = loadElement(a.x, xOff(a.x, b, t, ch));
        double acc = bias;
        for (int64_t k = 0; k < K; ++k) acc += wt[static_cast<size_t>(k)] * win[static_cast<size_t>(k)];
        acc += wt[static_cast<size_t>(K)] * xv;
        storeElement(a.out, xOff(a.out, b, t, ch), act(acc, a.silu));
        for (int64_t k = 0; k + 1 < K; ++k) win[static_cast<size_t>(k)] = win[static_cast<size_t>(k + 1)];
        win[static_cast<size_t>(K - 1)] = xv;
      }
      if (a.commit)
        for (int64_t j = 0; j < K; ++j)
          storeElement(st, s * st.strides[0] + ch * st.strides[1] + j * st.strides[2],
                       win[static_cast<size_t>(j)]);
    }
  }
}

}  // namespace ssmjit::reference
