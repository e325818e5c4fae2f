#include "tools/problems/SsuProblem.h"

#include <algorithm>

#include "runtime/OpSpecializations.h"
#include "ssmjit/reference.h"

namespace ssmjit::testing {

int64_t SsuCase::slots() const {
  if (!stateIdx) return batch;
  return batch + spareSlots + (write == StateWrite::PerToken ? batch * L : 0);
}

std::string SsuCase::name() const {
  auto dt = [](DType t) { return std::string(t == DType::F32 ? "f32" : t == DType::BF16 ? "bf16" : "f16"); };
  std::string s =
      mamba2 ? "m2_H" + std::to_string(H) + "P" + std::to_string(P) + "N" + std::to_string(N) + "G" + std::to_string(G)
             : "m1_D" + std::to_string(P) + "N" + std::to_string(N);
  s += "_b" + std::to_string(batch) + (tokens ? "_L" + std::to_string(L) : "_1tok");
  s += "_st" + dt(stateT) + "_in" + dt(inT) + "_out" + dt(outT);
  s += write == StateWrite::Final ? "_final" : write == StateWrite::None ? "_none" : "_pertoken";
  if (hasD) s += "_D";
  if (hasZ) s += "_z";
  if (hasDtBias) s += "_bias";
  if (softplus) s += "_softplus";
  if (clamp) s += "_clamp";
  if (stateIdx) s += std::string("_idx") + (idxT == DType::I32 ? "32" : "64");
  if (pads) s += "_pads" + std::to_string(pads);
  if (strided) s += "_strided";
  if (decayScale != 1) s += "_decay" + std::to_string(static_cast<int>(decayScale));
  return s;
}

SsuCase mamba2Heads(int64_t H, int64_t P, int64_t N, int64_t G) {
  SsuCase c;
  c.H = H;
  c.P = P;
  c.N = N;
  c.G = G;
  return c;
}

int64_t TensorDesc::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return present ? n : 0;
}

size_t TensorDesc::bytes() const { return static_cast<size_t>(numel()) * static_cast<size_t>(dtypeBytes(dtype)); }

std::array<TensorDesc, kNumTensors> ssuTensors(const SsuCase& c) {
  auto lead = [&](std::vector<int64_t> rest) {  // [batch][tokens] then the per-form dims
    std::vector<int64_t> v{c.batch};
    if (c.tokens) v.push_back(c.L);
    v.insert(v.end(), rest.begin(), rest.end());
    return v;
  };
  const std::vector<int64_t> xs = c.mamba2 ? lead({c.H, c.P}) : lead({c.P});
  const std::vector<int64_t> heads = {c.mamba2 ? c.H : c.P};  // D, dt_bias (A for Mamba-2)
  const std::vector<int64_t> bcs = c.mamba2 ? lead({c.G, c.N}) : lead({c.N});
  std::array<TensorDesc, kNumTensors> t;
  t[kState] = {"state", true, c.stateT,
               c.mamba2 ? std::vector<int64_t>{c.slots(), c.H, c.P, c.N} : std::vector<int64_t>{c.slots(), c.P, c.N}};
  t[kX] = {"x", true, c.inT, xs};
  t[kDt] = {"dt", true, c.inT, c.mamba2 ? lead({c.H}) : lead({c.P})};
  t[kA] = {"A", true, DType::F32, c.mamba2 ? heads : std::vector<int64_t>{c.P, c.N}};
  t[kB] = {"B", true, c.inT, bcs};
  t[kC] = {"C", true, c.inT, bcs};
  t[kD] = {"D", c.hasD, DType::F32, heads};
  t[kZ] = {"z", c.hasZ, c.inT, xs};
  t[kDtBias] = {"dt_bias", c.hasDtBias, DType::F32, heads};
  t[kOut] = {"out", true, c.outT, xs};
  t[kStateIdx] = {"state_batch_indices", c.stateIdx, c.idxT, {c.batch}};
  t[kDstIdx] = {"dst_state_indices", c.write == StateWrite::PerToken, c.idxT,
                c.tokens ? std::vector<int64_t>{c.batch, c.L} : std::vector<int64_t>{c.batch}};
  return t;
}

std::pair<double, double> valueRange(SsuTensor t, const SsuCase& c) {
  switch (t) {
    case kDt:  // softplus(dt + bias) stays small and positive; without softplus dt is used as is
      return c.softplus ? std::pair{-4.0, 1.0} : std::pair{0.01, 0.3};
    case kA:
      return {(c.mamba2 ? -4.0 : -2.0) * c.decayScale, -0.1 * c.decayScale};
    case kZ:
      return {-3.0, 3.0};
    case kDtBias:
      return c.softplus ? std::pair{-1.0, 0.5} : std::pair{0.0, 0.1};
    default:
      return {-1.0, 1.0};
  }
}

SelectiveStateUpdateArgs ssuArgs(const SsuCase& c, const std::array<TensorView, kNumTensors>& views) {
  SelectiveStateUpdateArgs a;
  const auto t = opspec::ssuViews(a);
  for (int i = 0; i < kNumTensors; ++i) *t[i] = views[i];
  a.dt_softplus = c.softplus;
  if (c.clamp) {
    a.dt_min = kClampDtMin;
    a.dt_max = kClampDtMax;
  }
  a.state_write = c.write;
  return a;
}

SelectiveStateUpdateArgs SsuProblem::args() const {
  std::array<TensorView, kNumTensors> views;
  const auto h = all();
  for (int i = 0; i < kNumTensors; ++i) views[i] = h[i]->view();
  return ssuArgs(c, views);
}

SsuProblem makeProblem(SsuCase c) {
  if (c.pads > 0 || c.write == StateWrite::PerToken) c.stateIdx = true;  // they need slots
  if (!c.mamba2) c.H = c.G = 1;
  if (!c.tokens) c.L = 1;
  SsuProblem p;
  p.c = c;
  std::mt19937_64 rng(c.seed * 0x9E3779B97F4A7C15ull + 12345);
  const Layout plain{}, padded{true, false, false}, transposed{false, true, true}, offsetOnly{false, false, true};
  const Layout& lx = c.strided ? padded : plain;
  const Layout& lbc = c.strided ? transposed : plain;
  const Layout& lst = c.strided ? padded : plain;
  const Layout& lout = c.strided ? offsetOnly : plain;
  const Layout& lsmall = c.strided ? padded : plain;  // D and the index arrays
  const Layout* layout[kNumTensors] = {&lst,    &lx, &lx,    &plain, &lbc,    &lbc,
                                       &lsmall, &lx, &plain, &lout,  &lsmall, &lsmall};

  // Slots: the rows read a random permutation of slots; PerToken writes go to other slots.
  const bool perToken = c.write == StateWrite::PerToken;
  p.S = c.slots();
  std::vector<int64_t> slots(static_cast<size_t>(p.S));
  for (int64_t i = 0; i < p.S; ++i) slots[i] = i;
  if (c.stateIdx) std::shuffle(slots.begin(), slots.end(), rng);
  p.readSlot.assign(slots.begin(), slots.begin() + c.batch);
  for (int k = 0; k < c.pads && k < c.batch; ++k) {
    // Spread pads over the batch (first, last, then every few rows).
    const int64_t r = k == 0 ? 0 : k == 1 ? c.batch - 1 : (k * 7) % c.batch;
    p.readSlot[r] = -1;
  }

  // Inputs in SsuTensor order, each allocated then filled (the order fixes the random stream).
  const auto desc = ssuTensors(c);
  const auto h = p.all();
  for (int i = kState; i <= kDtBias; ++i) {
    if (!desc[i].present) continue;
    *h[i] = makeTensor(desc[i].dtype, desc[i].shape, *layout[i], rng);
    const auto [lo, hi] = valueRange(static_cast<SsuTensor>(i), c);
    fillUniform(*h[i], rng, lo, hi);
    // One value past the softplus threshold (dt' > 20 is used as is).
    if (i == kDt && c.softplus) storeElement(p.dt.view(), 0, 21.5);
  }
  p.out = makeTensor(c.outT, desc[kOut].shape, lout, rng);  // all poison

  if (c.stateIdx) {
    p.idx = makeTensor(c.idxT, desc[kStateIdx].shape, lsmall, rng);
    const TensorView v = p.idx.view();
    for (int64_t b = 0; b < c.batch; ++b) storeElement(v, b * v.strides[0], double(p.readSlot[b]));
  }
  p.slotMayBeWritten.assign(static_cast<size_t>(p.S), 0);
  if (c.write == StateWrite::Final)
    for (int64_t s : p.readSlot)
      if (s >= 0) p.slotMayBeWritten[s] = 1;
  if (perToken) {
    p.dst = makeTensor(c.idxT, desc[kDstIdx].shape, lsmall, rng);
    const TensorView v = p.dst.view();
    int64_t next = c.batch;  // slots[batch..] are read by nobody
    forEachElement(v, [&](int64_t off, const std::vector<int64_t>& i) {
      // About one token in four skips its write (-1); token 0 of row 0 always writes.
      const bool skip = (rng() % 4 == 0) && !(i[0] == 0 && (!c.tokens || i[1] == 0));
      const int64_t s = skip ? -1 : slots[next++];
      storeElement(v, off, double(s));
      if (s >= 0 && p.readSlot[i[0]] >= 0) p.slotMayBeWritten[s] = 1;
    });
  }
  return p;
}

std::vector<char> rowsWritten(const SsuProblem& p) {
  std::vector<char> w(static_cast<size_t>(p.c.batch));
  for (int64_t b = 0; b < p.c.batch; ++b) w[b] = p.readSlot[b] >= 0;
  return w;
}

void runOp(bool tokens, const SelectiveStateUpdateArgs& a, Stream stream) {
  if (tokens)
    selective_state_update_tokens(a, stream);
  else
    selective_state_update(a, stream);
}

void runReference(bool tokens, const SelectiveStateUpdateArgs& a) {
  if (tokens)
    reference::selective_state_update_tokens(a);
  else
    reference::selective_state_update(a);
}

void runReference(const SsuProblem& p) { runReference(p.c.tokens, p.args()); }

SelectiveStateUpdateArgs oneTokenArgs(const SelectiveStateUpdateArgs& a, int64_t t) {
  SelectiveStateUpdateArgs o = a;
  for (TensorView* v : {&o.x, &o.dt, &o.B, &o.C, &o.z, &o.out}) *v = tokenSlice(*v, t);
  o.state_write = StateWrite::Final;  // the chain of calls carries the state forward
  o.dst_state_indices = TensorView{};
  return o;
}

}  // namespace ssmjit::testing
