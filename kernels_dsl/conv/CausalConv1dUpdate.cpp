// Causal conv1d decode update: L new tokens per sequence against its conv state, in one launch
// (the verify pass of speculative decoding when L > 1). The W - 1 state columns are loaded once,
// carried through the tokens as a sliding window in registers, and stored once (or not at all:
// commit off). See CausalConv1d.h for the argument contract.
#include "kernels_dsl/Dsl.h"
#include "kernels_dsl/MetaDefaults.h"
#include "kernels_dsl/Registry.h"
#include "kernels_dsl/conv/CausalConv1d.h"

namespace ssmjit::kernels {
using namespace dsl;

namespace {

void build(KernelBuilder& k, const Specialization& spec) {
  const int64_t BD = spec.get("meta:BLOCK_D"), W = spec.get("meta:width");
  Value state = k.arg("state"), x = k.arg("x"), w = k.arg("weight"), bias = k.arg("bias"), out = k.arg("out");
  Value idx = k.arg("state_idx");
  Value err = k.arg("err");
  Value D = k.arg("D"), L = k.arg("L");
  Value nslots = k.arg("nslots");
  auto I = [&](const char* n) { return k.arg(n); };
  Value sSs = I("s_state_slot"), sSd = I("s_state_d"), sSk = I("s_state_k"), sXb = I("s_x_b"), sXt = I("s_x_t"),
        sXd = I("s_x_d"), sWd = I("s_w_d"), sWk = I("s_w_k"), sBias = I("s_bias_d"), sOb = I("s_out_b"),
        sOt = I("s_out_t"), sOd = I("s_out_d"), sIdx = I("s_idx_b");
  Value hasBias = k.arg("has_bias"), siluOn = k.arg("silu"), hasIdx = k.arg("has_state_idx"), commit = k.arg("commit");

  Value pidD = k.programId(0), b = k.programId(1);
  Value slot = k.ifElse(
      hasIdx, [&] { return std::vector<Value>{k.load(idx, b * sIdx)}; }, [&] { return std::vector<Value>{b}; })[0];
  k.returnIf(slot == -1);  // a pad row
  Value bad = (slot < 0) || (slot >= nslots);
  k.ifThen(bad && (pidD == 0), [&] { k.reportError(err, k.constInt(kErrConvUpdateSlot), b, slot, nslots); });
  k.returnIf(bad);

  Value offsD = pidD * BD + k.range(BD), maskD = offsD < D;
  Value zero = k.constFloat(0);
  std::vector<Value> win, wk;
  for (int64_t j = 0; j + 1 < W; ++j) win.push_back(k.load(state, slot * sSs + offsD * sSd + j * sSk, maskD, zero));
  for (int64_t j = 0; j < W; ++j) wk.push_back(k.load(w, offsD * sWd + j * sWk, maskD, zero));
  Value biasT = k.ifElse(
      hasBias, [&] { return std::vector<Value>{k.load(bias, offsD * sBias, maskD, zero)}; },
      [&] { return std::vector<Value>{k.splat(zero, {BD})}; })[0];

  std::vector<Value> last = k.forLoop(k.constInt(0), L, k.constInt(1), win, [&](Value t, const std::vector<Value>& c) {
    Value xt = k.load(x, b * sXb + t * sXt + offsD * sXd, maskD, zero);
    Value acc = biasT + wk[W - 1] * xt;
    for (int64_t j = 0; j + 1 < W; ++j) acc = acc + wk[j] * c[j];
    Value y = k.ifElse(
        siluOn, [&] { return std::vector<Value>{silu(acc)}; }, [&] { return std::vector<Value>{acc}; })[0];
    k.store(out, b * sOb + t * sOt + offsD * sOd, y, maskD);
    std::vector<Value> next(c.begin() + 1, c.end());
    next.push_back(xt);
    return next;
  });
  k.ifThen(commit, [&] {
    for (int64_t j = 0; j + 1 < W; ++j) k.store(state, slot * sSs + offsD * sSd + j * sSk, last[j], maskD);
  });
}

// 1-D tiles of channels, one channel a thread: the program is a chain of dependent loads (state,
// then each token), so more threads in flight beat wider vectors (a warp of 4 channels a thread is
// 3.3x slower at one new token).
void chooseMeta(Specialization& s) {
  setDefaults(s, {{"meta:num_warps", 4}, {"meta:BLOCK_D", 128}, {"meta:index_bits", 32}});
}

}  // namespace

const KernelRegistration kUpdate(__FILE__, {kConvUpdate.kernel, build, chooseMeta, &kConvUpdate});

}  // namespace ssmjit::kernels
