#include "runtime/reference/SsdCall.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include "runtime/reference/RefHelpers.h"
#include "ssmjit/error.h"

namespace ssmjit::reference {
namespace {

std::string str(int64_t v) { return std::to_string(v); }

// One state slot a sequence reads or writes, and what the messages call it.
struct SlotUse {
  int64_t seq;
  std::string what;  // "final_state_indices[2]"
};

}  // namespace

int64_t SsdCall::blocks(int64_t i) const { return blockTokens > 0 ? seq.len[at(i)] / blockTokens : 0; }

SsdCall readSsdCall(const char* op, const SsdArgs& a, const detail::SsdDims& d, const TensorView& finalStates,
                    bool forward, bool distinctInitial) {
  SsdCall q;
  q.seq = readSequences(op, d.packed ? a.cu_seqlens : TensorView{}, d.nseq, d.L, 0, "x's seqlen");
  if (a.initial_states.defined())
    q.initSlot = scanSlots(op, "initial_state_indices", a.initial_state_indices, d.nseq, d.initSlots);
  if (finalStates.defined())
    q.finalSlot = scanSlots(op, "final_state_indices", a.final_state_indices, d.nseq, finalStates.shape[0]);
  if (forward && d.blockTokens > 0) {
    q.blockTokens = d.blockTokens;
    const TensorView& idx = a.block_state_indices;
    q.blockSlot.assign(at(d.nseq * d.blocksPerSeq), -1);
    for (int64_t i = 0; i < d.nseq; ++i) {
      if (q.blocks(i) > d.blocksPerSeq)
        invalid(op, "sequence " + str(i) + " has " + str(q.seq.len[at(i)]) + " tokens, " + str(q.blocks(i)) +
                        " blocks of block_state_tokens = " + str(d.blockTokens) +
                        ", expected at most block_state_indices' kmax = " + str(d.blocksPerSeq));
      for (int64_t k = 0; k < q.blocks(i); ++k) {
        const int64_t v = loadIndex(idx, offsetOf(idx, {i, k}));
        if (v != -1 && (v < 0 || v >= d.blockSlots))
          invalid(op, "block_state_indices[" + str(i) + ", " + str(k) + "] = " + str(v) +
                          ", expected -1 or a slot in [0, " + str(d.blockSlots) + ")");
        q.blockSlot[at(i * d.blocksPerSeq + k)] = v;
      }
    }
  }

  // Slots by tensor (data pointer): who writes each, who reads each.
  std::map<std::pair<const void*, int64_t>, SlotUse> writes, reads;
  auto name = [](const char* n, int64_t i) { return std::string(n) + "[" + str(i) + "]"; };
  auto write = [&](const TensorView& t, int64_t slot, SlotUse use) {
    if (slot < 0) return;
    const auto [it, fresh] = writes.emplace(std::make_pair(t.data, slot), use);
    if (!fresh)
      invalid(op, use.what + " = " + str(slot) + ", the slot " + it->second.what +
                      " writes too, expected distinct slots (two writes to one slot race)");
  };
  if (forward) {
    for (int64_t i = 0; i < d.nseq && !q.finalSlot.empty(); ++i)
      write(a.final_states, q.finalSlot[at(i)], {i, name("final_state_indices", i)});
    for (int64_t i = 0; i < d.nseq && !q.blockSlot.empty(); ++i)
      for (int64_t k = 0; k < q.blocks(i); ++k)
        write(a.block_states, q.blockSlot[at(i * d.blocksPerSeq + k)],
              {i, "block_state_indices[" + str(i) + ", " + str(k) + "]"});
  }
  for (int64_t i = 0; i < d.nseq && !q.initSlot.empty(); ++i) {
    const int64_t s = q.initSlot[at(i)];
    if (s < 0) continue;
    const SlotUse use{i, name("initial_state_indices", i)};
    const auto w = writes.find({a.initial_states.data, s});
    if (w != writes.end() && w->second.seq != i)
      invalid(op, use.what + " = " + str(s) + ", the slot " + w->second.what +
                      " writes, expected a slot no other sequence writes (initial and final states share a "
                      "tensor)");
    const auto [r, fresh] = reads.emplace(std::make_pair(a.initial_states.data, s), use);
    if (!fresh && distinctInitial)
      invalid(op, use.what + " = " + str(s) + ", the slot of " + r->second.what +
                      " too, expected distinct slots with dinitial_states (each slot's gradient is written by one "
                      "sequence)");
  }
  return q;
}

DtPrime dtPrime(const SsdArgs& a, double raw, int64_t h) {
  double v = raw + (a.dt_bias.defined() ? el(a.dt_bias, {h}) : 0.0), g = 1.0;
  if (a.dt_softplus && v <= 20.0) g = 1.0 / (1.0 + std::exp(-v)), v = std::log1p(std::exp(v));
  const double lo = a.dt_min, hi = a.dt_max;
  if (hi > lo) {
    if (v < lo || v > hi) g = 0.0;
    v = std::min(std::max(v, lo), hi);
  }
  return {v, g};
}

}  // namespace ssmjit::reference
