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
#include "tools/problems/SsdProblem.h"
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

// selective_state_update(_tokens).
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
    return {{"out", testing::kOut, testing::rowsWritten(p_), testing::kFp32Short},
            {"state", testing::kState, p_.slotMayBeWritten, testing::kFp32Short}};
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
    return
        [a, t = p_.c.tokens](const std::string& arch) { return std::vector<Specialization>{opspec::ssu(a, t, arch)}; };
  }
  testing::SsuProblem p_;
};

// mamba2_decode_step, fused: a few heads of Mamba-2 2.7B, fp32 SSM state, bf16 drafts and conv
// state, mixed accepted counts and a pad row.
class DecodeDemo : public DemoCase {
 public:
  explicit DecodeDemo(const testing::DecodeCase& c)
      : DemoCase("decode-step",
                 strf("H%lld P%lld N%lld W%lld b=%lld L=%lld state %s drafts %s", ll(c.H), ll(c.P), ll(c.N), ll(c.W),
                      ll(c.batch), ll(c.L), shortDTypeName(c.ssmStateType), shortDTypeName(c.xType))),
        p_(c) {}
  std::vector<HostTensor*> tensors() override { return p_.all(); }
  std::vector<DemoOutput> outputs() override {
    return {{"conv_state", 0, p_.slotsCommitted(), testing::kExact},
            {"ssm_state", 1, p_.slotsCommitted(), testing::kFp32Short},
            {"y", 16, p_.rowsVerified(), testing::kFp32Short}};
  }
  DemoCall hostCall() override {
    return call(
        p_.state(), p_.weights(), p_.args(),
        [](const Mamba2DecodeState& s, const Mamba2MixerWeights& w, const Mamba2DecodeStepArgs& a, Stream) {
          reference::mamba2_decode_step(s, w, a);
        },
        hostBytes(this));
  }
  DemoCall deviceCall() override {
    auto d = std::make_shared<const DeviceTensors>(p_.all());
    return call(
        deviceState(p_, *d), deviceWeights(p_, *d), deviceArgs(p_, *d),
        [](const Mamba2DecodeState& s, const Mamba2MixerWeights& w, const Mamba2DecodeStepArgs& a, Stream st) {
          mamba2_decode_step(s, w, a, st);
        },
        deviceBytes(d));
  }

 private:
  template <class Run>
  static DemoCall call(const Mamba2DecodeState& s, const Mamba2MixerWeights& w, const Mamba2DecodeStepArgs& a, Run run,
                       std::function<std::vector<uint8_t>(size_t)> bytes) {
    return {
        [s, w, a](const std::string& arch) { return std::vector<Specialization>{opspec::decodeStep(s, w, a, arch)}; },
        [s, w, a, run](Stream st) { run(s, w, a, st); }, std::move(bytes)};
  }
  testing::DecodeProblem p_;
};

// An op whose call is one arguments struct (conv, its update and backward, the scan and its
// backward): the kernels it compiles, the op, its reference, and its workspace (if it takes one).
template <class Args>
struct OneArgsOp {
  std::vector<Specialization> (*kernels)(const Args&, const std::string& arch);
  void (*op)(const Args&, Stream);
  void (*reference)(const Args&);
  TensorView Args::*workspace = nullptr;
  int64_t (*workspaceSize)(const Args&) = nullptr;
};

template <class Problem, class Args>
class OneArgsDemo : public DemoCase {
 public:
  using Outputs = std::vector<DemoOutput> (*)(Problem&);
  template <class Case>
  OneArgsDemo(std::string family, std::string shape, const Case& c, OneArgsOp<Args> op, Outputs outputs)
      : DemoCase(std::move(family), std::move(shape)), p_(c), op_(op), outputs_(outputs) {}
  std::vector<HostTensor*> tensors() override { return p_.all(); }
  std::vector<DemoOutput> outputs() override { return outputs_(p_); }
  DemoCall hostCall() override {
    const Args a = p_.args();
    const OneArgsOp<Args> op = op_;
    return {[a, op](const std::string& arch) { return op.kernels(a, arch); }, [a, op](Stream) { op.reference(a); },
            hostBytes(this)};
  }
  DemoCall deviceCall() override {
    auto d = std::make_shared<const DeviceTensors>(p_.all());
    Args a = testing::deviceArgs(p_, *d);
    std::shared_ptr<DeviceBuffer> ws;
    if (op_.workspace) ws = workspace(op_.workspaceSize(a), a.*op_.workspace);
    const OneArgsOp<Args> op = op_;
    return {[a, op](const std::string& arch) { return op.kernels(a, arch); }, [a, op, ws](Stream s) { op.op(a, s); },
            deviceBytes(d)};
  }

 private:
  Problem p_;
  OneArgsOp<Args> op_;
  Outputs outputs_;
};

template <class Problem, class Args, class Case>
std::function<std::unique_ptr<DemoCase>()> oneArgsMaker(std::string family, std::string shape, const Case& c,
                                                        OneArgsOp<Args> op,
                                                        std::vector<DemoOutput> (*outputs)(Problem&)) {
  return [=] { return std::make_unique<OneArgsDemo<Problem, Args>>(family, shape, c, op, outputs); };
}

// causal_conv1d: one packed row of three sequences, states in place through slots; its update
// (two tokens per row, a pad row, committed through slots) and backward (every gradient). bf16.
void addConvCases(uint64_t seed, std::vector<std::function<std::unique_ptr<DemoCase>()>>& makers) {
  testing::ConvCase c;
  c.xType = c.stateType = DType::BF16;
  c.D = 256, c.lens = {100, 37, 200}, c.packing = testing::ConvPacking::CuSeqlens;
  c.initialStates = c.finalStates = c.slotIndices = true;
  c.seed = seed + makers.size();
  const std::string shape = strf("D%lld W%d packed %s bf16", ll(c.D), c.W, lengths(c.lens).c_str());
  makers.push_back(oneArgsMaker<testing::ConvProblem, CausalConv1dArgs>(
      "conv", shape, c, {opspec::conv, causal_conv1d, reference::causal_conv1d}, [](testing::ConvProblem& p) {
        return std::vector<DemoOutput>{{"out", 3, allOf(p.out), testing::kFp32Short},
                                       {"states", 6, p.slotsWritten(), testing::kExact}};
      }));

  testing::ConvUpdateCase u;
  u.xType = u.stateType = DType::BF16;
  u.D = 256, u.batch = 4, u.L = 2, u.slots = 6;
  u.seed = seed + makers.size();
  makers.push_back(oneArgsMaker<testing::ConvUpdateProblem, CausalConv1dUpdateArgs>(
      "conv-update", strf("D%lld W%d b=%lld L=%lld bf16", ll(u.D), u.W, ll(u.batch), ll(u.L)), u,
      {[](const CausalConv1dUpdateArgs& a, const std::string& arch) {
         return std::vector<Specialization>{opspec::convUpdate(a, arch)};
       },
       causal_conv1d_update, reference::causal_conv1d_update},
      [](testing::ConvUpdateProblem& p) {
        return std::vector<DemoOutput>{{"out", 4, p.rowsWritten(), testing::kFp32Short},
                                       {"conv_state", 0, p.slotsWritten(), testing::kExact}};
      }));

  testing::ConvBackwardCase b;
  b.xType = b.stateType = DType::BF16;
  b.D = c.D, b.lens = c.lens, b.packing = c.packing;
  b.initialStates = b.dfinalStates = b.dinitialStates = b.slotIndices = true;
  b.seed = seed + makers.size();
  makers.push_back(oneArgsMaker<testing::ConvBackwardProblem, CausalConv1dBackwardArgs>(
      "conv-backward", shape, b,
      {opspec::convBackward, causal_conv1d_backward, reference::causal_conv1d_backward,
       &CausalConv1dBackwardArgs::workspace, causal_conv1d_backward_workspace_size},
      [](testing::ConvBackwardProblem& p) {
        return std::vector<DemoOutput>{{"dx", 10, allOf(p.dx), testing::kFp32Short, p.c.dxTwiceRounded()},
                                       {"dweight", 11, allOf(p.dweight), testing::kFp32Short},
                                       {"dbias", 12, allOf(p.dbias), testing::kFp32Short},
                                       {"dinitial_states", 13, p.slotsWritten(), testing::kFp32Short}};
      }));
}

// selective_scan: a packed row of three sequences (one spans several programs), states in place
// through slots, bf16; its backward on the same row, state gradients through slots.
void addScanCases(uint64_t seed, std::vector<std::function<std::unique_ptr<DemoCase>()>>& makers) {
  testing::ScanCase f;
  f.uType = f.deltaType = f.zType = f.outType = f.bType = f.cType = DType::BF16;
  f.D = 128, f.N = 16, f.lens = {300, 37, 700};
  f.initialStates = f.finalStates = f.slotIndices = true;
  f.seed = seed + makers.size();
  makers.push_back(oneArgsMaker<testing::ScanProblem, SelectiveScanArgs>(
      "scan", strf("D%lld N%lld packed %s bf16", ll(f.D), ll(f.N), lengths(f.lens).c_str()), f,
      {opspec::scan, selective_scan, reference::selective_scan, &SelectiveScanArgs::workspace,
       selective_scan_workspace_size},
      [](testing::ScanProblem& p) {
        const testing::Fp32Error e = testing::fp32Recurrence(p.longest());
        return std::vector<DemoOutput>{{"out", 3, allOf(p.out), e},
                                       {"final_states", p.inPlace() ? 10u : 12u, p.slotsWritten(), e}};
      }));

  testing::ScanBackwardCase b;
  b.fwd = f;
  b.fwd.D = 64, b.fwd.inPlace = false;
  b.doutType = b.duType = b.ddeltaType = b.dzType = b.dBType = b.dCType = DType::BF16;
  b.dfinalStates = b.dinitialStates = true;
  b.fwd.seed = seed + makers.size();
  makers.push_back(oneArgsMaker<testing::ScanBackwardProblem, SelectiveScanBackwardArgs>(
      "scan-backward", strf("D%lld N%lld packed %s bf16", ll(b.fwd.D), ll(b.fwd.N), lengths(b.fwd.lens).c_str()), b,
      {opspec::scanBackward, selective_scan_backward, reference::selective_scan_backward,
       &SelectiveScanBackwardArgs::workspace, selective_scan_backward_workspace_size},
      [](testing::ScanBackwardProblem& p) {
        const testing::Fp32Error e = testing::fp32RecurrenceGradient(p.f.longest());
        std::vector<DemoOutput> o;
        for (int k = testing::kFirstScanGradient; k <= testing::kDinit; ++k)
          o.push_back(
              {testing::kScanGradients[k - testing::kFirstScanGradient], static_cast<size_t>(k), p.written(k), e});
        return o;
      }));
}

// ssd: a packed row of three sequences (across chunk boundaries, one shorter than a chunk) at
// Mamba-2 heads cut to 8, bf16 inputs and out, fp32 states in place through slots. Bounds: the
// GPU tests' (a recurrence over the longest sequence).
void addSsdCase(uint64_t seed, std::vector<std::function<std::unique_ptr<DemoCase>()>>& makers) {
  testing::SsdCase c;
  c.H = 8, c.P = 64, c.N = 128, c.G = 1, c.chunk = 128, c.lens = {300, 37, 700};
  c.xType = c.dtType = c.bcType = c.zType = c.outType = DType::BF16;
  c.initial = c.final = c.inPlace = c.slotIndices = true;
  c.seed = seed + makers.size();
  makers.push_back(oneArgsMaker<testing::SsdProblem, SsdArgs>(
      "ssd",
      strf("H%lld P%lld N%lld chunk %d packed %s bf16", ll(c.H), ll(c.P), ll(c.N), c.chunk, lengths(c.lens).c_str()), c,
      {opspec::ssd, ssd, reference::ssd, &SsdArgs::workspace, ssd_workspace_size}, [](testing::SsdProblem& p) {
        std::vector<char> slots(static_cast<size_t>(p.S), 0);
        for (int64_t s : p.finalSlot)
          if (s >= 0) slots[static_cast<size_t>(s)] = 1;
        const testing::Fp32Error e = testing::fp32Recurrence(p.longest());
        return std::vector<DemoOutput>{{"out", 8, allOf(p.out), e}, {"final_states", 10, slots, e}};
      }));
}

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
  addConvCases(seed, makers);
  addScanCases(seed, makers);
  addSsdCase(seed, makers);
  return makers;
}

}  // namespace ssmjit::tool
