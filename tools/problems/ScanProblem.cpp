#include "tools/problems/ScanProblem.h"

#include <algorithm>
#include <numeric>
#include <random>

namespace ssmjit::testing {

namespace {

HostTensor randomTensor(DType t, const std::vector<int64_t>& shape, const Layout& lay, std::mt19937_64& rng, double lo,
                        double hi) {
  HostTensor h = makeTensor(t, shape, lay, rng);
  fillUniform(h, rng, lo, hi);
  return h;
}

HostTensor indexTensor(DType t, const std::vector<int64_t>& v, const Layout& lay, std::mt19937_64& rng) {
  HostTensor h = makeTensor(t, {static_cast<int64_t>(v.size())}, lay, rng);
  const TensorView tv = h.view();
  for (size_t i = 0; i < v.size(); ++i)
    storeElement(tv, static_cast<int64_t>(i) * tv.strides[0], static_cast<double>(v[i]));
  return h;
}

// The first n of a permutation of `slots` slots.
std::vector<int64_t> permutedSlots(int64_t n, int64_t slots, std::mt19937_64& rng) {
  std::vector<int64_t> s(static_cast<size_t>(slots));
  std::iota(s.begin(), s.end(), 0);
  std::shuffle(s.begin(), s.end(), rng);
  s.resize(static_cast<size_t>(n));
  return s;
}
}  // namespace

std::string ScanCase::name() const {
  std::string s = "u" + std::string(dtypeName(uType)) + "_dt" + dtypeName(deltaType) + "_out" + dtypeName(outType);
  s += "_D" + std::to_string(D) + "_N" + std::to_string(N) + "_G" + std::to_string(G);
  s += bVarying ? "_Bvar" + std::string(dtypeName(bType)) : "_Bconst";
  s += cVarying ? "_Cvar" + std::string(dtypeName(cType)) : "_Cconst";
  if (lens.empty()) {
    s += "_b" + std::to_string(batch) + "_L" + std::to_string(L);
  } else {
    s += "_packed" + std::to_string(lens.size()) + "_T" +
         std::to_string(std::accumulate(lens.begin(), lens.end(), int64_t{0}));
    if (maxSeqlen) s += "_max" + std::to_string(maxSeqlen);
  }
  if (serialSeqlen) s += "_serial" + std::to_string(serialSeqlen);
  if (hasZ) s += "_z" + std::string(dtypeName(zType));
  if (!hasD) s += "_noD";
  if (!hasDeltaBias) s += "_nobias";
  if (!softplus) s += "_nosoftplus";
  if (initialStates || finalStates) {
    s += std::string(initialStates ? "_init" : "") + (finalStates ? "_final" : "") + "_" + dtypeName(stateType);
    if (initialStates && finalStates) s += inPlace ? "_inplace" : "_separate";
    if (slotIndices) s += "_idx" + std::string(dtypeName(indexType));
  }
  if (strided) s += "_strided";
  return s + "_seed" + std::to_string(seed);
}

ScanProblem::ScanProblem(const ScanCase& cc) : c(cc) {
  std::mt19937_64 rng(c.seed);
  const bool packed = !c.lens.empty();
  nseq = packed ? static_cast<int64_t>(c.lens.size()) : c.batch;
  const int64_t Bt = packed ? 1 : c.batch;
  const int64_t L = packed ? std::accumulate(c.lens.begin(), c.lens.end(), int64_t{0}) : c.L;
  for (int64_t i = 0, t = 0; i < nseq; ++i) {
    row.push_back(packed ? 0 : i);
    start.push_back(packed ? t : 0);
    len.push_back(packed ? c.lens[static_cast<size_t>(i)] : L);
    t += len.back();
  }
  // The token axis keeps stride 1 (the op requires it); the others may be transposed.
  const Layout lay{c.strided, false, c.strided}, layT{c.strided, c.strided, c.strided};
  const std::vector<int64_t> xs = {Bt, c.D, L}, bcs = {Bt, c.G, c.N, L};

  u = randomTensor(c.uType, xs, lay, rng, -1, 1);
  delta = c.softplus ? randomTensor(c.deltaType, xs, lay, rng, -3, 0)  // dt = softplus(delta + bias)
                     : randomTensor(c.deltaType, xs, lay, rng, 0.001, 0.1);
  if (c.hasZ) z = randomTensor(c.zType, xs, lay, rng, -2, 2);
  out = makeTensor(c.outType, xs, lay, rng);  // poisoned
  A = randomTensor(DType::F32, {c.D, c.N}, layT, rng, -2, -0.5);
  B = c.bVarying ? randomTensor(c.bType, bcs, lay, rng, -1, 1) : randomTensor(DType::F32, {c.D, c.N}, layT, rng, -1, 1);
  C = c.cVarying ? randomTensor(c.cType, bcs, lay, rng, -1, 1) : randomTensor(DType::F32, {c.D, c.N}, layT, rng, -1, 1);
  if (c.hasD) Dv = randomTensor(DType::F32, {c.D}, lay, rng, -1, 1);
  if (c.hasDeltaBias)
    deltaBias = c.softplus ? randomTensor(DType::F32, {c.D}, lay, rng, -1, 0.5)
                           : randomTensor(DType::F32, {c.D}, lay, rng, 0, 0.05);
  if (packed) {
    std::vector<int64_t> cuv{0};
    for (int64_t l : c.lens) cuv.push_back(cuv.back() + l);
    cu = indexTensor(c.indexType, cuv, lay, rng);
  }

  if (!c.initialStates && !c.finalStates) return;
  S = nseq + 2;
  const std::vector<int64_t> ss = {S, c.D, c.N};
  std::vector<int64_t> identity(static_cast<size_t>(nseq));
  std::iota(identity.begin(), identity.end(), 0);
  const std::vector<int64_t> initPerm = c.slotIndices ? permutedSlots(nseq, S, rng) : identity;
  if (c.initialStates) {
    initStates = randomTensor(c.stateType, ss, layT, rng, -1, 1);
    initSlot = initPerm;
    if (c.slotIndices && nseq > 1) initSlot[1] = -1;
    if (c.slotIndices) initIdx = indexTensor(c.indexType, initSlot, lay, rng);
  }
  if (c.finalStates) {
    if (!inPlace()) finalStates = makeTensor(c.stateType, ss, layT, rng);  // poisoned
    finalSlot = !c.slotIndices ? identity : inPlace() ? initPerm : permutedSlots(nseq, S, rng);
    if (c.slotIndices && nseq > 2) finalSlot[2] = -1;
    if (c.slotIndices) finalIdx = indexTensor(c.indexType, finalSlot, lay, rng);
  }
}

SelectiveScanArgs ScanProblem::args(const Viewer& view) const {
  SelectiveScanArgs a;
  a.u = view(u);
  a.delta = view(delta);
  a.z = view(z);
  a.out = view(out);
  a.A = view(A);
  a.B = view(B);
  a.C = view(C);
  a.D = view(Dv);
  a.delta_bias = view(deltaBias);
  a.delta_softplus = c.softplus;
  a.cu_seqlens = view(cu);
  a.max_seqlen = c.lens.empty() ? 0 : c.maxSeqlen;
  a.serial_seqlen = c.serialSeqlen;
  a.initial_states = view(initStates);
  a.initial_state_indices = view(initIdx);
  if (c.finalStates) a.final_states = view(finalHolder());
  a.final_state_indices = view(finalIdx);
  return a;
}

std::vector<char> ScanProblem::slotsWritten() const {
  std::vector<char> w(static_cast<size_t>(S), 0);
  for (int64_t s : finalSlot)
    if (s >= 0) w[static_cast<size_t>(s)] = 1;
  return w;
}

std::vector<HostTensor*> ScanProblem::all() {
  return {&u, &delta, &z, &out, &A, &B, &C, &Dv, &deltaBias, &cu, &initStates, &initIdx, &finalStates, &finalIdx};
}

void copyTokens(const HostTensor& from, HostTensor& to, int64_t start) {
  if (!from.defined) return;
  const TensorView src = from.view(), dst = to.view();
  forEachElement(dst, [&](int64_t off, const std::vector<int64_t>& idx) {
    int64_t so = 0;
    for (int d = 0; d < src.ndim; ++d) so += (d == src.ndim - 1 ? idx[d] + start : idx[d]) * src.strides[d];
    storeElement(dst, off, loadElement(src, so));
  });
}

}  // namespace ssmjit::testing
