// The float64 CPU references of the causal-conv1d ops (see ssmjit/reference.h).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/ops/CausalConv1dCheck.h"
#include "runtime/reference/ElementAccess.h"
#include "runtime/reference/RefHelpers.h"
#include "ssmjit/error.h"
#include "ssmjit/reference.h"

namespace ssmjit::reference {
namespace {

double act(double v, bool silu) { return silu ? v / (1.0 + std::exp(-v)) : v; }
// act'(v): SiLU' = s (1 + v (1 - s)) with s = sigmoid(v).
double actGrad(double v, bool silu) {
  if (!silu) return 1.0;
  const double s = 1.0 / (1.0 + std::exp(-v));
  return s * (1.0 + v * (1.0 - s));
}

// The slot of each of `n` sequences: idx[i] (checked against [0, S) or -1), or i.
std::vector<int64_t> slotsOf(const char* op, const char* name, const char* minusOne, const TensorView& idx, int64_t n,
                             int64_t S) {
  std::vector<int64_t> s(at(n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t v = idx.defined() ? loadIndex(idx, i * idx.strides[0]) : i;
    if (v != -1 && (v < 0 || v >= S))
      invalid(op, std::string(name) + "[" + std::to_string(i) + "] = " + std::to_string(v) + ", expected -1 (" +
                      minusOne + ") or a slot in [0, " + std::to_string(S) + ")");
    s[at(i)] = v;
  }
  return s;
}

// What one tap of a window reads: x at (row, token idx), column idx of initial-state slot `row`,
// or nothing (a zero: before a sequence without an initial state, or beyond a token's position).
struct Loc {
  enum Kind : uint8_t { None, X, State } kind = None;
  int64_t row = 0, idx = 0;
};

// The windows of one call, shared by the forward and the backward (the backward is the forward's
// transpose: each tap's read becomes a gradient write to the same place). The constructor reads
// and checks cu_seqlens and the initial-state slots, so a bad one throws before anything is
// written. Args: CausalConv1dArgs or CausalConv1dBackwardArgs (the same input fields).
class Windows {
 public:
  template <class Args>
  Windows(const char* op, const detail::ConvDims& d, const Args& a)
      : d_(d), K_(d.W - 1), x_(a.x), weight_(a.weight), bias_(a.bias), init_(a.initial_states), wt_(at(d.W)) {
    tAx_ = d.channelLast ? 1 : 2;
    dAx_ = d.channelLast ? 2 : 1;
    if (d.packedCu) {
      readCuSeqlens(op, a.cu_seqlens);
    } else if (d.packedPos) {
      pos_.resize(at(d.L));
      for (int64_t t = 0; t < d.L; ++t) {
        pos_[at(t)] = loadIndex(a.seq_pos, t * a.seq_pos.strides[1]);
        const int64_t prior = t > 0 ? pos_[at(t - 1)] : -1;
        if (pos_[at(t)] != 0 && pos_[at(t)] != prior + 1)
          invalid(op, "seq_pos[0, " + std::to_string(t) + "] = " + std::to_string(pos_[at(t)]) +
                          (t > 0 ? " after " + std::to_string(prior) : std::string(" at token 0")) +
                          ", expected 0 (a sequence start) or one more than the token before");
      }
    } else {
      for (int64_t b = 0; b < d.batch; ++b) seqs_.push_back({b, 0, d.L});
    }
    if (init_.defined())
      initSlot_ = slotsOf(op, "initial_state_indices", "zeros", a.initial_state_indices, d.nseq, d.initSlots);
  }

  // Offsets of tensors in x's layout and of conv states.
  int64_t xOff(const TensorView& t, int64_t b, int64_t tok, int64_t ch) const {
    return b * t.strides[0] + tok * t.strides[tAx_] + ch * t.strides[dAx_];
  }
  static int64_t stOff(const TensorView& t, int64_t slot, int64_t ch, int64_t j) {
    return slot * t.strides[0] + ch * t.strides[1] + j * t.strides[2];
  }

  // Writes value(b, tok, ch) to every element of t (shaped as x), and value(ch, j) to slot `slot`
  // of the conv states t.
  template <class F>
  void storeLikeX(const TensorView& t, F value) const {
    for (int64_t b = 0; b < d_.batch; ++b)
      for (int64_t tok = 0; tok < d_.L; ++tok)
        for (int64_t ch = 0; ch < d_.D; ++ch) storeElement(t, xOff(t, b, tok, ch), value(b, tok, ch));
  }
  template <class F>
  void storeState(const TensorView& t, int64_t slot, F value) const {
    for (int64_t ch = 0; ch < d_.D; ++ch)
      for (int64_t j = 0; j < K_; ++j) storeElement(t, stOff(t, slot, ch, j), value(ch, j));
  }

  // Sequences (none with seq_pos) and the initial slot each reads (-1: zeros, or no states).
  size_t sequences() const { return seqs_.size(); }
  int64_t initSlot(size_t i) const { return initSlot_.empty() ? -1 : initSlot_[i]; }

  // Calls f(row, tok, taps) for every token, row by row in token order; taps[k] is where tap k
  // of its window reads (position tok - (W-1) + k).
  template <class F>
  void forEachToken(F f) const {
    Loc taps[kMaxConvWidth];
    if (d_.packedPos) {
      for (int64_t t = 0; t < d_.L; ++t) {
        for (int64_t k = 0; k <= K_; ++k) {
          const int64_t back = K_ - k;  // a token at position p sees p tokens before it
          const bool inSeq = back == 0 || (back <= pos_[at(t)] && t - back >= 0);
          taps[k] = inSeq ? Loc{Loc::X, 0, t - back} : Loc{};
        }
        f(int64_t{0}, t, taps);
      }
      return;
    }
    for (size_t i = 0; i < seqs_.size(); ++i)
      for (int64_t t = 0; t < seqs_[i].len; ++t) {
        for (int64_t k = 0; k <= K_; ++k) taps[k] = position(i, t - K_ + k);
        f(seqs_[i].row, seqs_[i].start + t, taps);
      }
  }

  // Where column j of sequence i's final state reads: position len - (W-1) + j.
  Loc finalColumn(size_t i, int64_t j) const { return position(i, seqs_[i].len - K_ + j); }

  // Channel ch's weights and bias, for pre() and weight().
  void loadChannel(int64_t ch) {
    for (int64_t k = 0; k <= K_; ++k)
      wt_[at(k)] = loadElement(weight_, ch * weight_.strides[0] + k * weight_.strides[1]);
    biasV_ = bias_.defined() ? loadElement(bias_, ch * bias_.strides[0]) : 0.0;
  }
  double weight(int64_t k) const { return wt_[at(k)]; }

  double value(int64_t ch, Loc l) const {
    if (l.kind == Loc::X) return loadElement(x_, xOff(x_, l.row, l.idx, ch));
    if (l.kind == Loc::State) return loadElement(init_, stOff(init_, l.row, ch, l.idx));
    return 0.0;
  }
  // The pre-activation of channel ch (loaded) at a token: bias + sum_k w[k] * tap k.
  double pre(int64_t ch, const Loc* taps) const {
    double acc = biasV_;
    for (int64_t k = 0; k <= K_; ++k) acc += wt_[at(k)] * value(ch, taps[k]);
    return acc;
  }

 private:
  struct Seq {
    int64_t row, start, len;
  };

  // Position p of sequence i (p < 0: its initial state, or nothing).
  Loc position(size_t i, int64_t p) const {
    const Seq& s = seqs_[i];
    if (p >= 0) return {Loc::X, s.row, s.start + p};
    const int64_t slot = initSlot(i);
    return slot < 0 ? Loc{} : Loc{Loc::State, slot, K_ + p};
  }

  void readCuSeqlens(const char* op, const TensorView& cu) {
    std::vector<int64_t> c(at(d_.nseq + 1));
    for (int64_t i = 0; i <= d_.nseq; ++i) c[at(i)] = loadIndex(cu, i * cu.strides[0]);
    if (c[0] != 0)
      invalid(op, "cu_seqlens[0] = " + std::to_string(c[0]) +
                      ", expected 0 (the first sequence "
                      "starts at token 0)");
    for (int64_t i = 1; i <= d_.nseq; ++i)
      if (c[at(i)] <= c[at(i - 1)])
        invalid(op, "cu_seqlens[" + std::to_string(i) + "] = " + std::to_string(c[at(i)]) +
                        ", expected more than cu_seqlens[" + std::to_string(i - 1) + "] = " +
                        std::to_string(c[at(i - 1)]) + " (strictly increasing: every sequence has at least one token)");
    if (c[at(d_.nseq)] != d_.L)
      invalid(op, "cu_seqlens[" + std::to_string(d_.nseq) + "] = " + std::to_string(c[at(d_.nseq)]) +
                      ", expected T = " + std::to_string(d_.L) + " (x's seqlen: the sequences cover the row)");
    for (int64_t i = 0; i < d_.nseq; ++i) seqs_.push_back({0, c[at(i)], c[at(i + 1)] - c[at(i)]});
  }

  const detail::ConvDims d_;
  int64_t K_;
  int tAx_ = 2, dAx_ = 1;
  TensorView x_, weight_, bias_, init_;
  std::vector<Seq> seqs_;
  std::vector<int64_t> pos_, initSlot_;
  std::vector<double> wt_;
  double biasV_ = 0.0;
};

}  // namespace

void causal_conv1d(const CausalConv1dArgs& a) {
  const char* op = "reference::causal_conv1d";
  const detail::ConvDims d = detail::checkConv1dArgs(a, DeviceKind::CPU, op);
  const int64_t K = d.W - 1;
  // Every index first, so that a bad one throws before anything is written.
  Windows win(op, d, a);
  const bool hasFinal = a.final_states.defined();
  std::vector<int64_t> finalSlot;
  if (hasFinal)
    finalSlot = slotsOf(op, "final_state_indices", "not written", a.final_state_indices, d.nseq, d.finalSlots);

  // out and the final states ([seq][ch][j]), from the inputs only.
  std::vector<double> outv(at(d.batch * d.L * d.D));
  auto outIdx = [&](int64_t b, int64_t tok, int64_t ch) { return at((b * d.L + tok) * d.D + ch); };
  std::vector<double> finalv(hasFinal ? win.sequences() * at(d.D * K) : 0);
  auto finalIdx = [&](size_t i, int64_t ch, int64_t j) { return (i * at(d.D) + at(ch)) * at(K) + at(j); };
  for (int64_t ch = 0; ch < d.D; ++ch) {
    win.loadChannel(ch);
    win.forEachToken(
        [&](int64_t b, int64_t tok, const Loc* taps) { outv[outIdx(b, tok, ch)] = act(win.pre(ch, taps), a.silu); });
    if (hasFinal)
      for (size_t i = 0; i < win.sequences(); ++i)
        for (int64_t j = 0; j < K; ++j) finalv[finalIdx(i, ch, j)] = win.value(ch, win.finalColumn(i, j));
  }

  // The writes.
  win.storeLikeX(a.out, [&](int64_t b, int64_t t, int64_t ch) { return outv[outIdx(b, t, ch)]; });
  if (hasFinal)
    for (size_t i = 0; i < win.sequences(); ++i) {
      const int64_t fs = finalSlot[i];
      if (fs < 0) continue;
      win.storeState(a.final_states, fs, [&](int64_t ch, int64_t j) { return finalv[finalIdx(i, ch, j)]; });
    }
}

void causal_conv1d_backward(const CausalConv1dBackwardArgs& a) {
  const char* op = "reference::causal_conv1d_backward";
  const detail::ConvBackwardDims d = detail::checkConv1dBackwardArgs(a, DeviceKind::CPU, op);
  const int64_t W = d.W, K = d.W - 1;
  // Every index first, so that a bad one throws before anything is written.
  Windows win(op, d, a);
  const bool hasDfinal = a.dfinal_states.defined(), hasDinit = a.dinitial_states.defined();
  std::vector<int64_t> finalSlot;
  if (hasDfinal)
    finalSlot = slotsOf(op, "final_state_indices", "no gradient", a.final_state_indices, d.nseq, d.dfinalSlots);
  if (hasDinit)
    checkDistinctInitialSlots(op, static_cast<int64_t>(win.sequences()), d.initSlots,
                              [&](int64_t i) { return win.initSlot(at(i)); });

  // The gradients in double. Each tap's read of the forward becomes a write of g * w[k] to the
  // same place (x: dx, an initial-state column: dinitial_states, a zero: nowhere), and each
  // final-state column passes its gradient on to what it read.
  std::vector<double> dxv(at(d.batch * d.L * d.D), 0.0), dwv(at(d.D * W), 0.0), dbv(at(d.D), 0.0);
  std::vector<double> dinitv(hasDinit ? at(d.initSlots * d.D * K) : 0, 0.0);
  auto xIdx = [&](int64_t b, int64_t tok, int64_t ch) { return at((b * d.L + tok) * d.D + ch); };
  auto stIdx = [&](int64_t slot, int64_t ch, int64_t j) { return at((slot * d.D + ch) * K + j); };
  auto gradOf = [&](int64_t ch, Loc l) -> double* {
    if (l.kind == Loc::X) return &dxv[xIdx(l.row, l.idx, ch)];
    if (l.kind == Loc::State && hasDinit) return &dinitv[stIdx(l.row, ch, l.idx)];
    return nullptr;
  };
  for (int64_t ch = 0; ch < d.D; ++ch) {
    win.loadChannel(ch);
    win.forEachToken([&](int64_t b, int64_t tok, const Loc* taps) {
      const double dy = loadElement(a.dout, win.xOff(a.dout, b, tok, ch));
      const double g = dy * actGrad(win.pre(ch, taps), a.silu);
      dbv[at(ch)] += g;
      for (int64_t k = 0; k < W; ++k) {
        if (taps[k].kind == Loc::None) continue;
        dwv[at(ch * W + k)] += g * win.value(ch, taps[k]);
        if (double* p = gradOf(ch, taps[k])) *p += g * win.weight(k);
      }
    });
    if (hasDfinal)
      for (size_t i = 0; i < win.sequences(); ++i) {
        if (finalSlot[i] < 0) continue;
        for (int64_t j = 0; j < K; ++j)
          if (double* p = gradOf(ch, win.finalColumn(i, j)))
            *p += loadElement(a.dfinal_states, Windows::stOff(a.dfinal_states, finalSlot[i], ch, j));
      }
  }

  // The writes, each rounded once.
  win.storeLikeX(a.dx, [&](int64_t b, int64_t t, int64_t ch) { return dxv[xIdx(b, t, ch)]; });
  for (int64_t ch = 0; ch < d.D; ++ch) {
    for (int64_t k = 0; k < W; ++k)
      storeElement(a.dweight, ch * a.dweight.strides[0] + k * a.dweight.strides[1], dwv[at(ch * W + k)]);
    if (a.dbias.defined()) storeElement(a.dbias, ch * a.dbias.strides[0], dbv[at(ch)]);
  }
  if (hasDinit)
    for (size_t i = 0; i < win.sequences(); ++i) {
      const int64_t s = win.initSlot(i);
      if (s < 0) continue;
      win.storeState(a.dinitial_states, s, [&](int64_t ch, int64_t j) { return dinitv[stIdx(s, ch, j)]; });
    }
}

void causal_conv1d_update(const CausalConv1dUpdateArgs& a) {
  const char* op = "reference::causal_conv1d_update";
  const detail::ConvUpdateDims d = detail::checkConv1dUpdateArgs(a, DeviceKind::CPU, op);
  const int64_t W = d.W, K = d.W - 1;
  const TensorView& st = a.conv_state;
  const std::vector<int64_t> slots = slotsOf(op, "state_indices", "pad", a.state_indices, d.batch, d.S);
  auto xOff = [](const TensorView& t, int64_t b, int64_t tok, int64_t ch) {
    return b * t.strides[0] + tok * t.strides[1] + ch * t.strides[2];
  };
  std::vector<double> win(static_cast<size_t>(K)), wt(static_cast<size_t>(W));
  for (int64_t b = 0; b < d.batch; ++b) {
    const int64_t s = slots[static_cast<size_t>(b)];
    if (s == -1) continue;  // pad row: nothing read, nothing written
    for (int64_t ch = 0; ch < d.D; ++ch) {
      for (int64_t k = 0; k < W; ++k)
        wt[static_cast<size_t>(k)] = loadElement(a.weight, ch * a.weight.strides[0] + k * a.weight.strides[1]);
      const double bias = a.bias.defined() ? loadElement(a.bias, ch * a.bias.strides[0]) : 0.0;
      for (int64_t j = 0; j < K; ++j)
        win[static_cast<size_t>(j)] = loadElement(st, s * st.strides[0] + ch * st.strides[1] + j * st.strides[2]);
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
          storeElement(st, s * st.strides[0] + ch * st.strides[1] + j * st.strides[2], win[static_cast<size_t>(j)]);
    }
  }
}

}  // namespace ssmjit::reference
