// The forward's inputs that the SSD forward and backward kernels declare under the same names
// (kernels_dsl/ssd/Ssd.h, SsdBackward.h): x, dt, A, B, C, D, z and dt_bias, the sizes H, P, N, hpg
// and L, dt's options and the chunk. Internal to the runtime.
#pragma once
#include <array>
#include <climits>
#include <string>

#include "kernels_dsl/Signature.h"
#include "kernels_dsl/ssd/Ssd.h"
#include "runtime/Driver.h"
#include "runtime/ops/KernelCall.h"
#include "runtime/ops/SsdCheck.h"
#include "ssmjit/error.h"
#include "ssmjit/ops.h"

namespace ssmjit::detail {

// Per-token tensors take the batch axis only for a batch above 1 (the stride binds as 0 otherwise).
inline Axes ssdRowAxes(const SsdDims& d) { return {d.batch > 1 ? 0 : kNoAxis, 1, 2, 3}; }
// D (H,) binds a p stride of 0.
inline Axes ssdDAxes(const SsdDims& d) { return d.dPerChannel ? kSameAxes : Axes{0, kNoAxis}; }

inline void bindSsdInputs(KernelCall& c, const dsl::Signature& S, const SsdArgs& a, const SsdDims& d) {
  const Axes rows = ssdRowAxes(d);
  c.tensor(S.tensor("x"), a.x, rows);
  c.tensor(S.tensor("dt"), a.dt, rows);
  c.tensor(S.tensor("A"), a.A);
  c.tensor(S.tensor("B"), a.B, rows);
  c.tensor(S.tensor("C"), a.C, rows);
  c.tensor(S.tensor("Dv"), a.D, ssdDAxes(d));
  c.tensor(S.tensor("z"), a.z, rows);
  c.tensor(S.tensor("dtb"), a.dt_bias);
  c.size(S.size("H"), d.H);
  c.size(S.size("P"), d.P);
  c.size(S.size("N"), d.N);
  c.size(S.size("hpg"), d.headsPerGroup);
  c.size(S.size("L"), d.L);
  c.scalar(S.scalar("dt_min"), d.clamp ? a.dt_min : 0.0f);
  c.scalar(S.scalar("dt_max"), d.clamp ? a.dt_max : 0.0f);
  c.flag(S.flag("has_D"), a.D.defined());
  c.flag(S.flag("has_z"), a.z.defined());
  c.flag(S.flag("has_dtb"), a.dt_bias.defined());
  c.flag(S.flag("softplus"), a.dt_softplus);
  c.flag(S.flag("has_clamp"), d.clamp);
  c.meta("meta:chunk", d.chunk);
}

// Zeroes the chains' words of the forward's workspace region (Ssd.h: ssdChainBlocks) on
// `stream`, before a launch whose programs pass states (their tickets and flags start at 0).
inline void zeroSsdChainWords(const TensorView& workspace, const kernels::SsdWorkspaceLayout& ws, CUstream stream,
                              const char* op) {
  const auto words = reinterpret_cast<CUdeviceptr>(static_cast<float*>(workspace.data) + ws.oFlags);
  driver::check(driver::api().cuMemsetD32Async(words, 0, static_cast<size_t>(ws.flagWords), stream),
                (std::string(op) + ": cuMemsetD32Async").c_str());
}

// The forward's workspace offsets: per-chunk dt, cumsums, states and C.B.
inline void bindSsdForwardOffsets(KernelCall& c, const dsl::Signature& S, const kernels::SsdWorkspaceLayout& ws) {
  c.size(S.size("o_dt"), ws.oDt);
  c.size(S.size("o_cum"), ws.oCum);
  c.size(S.size("o_st"), ws.oSt);
  c.size(S.size("o_cb"), ws.oCb);
}

// The grid of a kernel over (slot, head or group, block) (kernels::ssdSlotHeadGrid) for its
// meta:slot_inner; more programs than one grid axis takes is an error naming op `op`.
inline std::array<unsigned, 3> ssdSlotHeadGrid(KernelCall& k, const char* op, int64_t slots, int64_t H,
                                               int64_t blocks) {
  const kernels::SsdGrid g = kernels::ssdSlotHeadGrid(k.metaValue("meta:slot_inner") != 0, slots, H, blocks);
  if (g.x > INT32_MAX)
    throw Error(Error::Kind::InvalidArgument, std::string(op) + ": " + std::to_string(slots) + " chunks x " +
                                                  std::to_string(H) + " heads x " + std::to_string(blocks) +
                                                  " blocks, expected at most 2^31 - 1 programs (grid limit); use "
                                                  "fewer tokens a call");
  return {unsigned(g.x), unsigned(g.y), unsigned(g.z)};
}

}  // namespace ssmjit::detail
