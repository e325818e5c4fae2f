// A step's dt' and cumsums staged through shared memory: the SSD kernels that walk a chunk's
// tokens in steps of a few tiles' rings (chunk_scan, chunk_state, and the backward's dstates and
// dx) read each step's dt' and dA_cumsum (the decays' and weights' inputs, Ssd.h's workspace
// rows) from a ring of their own, copied by cp.async with the step's other tiles, instead of
// loading them from memory where the step needs them (the loads' latency stalled the step at
// their first use). Builds DSL code only.
#pragma once
#include <cstdint>

#include "compiler/Specialization.h"
#include "kernels_dsl/Dsl.h"
#include "kernels_dsl/ssd/SsdChunks.h"

namespace ssmjit::kernels {

class SsdDecayRing {
 public:
  // `stages` stages of `tokens` tokens of the workspace rows at wsRow (the slot's and head's).
  // Staged only with whole-tile copies and rows the bindings prove aligned; otherwise staged()
  // is false and the kernel loads them itself.
  SsdDecayRing(dsl::KernelBuilder& k, const Specialization& s, const SsdInputValues& a, dsl::Value wsRow, int stages,
               int64_t tokens);
  bool staged() const { return vec_ != 0; }
  // Copies tokens [first, first + tokens) into stage step % stages (in the caller's group);
  // first defaults to step tokens.
  void copy(dsl::Value step, dsl::Value first = {}) const;
  // [1, tokens]: the staged dt' and cumsum of the step's tokens, once its group has been waited for.
  dsl::Value dt(dsl::Value step) const { return at(step, 0); }
  dsl::Value cum(dsl::Value step) const { return at(step, 1); }

 private:
  dsl::Value at(dsl::Value step, int64_t plane) const;

  dsl::KernelBuilder& k_;
  const SsdInputValues& a_;
  dsl::Value wsRow_, smem_;
  int stages_;
  int64_t tokens_, vec_, Q_;
};

}  // namespace ssmjit::kernels
