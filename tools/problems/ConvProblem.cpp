#include "tools/problems/ConvProblem.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>

#include "runtime/Driver.h"

namespace ssmjit::testing {

namespace {
HostTensor contiguous(DType t, const std::vector<int64_t>& shape, std::mt19937_64& rng) {
  return makeTensor(t, shape, Layout{}, rng);
}
HostTensor indexTensor(const std::vector<int64_t>& v, std::mt19937_64& rng) {
  HostTensor h = contiguous(DType::I32, {static_cast<int64_t>(v.size())}, rng);
  for (size_t i = 0; i < v.size(); ++i) storeElement(h.view(), static_cast<int64_t>(i), static_cast<double>(v[i]));
  return h;
}
// A permutation of the first n of `slots` slots, with entry 1 set to -1 when n > 1.
std::vector<int64_t> slotList(int64_t n, int64_t slots, std::mt19937_64& rng) {
  std::vector<int64_t> s(static_cast<size_t>(slots));
  std::iota(s.begin(), s.end(), 0);
  std::shuffle(s.begin(), s.end(), rng);
  s.resize(static_cast<size_t>(n));
  if (n > 1) s[1] = -1;
  return s;
}
std::string dtypeShort(DType t) { return dtypeName(t); }
// Slot i of `indices`, or i without it.
int64_t slotAt(const HostTensor& indices, int64_t i) {
  return indices.defined ? static_cast<int64_t>(loadElement(indices.view(), i)) : i;
}
// Per slot of `slots` slots: used by one of the first n entries of `indices` (or 0..n-1).
std::vector<char> slotsUsed(const HostTensor& indices, int64_t n, int64_t slots) {
  std::vector<char> w(static_cast<size_t>(slots), 0);
  for (int64_t i = 0; i < n; ++i)
    if (const int64_t s = slotAt(indices, i); s >= 0) w[static_cast<size_t>(s)] = 1;
  return w;
}

// The name of the inputs, between the case's own prefix and its states.
std::string inputsName(const ConvInputsCase& c) {
  std::string s = c.layout == ConvLayout::ChannelLast ? "cl" : "cf";
  s += "_" + dtypeShort(c.xType) + "_w" + dtypeShort(c.wType) + "_W" + std::to_string(c.W);
  s += "_D" + std::to_string(c.D);
  s += c.packing == ConvPacking::Dense ? "_dense" : c.packing == ConvPacking::CuSeqlens ? "_cu" : "_pos";
  s += "_n" + std::to_string(c.lens.size());
  s += "_T" + std::to_string(std::accumulate(c.lens.begin(), c.lens.end(), int64_t{0}));
  return s;
}
// The name of the options, after the states.
std::string optionsName(const ConvInputsCase& c) {
  std::string s;
  if (c.slotIndices) s += "_idx";
  if (!c.bias) s += "_nobias";
  if (!c.silu) s += "_nosilu";
  return s;
}
// The forward's inputs (x, weight, bias, cu_seqlens or positions, drawn in this order). Returns
// x's shape.
std::vector<int64_t> makeInputs(const ConvInputsCase& c, std::mt19937_64& rng, HostTensor& x, HostTensor& weight,
                                HostTensor& bias, HostTensor& cu, HostTensor& pos) {
  const bool packed = c.packing != ConvPacking::Dense;
  const int64_t nseq = static_cast<int64_t>(c.lens.size());
  const int64_t T = std::accumulate(c.lens.begin(), c.lens.end(), int64_t{0});
  const int64_t B = packed ? 1 : nseq, L = packed ? T : c.lens[0];
  const bool cl = c.layout == ConvLayout::ChannelLast;
  const std::vector<int64_t> xs = cl ? std::vector<int64_t>{B, L, c.D} : std::vector<int64_t>{B, c.D, L};
  x = contiguous(c.xType, xs, rng);
  fillUniform(x, rng, -1, 1);
  weight = contiguous(c.wType, {c.D, c.W}, rng);
  fillUniform(weight, rng, -0.5, 0.5);
  if (c.bias) {
    bias = contiguous(c.wType, {c.D}, rng);
    fillUniform(bias, rng, -0.5, 0.5);
  }
  std::vector<int64_t> cuv{0};
  for (int64_t l : c.lens) cuv.push_back(cuv.back() + l);
  if (c.packing == ConvPacking::CuSeqlens) cu = indexTensor(cuv, rng);
  if (c.packing == ConvPacking::Positions) {
    pos = contiguous(DType::I32, {1, T}, rng);
    for (int64_t i = 0; i < nseq; ++i)
      for (int64_t t = cuv[i]; t < cuv[i + 1]; ++t) storeElement(pos.view(), t, static_cast<double>(t - cuv[i]));
  }
  return xs;
}

// The views of what makeInputs made, and the options both directions take.
template <class Args, class Problem>
void viewInputs(Args& a, const Problem& p, const Viewer& view) {
  a.x = view(p.x);
  a.weight = view(p.weight);
  a.bias = view(p.bias);
  a.layout = p.c.layout;
  a.silu = p.c.silu;
  a.cu_seqlens = view(p.cu);
  a.seq_pos = view(p.pos);
}

}  // namespace

std::vector<ConvInputsCase> convInputsMatrix(uint64_t seed) {
  std::vector<ConvInputsCase> out;
  for (ConvLayout layout : {ConvLayout::ChannelFirst, ConvLayout::ChannelLast})
    for (DType dt : {DType::F32, DType::BF16})
      for (int W : {2, 3, 4, 5, 8})
        for (ConvPacking p : {ConvPacking::Dense, ConvPacking::CuSeqlens, ConvPacking::Positions}) {
          ConvInputsCase c;
          c.layout = layout;
          c.xType = c.stateType = dt;
          c.wType = DType::F32;
          c.W = W;
          c.D = 67;
          c.packing = p;
          c.lens = p == ConvPacking::Dense ? std::vector<int64_t>{301, 301, 301}
                                           : std::vector<int64_t>{1, 2, 70, 3, 257, 5, 129};
          c.slotIndices = p == ConvPacking::CuSeqlens;
          c.seed = seed++;
          out.push_back(c);
        }
  return out;
}

ConvInputsCase manyStartsRow(ConvLayout layout) {
  ConvInputsCase c;
  c.layout = layout;
  c.xType = c.stateType = DType::BF16;
  c.W = 4;
  c.D = 96;
  c.packing = ConvPacking::CuSeqlens;
  c.lens = {57, 1, 200, 2, 64, 300, 1, 1, 2, 1, 3, 1, 1, 1, 2, 1, 40};
  return c;
}

std::string ConvCase::name() const {
  std::string s = inputsName(*this);
  if (initialStates) s += "_init";
  if (finalStates) s += "_final";
  return s + optionsName(*this);
}

ConvProblem::ConvProblem(const ConvCase& cc) : c(cc) {
  std::mt19937_64 rng(c.seed);
  const int64_t nseq = static_cast<int64_t>(c.lens.size());
  out = contiguous(c.xType, makeInputs(c, rng, x, weight, bias, cu, pos), rng);  // poisoned
  if (c.initialStates || c.finalStates) {
    const int64_t slots = nseq + 2;
    states = contiguous(c.stateType, {slots, c.D, c.W - 1}, rng);
    fillUniform(states, rng, -1, 1);
    if (c.slotIndices) {
      const auto s = slotList(nseq, slots, rng);
      if (c.initialStates) initIdx = indexTensor(s, rng);
      if (c.finalStates) finalIdx = indexTensor(s, rng);
    }
  }
}

CausalConv1dArgs ConvProblem::args(const Viewer& view) const {
  CausalConv1dArgs a;
  viewInputs(a, *this, view);
  a.out = view(out);
  if (c.initialStates) a.initial_states = view(states);
  if (c.finalStates) a.final_states = view(states);
  a.initial_state_indices = view(initIdx);
  a.final_state_indices = view(finalIdx);
  return a;
}

std::vector<char> ConvProblem::slotsWritten() const {
  if (!c.finalStates) return std::vector<char>(static_cast<size_t>(states.defined ? states.meta.shape[0] : 0), 0);
  return slotsUsed(finalIdx, static_cast<int64_t>(c.lens.size()), states.meta.shape[0]);
}

std::vector<HostTensor*> ConvProblem::all() {
  return {&x, &weight, &bias, &out, &cu, &pos, &states, &initIdx, &finalIdx};
}

std::string ConvBackwardCase::name() const {
  std::string s = "bwd_" + inputsName(*this);
  if (initialStates) s += "_init";
  if (dfinalStates) s += "_dfinal";
  if (dinitialStates) s += "_dinit";
  return s + optionsName(*this);
}

double ConvBackwardCase::dxTwiceRounded() const {
  if (!dfinalStates || xType == DType::F32) return 0;
  int64_t tokens = 0, tail = 0;
  for (int64_t len : lens) {
    tokens += len;
    tail += std::min<int64_t>(len, W - 1);
  }
  return tokens ? double(tail) / double(tokens) : 0;
}

ConvBackwardProblem::ConvBackwardProblem(const ConvBackwardCase& cc) : c(cc) {
  std::mt19937_64 rng(c.seed);
  const int64_t nseq = static_cast<int64_t>(c.lens.size()), slots = nseq + 2;
  const std::vector<int64_t> xs = makeInputs(c, rng, x, weight, bias, cu, pos);
  dout = contiguous(c.xType, xs, rng);
  fillUniform(dout, rng, -1, 1);
  const std::vector<int64_t> ss = {slots, c.D, c.W - 1};
  if (c.initialStates) {
    states = contiguous(c.stateType, ss, rng);
    fillUniform(states, rng, -1, 1);
    if (c.slotIndices) initIdx = indexTensor(slotList(nseq, slots, rng), rng);  // distinct slots
  }
  if (c.dfinalStates) {
    dfinal = contiguous(c.stateType, ss, rng);
    fillUniform(dfinal, rng, -1, 1);
    if (c.slotIndices) finalIdx = indexTensor(slotList(nseq, slots, rng), rng);
  }
  // The gradients, poisoned.
  dx = contiguous(c.xType, xs, rng);
  dweight = contiguous(c.wType, {c.D, c.W}, rng);
  if (c.bias) dbias = contiguous(c.wType, {c.D}, rng);
  if (c.dinitialStates) dinit = contiguous(c.stateType, ss, rng);
}

CausalConv1dBackwardArgs ConvBackwardProblem::args(const Viewer& view) const {
  CausalConv1dBackwardArgs a;
  viewInputs(a, *this, view);
  a.dout = view(dout);
  a.initial_states = view(states);
  a.initial_state_indices = view(initIdx);
  a.dfinal_states = view(dfinal);
  a.final_state_indices = view(finalIdx);
  a.dx = view(dx);
  a.dweight = view(dweight);
  a.dbias = view(dbias);
  a.dinitial_states = view(dinit);
  return a;
}

std::vector<char> ConvBackwardProblem::slotsWritten() const {
  if (!dinit.defined) return {};
  return slotsUsed(initIdx, static_cast<int64_t>(c.lens.size()), dinit.meta.shape[0]);
}

std::vector<HostTensor*> ConvBackwardProblem::all() {
  // The order the header documents (the GPU tests download by index).
  return {&x, &weight, &bias, &dout, &cu, &pos, &states, &initIdx, &dfinal, &finalIdx, &dx, &dweight, &dbias, &dinit};
}

std::string ConvUpdateCase::name() const {
  return dtypeShort(xType) + "_state" + dtypeShort(stateType) + "_W" + std::to_string(W) + "_D" + std::to_string(D) +
         "_b" + std::to_string(batch) + "_L" + std::to_string(L) + (commit ? "" : "_nocommit") +
         (indices ? "_idx" : "");
}

ConvUpdateProblem::ConvUpdateProblem(const ConvUpdateCase& cc) : c(cc) {
  std::mt19937_64 rng(c.seed);
  const int64_t slots = c.indices ? c.slots : c.batch;
  state = contiguous(c.stateType, {slots, c.D, c.W - 1}, rng);
  fillUniform(state, rng, -1, 1);
  x = contiguous(c.xType, {c.batch, c.L, c.D}, rng);
  fillUniform(x, rng, -1, 1);
  out = contiguous(c.xType, {c.batch, c.L, c.D}, rng);
  weight = contiguous(DType::F32, {c.D, c.W}, rng);
  fillUniform(weight, rng, -0.5, 0.5);
  if (c.bias) {
    bias = contiguous(DType::F32, {c.D}, rng);
    fillUniform(bias, rng, -0.5, 0.5);
  }
  if (c.indices) idx = indexTensor(slotList(c.batch, slots, rng), rng);
}

CausalConv1dUpdateArgs ConvUpdateProblem::args(const Viewer& view) const {
  CausalConv1dUpdateArgs a;
  a.conv_state = view(state);
  a.x = view(x);
  a.weight = view(weight);
  a.bias = view(bias);
  a.out = view(out);
  a.state_indices = view(idx);
  a.silu = c.silu;
  a.commit = c.commit;
  return a;
}

std::vector<char> ConvUpdateProblem::rowsWritten() const {
  std::vector<char> w(static_cast<size_t>(c.batch));
  for (int64_t b = 0; b < c.batch; ++b) w[static_cast<size_t>(b)] = slotAt(idx, b) >= 0;
  return w;
}

std::vector<char> ConvUpdateProblem::slotsWritten() const {
  if (!c.commit) return std::vector<char>(static_cast<size_t>(state.meta.shape[0]), 0);
  return slotsUsed(idx, c.batch, state.meta.shape[0]);
}

std::vector<HostTensor*> ConvUpdateProblem::all() { return {&state, &x, &weight, &bias, &out, &idx}; }

DeviceTensors::DeviceTensors(const std::vector<const HostTensor*>& host) : host(host) {
  for (const HostTensor* h : host) {
    bufs.emplace_back();
    if (!h->defined) continue;
    bufs.back() = DeviceBuffer(h->bytes.size());
    bufs.back().uploadBytes(h->bytes.data(), h->bytes.size());
  }
  driver::check(driver::api().cuCtxSynchronize(), "cuCtxSynchronize (after uploading inputs)");
}

TensorView DeviceTensors::view(size_t k, const HostTensor& h) const {
  if (!h.defined) return {};
  TensorView v = h.meta;
  v.data = static_cast<char*>(bufs[k].data()) + h.byteOffset;
  v.device = DeviceKind::CUDA;
  v.deviceId = 0;
  return v;
}

TensorView DeviceTensors::view(const HostTensor& h) const {
  const auto k = std::find(host.begin(), host.end(), &h);
  if (k == host.end())
    throw std::invalid_argument("DeviceTensors::view: the tensor is not one of those the copies were made from");
  return view(static_cast<size_t>(k - host.begin()), h);
}

Viewer DeviceTensors::viewer() const {
  return [this](const HostTensor& h) { return view(h); };
}

std::vector<TensorView> DeviceTensors::views() const {
  std::vector<TensorView> v;
  for (size_t k = 0; k < host.size(); ++k) v.push_back(view(k, *host[k]));
  return v;
}

std::vector<uint8_t> DeviceTensors::download(size_t k) const {
  std::vector<uint8_t> v(bufs[k].bytes());
  if (!v.empty()) bufs[k].downloadBytes(v.data(), v.size());
  return v;
}

}  // namespace ssmjit::testing
