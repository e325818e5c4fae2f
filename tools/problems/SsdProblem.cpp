#include "tools/problems/SsdProblem.h"

#include <algorithm>
#include <numeric>
#include <random>

namespace ssmjit::testing {

SsdProblem::SsdProblem(const SsdCase& cs) : c(cs) {
  std::mt19937_64 rng(c.seed);
  auto fresh = [&](DType t, std::vector<int64_t> shape, double lo, double hi) {
    HostTensor h = makeTensor(t, shape, Layout{}, rng);
    fillUniform(h, rng, lo, hi);
    return h;
  };
  auto poisoned = [&](DType t, std::vector<int64_t> shape) { return makeTensor(t, shape, Layout{}, rng); };
  const bool packed = !c.lens.empty();
  if (packed) c.batch = 1, c.L = std::accumulate(c.lens.begin(), c.lens.end(), int64_t{0});
  nseq = packed ? static_cast<int64_t>(c.lens.size()) : c.batch;
  for (int64_t i = 0, s = 0; i < nseq; ++i) {
    row.push_back(packed ? 0 : i), start.push_back(packed ? s : 0);
    len.push_back(packed ? c.lens[static_cast<size_t>(i)] : c.L);
    s += len.back();
  }
  const int64_t Bt = c.batch, L = c.L, H = c.H, P = c.P;
  x = fresh(c.xType, {Bt, L, H, P}, -1, 1);
  dt = c.softplus ? fresh(c.dtType, {Bt, L, H}, -3, 1) : fresh(c.dtType, {Bt, L, H}, 0.02, 0.4);
  if (c.bigDt)
    for (int64_t k = 0; k < Bt * L * H; k += 5) storeElement(dt.view(), k, 21.0 + 3.0 * (k % 7) / 7.0);
  A = fresh(DType::F32, {H}, c.aLo, c.aHi);
  B = fresh(c.bcType, {Bt, L, c.G, c.N}, -1, 1);
  C = fresh(c.bcType, {Bt, L, c.G, c.N}, -1, 1);
  if (c.hasD) Dv = c.dPerChannel ? fresh(DType::F32, {H, P}, -1, 1) : fresh(DType::F32, {H}, -1, 1);
  if (c.hasZ) z = fresh(c.zType, {Bt, L, H, P}, -2, 2);
  if (c.hasDtBias) dtBias = c.softplus ? fresh(DType::F32, {H}, -0.5, 0.5) : fresh(DType::F32, {H}, 0.0, 0.1);
  if (c.hasOut) out = poisoned(c.outType, {Bt, L, H, P});
  if (c.keepY) y = poisoned(DType::F32, {Bt, L, H, P});
  if (packed) {
    cu = poisoned(c.indexType, {nseq + 1});
    for (int64_t i = 0; i <= nseq; ++i)
      storeElement(cu.view(), i, double(i == nseq ? L : start[static_cast<size_t>(i)]));
  }
  S = nseq + 2;
  std::vector<int64_t> perm(static_cast<size_t>(S));
  std::iota(perm.begin(), perm.end(), 0);
  if (c.slotIndices) std::shuffle(perm.begin(), perm.end(), rng);
  auto slots = [&](HostTensor& idx, std::vector<int64_t>& slot, int64_t none) {
    for (int64_t i = 0; i < nseq; ++i) slot.push_back(i == none ? -1 : perm[static_cast<size_t>(i)]);
    if (!c.slotIndices) return;
    idx = poisoned(c.indexType, {nseq});
    for (int64_t i = 0; i < nseq; ++i) storeElement(idx.view(), i, double(slot[static_cast<size_t>(i)]));
  };
  const int64_t noInit = c.slotIndices && nseq > 1 ? 1 : -1, noFinal = c.slotIndices ? nseq - 1 : -1;
  if (c.initial) {
    init = fresh(c.stateType, {S, H, P, c.N}, -1, 1);
    slots(initIdx, initSlot, noInit);
  }
  if (c.final) {
    if (!(c.inPlace && c.initial)) fin = poisoned(c.stateType, {S, H, P, c.N});
    slots(finIdx, finalSlot, noFinal);
  }
  if (c.blockTokens > 0) {
    for (int64_t l : len) kmax = std::max(kmax, l / c.blockTokens);
    kmax = std::max<int64_t>(kmax, 1);
    blockSlots = nseq * kmax + 1;
    blk = poisoned(c.stateType, {blockSlots, H, P, c.N});
    blkIdx = poisoned(c.indexType, {nseq, kmax});
    std::vector<int64_t> bperm(static_cast<size_t>(blockSlots));
    std::iota(bperm.begin(), bperm.end(), 0);
    std::shuffle(bperm.begin(), bperm.end(), rng);
    for (int64_t i = 0; i < nseq; ++i)
      for (int64_t k = 0; k < kmax; ++k) {
        const bool used = k < len[static_cast<size_t>(i)] / c.blockTokens;
        // The first block is not cached; columns past a sequence's blocks hold junk (not read).
        const int64_t v = !used ? -7 : (i == 0 && k == 0) ? -1 : bperm[static_cast<size_t>(i * kmax + k)];
        blockSlot.push_back(used ? v : -1);
        storeElement(blkIdx.view(), i * kmax + k, double(v));
      }
  }
  if (c.decay) decay = poisoned(DType::F32, {nseq, H});
}

SsdArgs SsdProblem::args(const Viewer& v) const {
  SsdArgs a;
  a.x = v(x), a.dt = v(dt), a.A = v(A), a.B = v(B), a.C = v(C), a.D = v(Dv), a.z = v(z), a.dt_bias = v(dtBias);
  a.dt_softplus = c.softplus, a.dt_min = c.dtMin, a.dt_max = c.dtMax, a.chunk_size = c.chunk;
  a.out = v(out), a.y = v(y), a.cu_seqlens = v(cu);
  a.initial_states = v(init), a.initial_state_indices = v(initIdx);
  if (c.final) a.final_states = v(finalHolder()), a.final_state_indices = v(finIdx);
  a.block_state_tokens = c.blockTokens, a.block_states = v(blk), a.block_state_indices = v(blkIdx);
  a.sequence_decay = v(decay);
  return a;
}

}  // namespace ssmjit::testing
