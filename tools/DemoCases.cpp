#include "tools/DemoCases.h"

#include <algorithm>

#include "runtime/DeviceBuffer.h"
#include "runtime/OpSpecializations.h"
#include "ssmjit/ops.h"
#include "ssmjit/reference.h"
#include "tools/SsuCall.h"
#include "tools/ToolSupport.h"
#include "tools/problems/ConvProblem.h"
#include "tools/problems/DecodeProblem.h"
#include "tools/problems/DeviceProblem.h"
#include "tools/problems/ScanBackwardProblem.h"
#include "tools/problems/ScanProblem.h"
#include "tools/problems/SsuProblem.h"

namespace ssmjit::tool {
namespace {

using testing::DeviceTensors;
using testing::HostTensor;

std::vector<char> allOf(const HostTensor& t) { return std::vector<char>(static_cast<size_t>(t.meta.shape[0]), 1); }
long long ll(int64_t v) { return static_cast<long long>(v); }
std::string lengths(const std::vector<int64_t>& lens) {
  std::string s;
  for (int64_t l : lens) s += (s.empty() ? "" : ",") + std::to_string(l);
  return s;
}

// A call's bytes after it ran: the host tensors' own (the reference writes them in place) or a
// download of the device copies.
std::function<std::vector<uint8_t>(size_t)> hostBytes(DemoCase* c) {
  return [c](size_t k) { return c->tensors()[k]->bytes; };
}
std::function<std::vector<uint8_t>(size_t)> deviceBytes(std::shared_ptr<const DeviceTensors> d) {
  return [d](size_t k) { return d->download(k); };
}
// A zero-filled fp32 workspace of `n` elements (at least one) that the call's lambdas keep alive.
std::shared_ptr<DeviceBuffer> workspace(int64_t n, TensorView& view) {
  n = std::max<int64_t>(n, 1);
  auto w = std::make_shared<DeviceBuffer>(static_cast<size_t>(n) * 4);
  w->fill(0);
  view = TensorView::contiguous(w->data(), DType::F32, {n});
  return w;
}

// selective_state_update(_tokens): the demo's original cases (tools/SsuCall.h's bounds).
class SsuDemo : public DemoCase {
 public:
  explicit SsuDemo(const SsuCase& s)
      : DemoCase(s.tokens ? "ssu-tokens" : "ssu",
                 strf("H%lld P%lld N%lld b=%lld%s state %s pads %d", ll(s.H), ll(s.P), ll(s.N), ll(s.batch),
                      s.tokens ? strf(" L=%lld", ll(s.L)).c_str() : "", shortDTypeName(s.stateT), s.pads)),
        p_(testing::makeProblem(s)) {}
  std::vector<HostTensor*> tensors() override {
    const auto a = p_.all();
    return {a.begin(), a.end()};
  }
  std::vector<DemoOutput> outputs() override {
    return {{"out", testing::kOut, testing::rowsWritten(p_), tolerance(p_.c.outT)},
            {"state", testing::kState, p_.slotMayBeWritten, tolerance(p_.c.stateT)}};
  }
  DemoCall hostCall() override {
    const SelectiveStateUpdateArgs a = p_.args();
    return {kernels(a), [a, t = p_.c.tokens](Stream) { testing::runReference(t, a); }, hostBytes(this)};
  }
  DemoCall deviceCall() override {
    auto d = std::make_shared<const testing::DeviceProblem>(p_);
    return {kernels(d->args), [d, t = p_.c.tokens](Stream s) { testing::runOp(t, d->args, s); },
            [d](size_t k) { return d->download(k); }};
  }

 private:
  std::function<std::vector<Specialization>(const std::string&)> kernels(const SelectiveStateUpdateArgs& a) const {
    return [a, t = p_.c.tokens](const std::string& arch) { return std::vector<Specialization>{opspec::ssu(a, t, arch)}; };
  }
  testing::SsuProblem p_;
};

// mamba2_decode_step, fused: a few heads of Mamba-2 2.7B, fp32 SSM state, bf16 drafts and conv
// state, mixed accepted counts and a pad row.
class DecodeDemo : public DemoCase {
 public:
  explicit DecodeDemo(const testing::DecodeCase& c)
      : DemoCase("decode-step", strf("H%lld P%lld N%lld W%lld b=%lld L=%lld state %s drafts %s", ll(c.H), ll(c.P),
                                     ll(c.N), ll(c.W), ll(c.batch), ll(c.L), shortDTypeName(c.ssmStateType),
                                     shortDTypeName(c.xType))),
        p_(c) {}
  std::vector<HostTensor*> tensors() override { return p_.all(); }
  std::vector<DemoOutput> outputs() override {
    const double bound = 2e-2;  // bf16 drafts and conv state (the GPU tests' bound)
    return {{"conv_state", 0, p_.slotsCommitted(), bound},
            {"ssm_state", 1, p_.slotsCommitted(), bound},
            {"y", 16, p_.rowsVerified(), bound}};
  }
  DemoCall hostCall() override {
    return call(p_.state(), p_.weights(), p_.args(),
                [](const Mamba2DecodeState& s, const Mamba2MixerWeights& w, const Mamba2DecodeStepArgs& a, Stream) {
                  reference::mamba2_decode_step(s, w, a);
                },
                hostBytes(this));
  }
  DemoCall deviceCall() override {
    auto d = std::make_shared<const DeviceTensors>(p_.all());
    return call(deviceState(p_, *d), deviceWeights(p_, *d), deviceArgs(p_, *d),
                [](const Mamba2DecodeState& s, const Mamba2MixerWeights& w, const Mamba2DecodeStepArgs& a,
                   Stream st) { mamba2_decode_step(s, w, a, st); },
                deviceBytes(d));
  }

 private:
  template <class Run>
  static DemoCall call(const Mamba2DecodeState& s, const Mamba2MixerWeights& w, const Mamba2DecodeStepArgs& a,
                       Run run, std::function<std::vector<uint8_t>(size_t)> bytes) {
    return {[s, w, a](const std::string& arch) { return std::vector<Specialization>{opspec::decodeStep(s, w, a, arch)}; },
            [s, w, a, run](Stream st) { run(s, w, a, st); }, std::move(bytes)};
  }
  testing::DecodeProblem p_;
};

// causal_conv1d: one packed row of three sequences, states in place through slots.
class ConvDemo : public DemoCase {
 public:
  explicit ConvDemo(const testing::ConvCase& c)
      : DemoCase("conv", strf("D%lld W%d packed %s %s", ll(c.D), c.W, lengths(c.lens).c_str(), shortDTypeName(c.xType))),
        p_(c) {}
  std::vector<HostTensor*> tensors() override { return p_.all(); }
  std::vector<DemoOutput> outputs() override {
    return {{"out", 3, allOf(p_.out), 1e-2}, {"states", 6, p_.slotsWritten(), 1e-2}};
  }
  DemoCall hostCall() override { return call(p_.args(), [](const CausalConv1dArgs& a, Stream) { reference::causal_conv1d(a); }, hostBytes(this)); }
  DemoCall deviceCall() override {
    auto d = std::make_shared<const DeviceTensors>(p_.all());
    return call(deviceArgs(p_, *d), [](const CausalConv1dArgs& a, Stream s) { causal_conv1d(a, s); }, deviceBytes(d));
  }

 private:
  template <class Run>
  static DemoCall call(const CausalConv1dArgs& a, Run run, std::function<std::vector<uint8_t>(size_t)> bytes) {
    return {[a](const std::string& arch) { return opspec::conv(a, arch); }, [a, run](Stream s) { run(a, s); },
            std::move(bytes)};
  }
  testing::ConvProblem p_;
};

// causal_conv1d_update: two tokens per row, a pad row, committed through slots.
class ConvUpdateDemo : public DemoCase {
 public:
  explicit ConvUpdateDemo(const testing::ConvUpdateCase& c)
      : DemoCase("conv-update", strf("D%lld W%d b=%lld L=%lld %s", ll(c.D), c.W, ll(c.batch), ll(c.L), shortDTypeName(c.xType))),
        p_(c) {}
  std::vector<HostTensor*> tensors() override { return p_.all(); }
  std::vector<DemoOutput> outputs() override {
    return {{"out", 4, p_.rowsWritten(), 1e-2}, {"conv_state", 0, p_.slotsWritten(), 1e-2}};
  }
  DemoCall hostCall() override {
    return call(p_.args(), [](const CausalConv1dUpdateArgs& a, Stream) { reference::causal_conv1d_update(a); }, hostBytes(this));
  }
  DemoCall deviceCall() override {
    auto d = std::make_shared<const DeviceTensors>(p_.all());
    return call(deviceArgs(p_, *d), [](const CausalConv1dUpdateArgs& a, Stream s) { causal_conv1d_update(a, s); },
                deviceBytes(d));
  }

 private:
  template <class Run>
  static DemoCall call(const CausalConv1dUpdateArgs& a, Run run, std::function<std::vector<uint8_t>(size_t)> bytes) {
    return {[a](const std::string& arch) { return std::vector<Specialization>{opspec::convUpdate(a, arch)}; },
            [a, run](Stream s) { run(a, s); }, std::move(bytes)};
  }
  testing::ConvUpdateProblem p_;
};

// causal_conv1d_backward: the forward's packed row, every gradient (dweight and dbias are fp32
// sums of the same products on both sides, hence their tight bound).
class ConvBackwardDemo : public DemoCase {
 public:
  explicit ConvBackwardDemo(const testing::ConvBackwardCase& c)
      : DemoCase("conv-backward",
                 strf("D%lld W%d packed %s %s", ll(c.D), c.W, lengths(c.lens).c_str(), shortDTypeName(c.xType))),
        p_(c) {}
  std::vector<HostTensor*> tensors() override { return p_.all(); }
  std::vector<DemoOutput> outputs() override {
    return {{"dx", 10, allOf(p_.dx), 1e-2},
            {"dweight", 11, allOf(p_.dweight), 1e-5},
            {"dbias", 12, allOf(p_.dbias), 1e-5},
            {"dinitial_states", 13, p_.slotsWritten(), 1e-2}};
  }
  DemoCall hostCall() override {
    return call(p_.args(), nullptr, [](const CausalConv1dBackwardArgs& a, Stream) { reference::causal_conv1d_backward(a); },
                hostBytes(this));
  }
  DemoCall deviceCall() override {
    auto d = std::make_shared<const DeviceTensors>(p_.all());
    CausalConv1dBackwardArgs a = deviceArgs(p_, *d);
    auto ws = workspace(causal_conv1d_backward_workspace_size(a), a.workspace);
    return call(a, ws, [](const CausalConv1dBackwardArgs& a, Stream s) { causal_conv1d_backward(a, s); },
                deviceBytes(d));
  }

 private:
  template <class Run>
  static DemoCall call(const CausalConv1dBackwardArgs& a, std::shared_ptr<DeviceBuffer> ws, Run run,
                       std::function<std::vector<uint8_t>(size_t)> bytes) {
    return {[a](const std::string& arch) { return opspec::convBackward(a, arch); },
            [a, ws, run](Stream s) { run(a, s); }, std::move(bytes)};
  }
  testing::ConvBackwardProblem p_;
};

// selective_scan: a packed row of three sequences (one spans several programs), states in place
// through slots. Bounds: the output's and the inputs' bf16 roundings (the GPU tests' bound).
class ScanDemo : public DemoCase {
 public:
  explicit ScanDemo(const testing::ScanCase& c)
      : DemoCase("scan", strf("D%lld N%lld packed %s %s", ll(c.D), ll(c.N), lengths(c.lens).c_str(),
                              shortDTypeName(c.uType))),
        p_(c) {}
  std::vector<HostTensor*> tensors() override { return p_.all(); }
  std::vector<DemoOutput> outputs() override {
    return {{"out", 3, allOf(p_.out), 3e-2}, {"final_states", p_.inPlace() ? 10u : 12u, p_.slotsWritten(), 2e-2}};
  }
  DemoCall hostCall() override {
    return call(p_.args(), nullptr, [](const SelectiveScanArgs& a, Stream) { reference::selective_scan(a); },
                hostBytes(this));
  }
  DemoCall deviceCall() override {
    auto d = std::make_shared<const DeviceTensors>(p_.all());
    SelectiveScanArgs a = deviceArgs(p_, *d);
    auto ws = workspace(selective_scan_workspace_size(a), a.workspace);
    return call(a, ws, [](const SelectiveScanArgs& a, Stream s) { selective_scan(a, s); }, deviceBytes(d));
  }

 private:
  template <class Run>
  static DemoCall call(const SelectiveScanArgs& a, std::shared_ptr<DeviceBuffer> ws, Run run,
                       std::function<std::vector<uint8_t>(size_t)> bytes) {
    return {[a](const std::string& arch) { return opspec::scan(a, arch); }, [a, ws, run](Stream s) { run(a, s); },
            std::move(bytes)};
  }
  testing::ScanProblem p_;
};

// selective_scan_backward: every gradient of a packed row, state gradients through slots.
class ScanBackwardDemo : public DemoCase {
 public:
  explicit ScanBackwardDemo(const testing::ScanBackwardCase& c)
      : DemoCase("scan-backward", strf("D%lld N%lld packed %s %s", ll(c.fwd.D), ll(c.fwd.N),
                                       lengths(c.fwd.lens).c_str(), shortDTypeName(c.fwd.uType))),
        p_(c) {}
  std::vector<HostTensor*> tensors() override { return p_.all(); }
  std::vector<DemoOutput> outputs() override {
    // The roundings of u, B and delta in bf16, then the gradient's own (the GPU tests' bound).
    const auto t = p_.all();
    auto bound = [&](size_t k) { return 6e-2 + (t[k]->meta.dtype == DType::F32 ? 1e-4 : 2e-2); };
    std::vector<DemoOutput> o;
    const char* names[] = {"du", "ddelta", "dA", "dB", "dC", "dD", "dz", "ddelta_bias"};
    for (size_t k = 16; k < 24; ++k) o.push_back({names[k - 16], k, allOf(*t[k]), bound(k)});
    o.push_back({"dinitial_states", 24, p_.slotsWritten(), bound(24)});
    return o;
  }
  DemoCall hostCall() override {
    return call(p_.args(), nullptr,
                [](const SelectiveScanBackwardArgs& a, Stream) { reference::selective_scan_backward(a); },
                hostBytes(this));
  }
  DemoCall deviceCall() override {
    auto d = std::make_shared<const DeviceTensors>(p_.all());
    SelectiveScanBackwardArgs a = deviceArgs(p_, *d);
    auto ws = workspace(selective_scan_backward_workspace_size(a), a.workspace);
    return call(a, ws, [](const SelectiveScanBackwardArgs& a, Stream s) { selective_scan_backward(a, s); },
                deviceBytes(d));
  }

 private:
  template <class Run>
  static DemoCall call(const SelectiveScanBackwardArgs& a, std::shared_ptr<DeviceBuffer> ws, Run run,
                       std::function<std::vector<uint8_t>(size_t)> bytes) {
    return {[a](const std::string& arch) { return opspec::scanBackward(a, arch); },
            [a, ws, run](Stream s) { run(a, s); }, std::move(bytes)};
  }
  testing::ScanBackwardProblem p_;
};

}  // namespace

std::vector<std::function<std::unique_ptr<DemoCase>()>> demoCases(uint64_t seed) {
  std::vector<std::function<std::unique_ptr<DemoCase>()>> makers;
  // Mamba-2 2.7B heads, batch 4: both state dtypes, one token and L = 4, every optional input,
  // one pad row and two slots nobody reads (both must come back untouched).
  for (DType st : {DType::F32, DType::BF16})
    for (bool tokens : {false, true}) {
      SsuCase s = testing::mamba2_2p7bHeads();
      s.tokens = tokens;
      s.batch = 4;
      s.L = tokens ? 4 : 1;
      s.stateT = s.inT = s.outT = st;  // serving runs fp32 end to end, or bf16 end to end
      s.hasD = s.hasZ = s.hasDtBias = s.softplus = true;
      s.stateIdx = true;
      s.pads = 1;
      s.spareSlots = 2;
      s.seed = seed + makers.size();
      makers.push_back([s] { return std::make_unique<SsuDemo>(s); });
    }
  testing::DecodeCase dc;
  dc.H = 8, dc.P = 64, dc.N = 128, dc.G = 1, dc.batch = 4, dc.slots = 6, dc.L = 4, dc.Lc = 4;
  dc.convStateType = dc.xType = dc.dtType = DType::BF16;
  dc.seed = seed + makers.size();
  makers.push_back([dc] { return std::make_unique<DecodeDemo>(dc); });

  testing::ConvCase cc;
  cc.xType = cc.stateType = DType::BF16;
  cc.D = 256, cc.lens = {100, 37, 200}, cc.packing = testing::ConvPacking::CuSeqlens;
  cc.initialStates = cc.finalStates = cc.slotIndices = true;
  cc.seed = seed + makers.size();
  makers.push_back([cc] { return std::make_unique<ConvDemo>(cc); });
  testing::ConvUpdateCase uc;
  uc.xType = uc.stateType = DType::BF16;
  uc.D = 256, uc.batch = 4, uc.L = 2, uc.slots = 6;
  uc.seed = seed + makers.size();
  makers.push_back([uc] { return std::make_unique<ConvUpdateDemo>(uc); });
  testing::ConvBackwardCase bc;
  bc.xType = bc.stateType = DType::BF16;
  bc.D = 256, bc.lens = cc.lens, bc.packing = testing::ConvPacking::CuSeqlens;
  bc.initialStates = bc.dfinalStates = bc.dinitialStates = bc.slotIndices = true;
  bc.seed = seed + makers.size();
  makers.push_back([bc] { return std::make_unique<ConvBackwardDemo>(bc); });

  testing::ScanCase sc;
  sc.uType = sc.deltaType = sc.zType = sc.outType = sc.bType = sc.cType = DType::BF16;
  sc.D = 128, sc.N = 16, sc.lens = {300, 37, 700};
  sc.initialStates = sc.finalStates = sc.slotIndices = true;
  sc.seed = seed + makers.size();
  makers.push_back([sc] { return std::make_unique<ScanDemo>(sc); });
  testing::ScanBackwardCase sb;
  sb.fwd = sc;
  sb.fwd.D = 64, sb.fwd.inPlace = false;
  sb.doutType = sb.duType = sb.ddeltaType = sb.dzType = sb.dBType = sb.dCType = DType::BF16;
  sb.dfinalStates = sb.dinitialStates = true;
  sb.fwd.seed = seed + makers.size();
  makers.push_back([sb] { return std::make_unique<ScanBackwardDemo>(sb); });
  return makers;
}

}  // namespace ssmjit::tool
