// 64-bit offsets on the GPU: one run a family whose state slots lie more than 2^31 elements apart
// from the tensor's pointer, so that the op selects 64-bit indexing (tests/test_wide_offsets.cpp
// checks that selection with fake views) and a kernel really forms offsets past INT32_MAX. The
// problems are the small ones of tests/support with their float64 reference; on the device only
// the state tensor changes: its slots `slotStride` elements apart in one buffer of just the view's
// span (about 2^31 16-bit elements: 4.3 GB), every byte between them poisoned. Only the slot blocks
// go up and come back, each with guard bytes on both sides that must stay poisoned. Each test
// skips where the device lacks the memory (scripts/gpu-suite.sh runs them in their own process).
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "GpuTest.h"
#include "SsuTestUtil.h"
#include "runtime/DeviceBuffer.h"
#include "runtime/Driver.h"
#include "runtime/ops/CausalConv1dSpec.h"
#include "runtime/ops/Mamba2DecodeStepSpec.h"
#include "runtime/ops/SelectiveScanSpec.h"
#include "runtime/ops/SelectiveStateUpdateSpec.h"
#include "ssmjit/ops.h"
#include "ssmjit/reference.h"
#include "tools/problems/ConvProblem.h"
#include "tools/problems/DecodeProblem.h"
#include "tools/problems/ScanProblem.h"
#include "tools/problems/SsuProblem.h"

using namespace ssmjit;
using namespace ssmjit::testing;

namespace {

// Poison checked on each side of a slot block; the first block keeps the buffer's 256-byte alignment.
constexpr int64_t kGuardBytes = 256;
constexpr int64_t kFirstWideOffset = int64_t{1} << 31;  // INT32_MAX + 1

// The slot stride that puts slot `lastSlot` at element offset 2^31 or beyond (so its elements need
// 64-bit offsets), rounded up to 64 elements (16-byte aligned slots in every dtype).
int64_t wideSlotStride(int64_t lastSlot) {
  const int64_t s = (kFirstWideOffset + lastSlot - 1) / lastSlot;
  return (s + 63) / 64 * 64;
}

// Free device memory in bytes (cuMemGetInfo_v2 from the libcuda the runtime loaded: the runtime's
// driver table has no entry for it); -1 where it cannot be read.
int64_t freeDeviceBytes() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!lib) return -1;
  using MemGetInfo = CUresult (*)(size_t*, size_t*);
  const auto getInfo = reinterpret_cast<MemGetInfo>(dlsym(lib, "cuMemGetInfo_v2"));
  size_t freeBytes = 0, total = 0;
  const bool ok = getInfo && getInfo(&freeBytes, &total) == CUDA_SUCCESS;
  dlclose(lib);
  return ok ? static_cast<int64_t>(freeBytes) : -1;
}

// The bytes a wide tensor of `h` at `slotStride` takes on the device.
int64_t wideBytes(const HostTensor& h, int64_t slotStride) {
  const int64_t block = h.meta.strides[0];
  return ((h.meta.shape[0] - 1) * slotStride + block) * dtypeBytes(h.meta.dtype) + 2 * kGuardBytes;
}

// Skips the test (one line: gpu-suite.sh allows this skip by its words "the device lacks the
// memory") unless `bytes` plus 1 GiB for the rest of the call are free.
#define SKIP_UNLESS_DEVICE_HOLDS(bytes)                                                                                \
  do {                                                                                                                 \
    const int64_t sjFree_ = freeDeviceBytes();                                                                         \
    const int64_t sjNeed_ = (bytes) + (int64_t{1} << 30);                                                              \
    if (sjFree_ >= 0 && sjFree_ < sjNeed_)                                                                             \
      GTEST_SKIP() << "the device lacks the memory: " << sjNeed_ / (1 << 20) << " MiB needed, " << sjFree_ / (1 << 20) \
                   << " MiB free";                                                                                     \
  } while (0)

// A host tensor's slots (dim 0), each a contiguous block, `slotStride` elements apart on the
// device, the view spanning (slots - 1) * slotStride + block elements. The buffer holds just that
// span and kGuardBytes on either side, all poison but the slot blocks.
class WideSlots {
 public:
  WideSlots(const HostTensor& h, int64_t slotStride) : hostBytes_(h.bytes), stride_(slotStride) {
    const TensorView v = h.view();
    int64_t block = 1;
    bool contiguous = h.byteOffset == 0;
    for (int d = v.ndim - 1; d >= 0; --d) {
      contiguous = contiguous && v.strides[d] == block;
      if (d > 0) block *= v.shape[d];
    }
    if (!contiguous || slotStride < block)
      throw std::invalid_argument("WideSlots: expected a contiguous host tensor and a slot stride >= its " +
                                  std::to_string(block) + "-element slot block, got stride " +
                                  std::to_string(slotStride));
    blockBytes_ = block * dtypeBytes(v.dtype);
    buf_ = DeviceBuffer(static_cast<size_t>(wideBytes(h, slotStride)));
    buf_.fill(kPoison);
    view_ = v;
    view_.data = static_cast<char*>(buf_.data()) + kGuardBytes;
    view_.device = DeviceKind::CUDA;
    view_.deviceId = 0;
    view_.strides[0] = slotStride;
    for (int64_t s = 0; s < v.shape[0]; ++s)
      buf_.uploadBytes(h.bytes.data() + s * blockBytes_, static_cast<size_t>(blockBytes_),
                       static_cast<size_t>(blockAt(s)));
    driver::check(driver::api().cuCtxSynchronize(), "cuCtxSynchronize (after uploading the wide slots)");
  }

  const TensorView& view() const { return view_; }

  // The host tensor's bytes as uploaded, every slot block as the device holds it; a test failure
  // where a guard byte around a block is no longer poison (a write past a slot).
  std::vector<uint8_t> download() const {
    std::vector<uint8_t> bytes = hostBytes_;
    std::vector<uint8_t> around(static_cast<size_t>(blockBytes_ + 2 * kGuardBytes));
    for (int64_t s = 0; s < view_.shape[0]; ++s) {
      buf_.downloadBytes(around.data(), around.size(), static_cast<size_t>(blockAt(s) - kGuardBytes));
      std::copy(around.begin() + kGuardBytes, around.end() - kGuardBytes, bytes.begin() + s * blockBytes_);
      const int64_t changed = std::count_if(around.begin(), around.begin() + kGuardBytes, notPoison) +
                              std::count_if(around.end() - kGuardBytes, around.end(), notPoison);
      EXPECT_EQ(changed, 0) << "guard bytes around slot " << s << " changed";
    }
    return bytes;
  }

 private:
  static bool notPoison(uint8_t b) { return b != kPoison; }
  int64_t blockAt(int64_t slot) const { return kGuardBytes + slot * stride_ * dtypeBytes(view_.dtype); }

  std::vector<uint8_t> hostBytes_;  // as uploaded: the bytes outside the slot blocks
  int64_t stride_, blockBytes_ = 0;
  DeviceBuffer buf_;
  TensorView view_;
};

// Every launch of the call binds 64-bit offsets.
void expectIndexBits64(const std::vector<Specialization>& specs) {
  ASSERT_FALSE(specs.empty());
  for (const Specialization& s : specs) EXPECT_EQ(s.get("meta:index_bits", -1), 64) << s.canonical();
}

// Sequence i's state slot set to slots[i] in an index tensor (int32 or int64, any stride).
void setSlots(HostTensor& idx, const std::vector<int64_t>& slots) {
  const TensorView v = idx.view();
  ASSERT_EQ(v.shape[0], static_cast<int64_t>(slots.size()));
  for (size_t i = 0; i < slots.size(); ++i) storeElement(v, int64_t(i) * v.strides[0], double(slots[i]));
}

// A float32 workspace of `n` elements (at least one), poisoned: its contents must not matter.
TensorView poisonedWorkspace(DeviceBuffer& w, int64_t n) {
  n = std::max<int64_t>(n, 1);
  w = DeviceBuffer(static_cast<size_t>(n) * 4);
  w.fill(kPoison);
  return TensorView::contiguous(w.data(), DType::F32, {n});
}

class WideOffsetsGpu : public GpuTest {};

// The one-token update, bf16 state of 2 slots (one a row): slot 1 at 2^31 elements, a stride past
// INT32_MAX.
TEST_F(WideOffsetsGpu, SelectiveStateUpdate) {
  SsuCase c = mamba2Heads(/*H=*/8, /*P=*/64, /*N=*/128, /*G=*/1);
  c.tokens = false, c.batch = 2, c.stateT = DType::BF16, c.inT = DType::BF16, c.outT = DType::BF16, c.seed = 101;
  const SsuProblem p = makeProblem(c);
  ASSERT_EQ(p.S, 2);
  const int64_t stride = wideSlotStride(1);
  SKIP_UNLESS_DEVICE_HOLDS(wideBytes(p.state, stride));
  SsuProblem ref = p;
  runReference(ref);
  DeviceProblem dp(p);
  const WideSlots state(p.state, stride);
  dp.args.state = state.view();
  expectIndexBits64({detail::ssuSpecialization(dp.args, false, driver::currentArch())});
  runOp(false, dp.args);
  checkDeviceErrors();
  ssutest::expectMatches(p, ref, dp.download(kOut), state.download(), rowsWritten(p), p.slotMayBeWritten);
}

// The forward with initial and final states in place, bf16, 4 slots: sequence 0 reads and writes
// slot 3 (past 2^31 elements), sequence 1 slot 1.
TEST_F(WideOffsetsGpu, CausalConv1dStates) {
  ConvCase c;
  c.layout = ConvLayout::ChannelLast;
  c.xType = c.stateType = DType::BF16;
  c.D = 96, c.lens = {100, 100}, c.initialStates = c.finalStates = c.slotIndices = true, c.seed = 102;
  ConvProblem ref(c);
  ASSERT_EQ(ref.states.meta.shape[0], 4);
  setSlots(ref.initIdx, {3, 1});
  setSlots(ref.finalIdx, {3, 1});
  const int64_t stride = wideSlotStride(3);
  SKIP_UNLESS_DEVICE_HOLDS(wideBytes(ref.states, stride));
  ConvProblem gpu = ref;
  DeviceTensors d(gpu.all());
  const std::vector<uint8_t> statesBefore = ref.states.bytes;
  reference::causal_conv1d(ref.args());
  const WideSlots states(gpu.states, stride);
  CausalConv1dArgs a = deviceArgs(gpu, d);
  a.initial_states = a.final_states = states.view();
  expectIndexBits64(detail::convSpecializations(a, driver::currentArch()));
  causal_conv1d(a);
  checkDeviceErrors();
  const std::vector<char> rows(static_cast<size_t>(ref.out.meta.shape[0]), 1);
  expectWithin(compareTensor(ref.out, d.download(3), rows), bound(c.xType, kFp32Short), "out");
  expectWithin(compareTensor(ref.states, states.download(), statesBefore, {0, 1, 0, 1}), bound(c.stateType, kExact),
               "states");
}

// The forward with initial and final states in place, bf16, 4 slots: sequence 0 starts from and
// ends in slot 3 (past 2^31 elements), sequence 1 starts from zeros and ends in slot 2.
TEST_F(WideOffsetsGpu, SelectiveScanStates) {
  ScanCase c;
  c.uType = c.deltaType = c.zType = c.outType = c.bType = c.cType = c.stateType = DType::BF16;
  c.batch = 2, c.D = 64, c.N = 16, c.L = 300, c.seed = 103;
  c.initialStates = c.finalStates = c.slotIndices = true;
  ScanProblem p(c);
  ASSERT_TRUE(p.inPlace());
  ASSERT_EQ(p.S, 4);
  p.initSlot = {3, -1};
  p.finalSlot = {3, 2};
  setSlots(p.initIdx, p.initSlot);
  setSlots(p.finalIdx, p.finalSlot);
  const int64_t stride = wideSlotStride(3);
  SKIP_UNLESS_DEVICE_HOLDS(wideBytes(p.initStates, stride));
  const std::vector<uint8_t> statesBefore = p.initStates.bytes;
  DeviceTensors d(p.all());
  const WideSlots states(p.initStates, stride);
  SelectiveScanArgs a = deviceArgs(p, d);
  a.initial_states = a.final_states = states.view();
  DeviceBuffer ws;
  a.workspace = poisonedWorkspace(ws, selective_scan_workspace_size(a));
  expectIndexBits64(detail::scanSpecializations(a, driver::currentArch()));
  selective_scan(a);
  checkDeviceErrors();
  reference::selective_scan(p.args());
  const Fp32Error e = fp32Recurrence(c.L);
  const std::vector<char> rows(static_cast<size_t>(p.out.meta.shape[0]), 1);
  expectWithin(compareTensor(p.out, d.download(3), rows), bound(c.outType, e), "out");
  expectWithin(compareTensor(p.initStates, states.download(), statesBefore, p.slotsWritten()), bound(c.stateType, e),
               "final_states");
}

// One decode step, fp16 states of 2 slots (one a row, every cached draft accepted, so both slots
// are read and written): the SSM state's slot 1 at 2^31 elements, a stride past INT32_MAX.
TEST_F(WideOffsetsGpu, Mamba2DecodeStep) {
  enum : size_t { kConv = 0, kSsm, kXbcCache, kDtCache, kCached, kArrivals, kY = 16 };
  DecodeCase c;
  c.H = 8, c.P = 64, c.N = 64, c.G = 1, c.batch = 2, c.indices = false, c.L = 4, c.Lc = 4, c.seed = 104;
  c.xType = c.dtType = c.ssmStateType = c.convStateType = DType::F16;
  DecodeProblem p(c);
  ASSERT_EQ(p.ssmState.meta.shape[0], 2);
  for (int64_t s = 0; s < 2; ++s) storeElement(p.cachedTokens.view(), s, double(c.Lc));
  p.nextRound(1);
  const int64_t stride = wideSlotStride(1);
  SKIP_UNLESS_DEVICE_HOLDS(wideBytes(p.ssmState, stride));
  DeviceTensors d(p.all());
  const WideSlots ssm(p.ssmState, stride);
  const std::vector<uint8_t> convBefore = p.convState.bytes, ssmBefore = p.ssmState.bytes, yBefore = p.y.bytes;
  Mamba2DecodeState state = deviceState(p, d);
  state.ssm_state = ssm.view();
  const Mamba2MixerWeights weights = deviceWeights(p, d);
  const Mamba2DecodeStepArgs args = deviceArgs(p, d);
  expectIndexBits64({detail::decodeStepSpecialization(state, weights, args, driver::currentArch())});
  reference::mamba2_decode_step(p.state(), p.weights(), p.args());
  mamba2_decode_step(state, weights, args);
  checkDeviceErrors();
  const std::vector<char> both(2, 1);
  expectWithin(compareTensor(p.convState, d.download(kConv), convBefore, both), bound(c.convStateType, kExact),
               "conv_state");
  expectWithin(compareTensor(p.ssmState, ssm.download(), ssmBefore, both), bound(c.ssmStateType, kFp32Short),
               "ssm_state");
  expectWithin(compareTensor(p.y, d.download(kY), yBefore, both), bound(c.xType, kFp32Short), "y");
  EXPECT_EQ(d.download(kXbcCache), p.xbcCache.bytes) << "xbc_cache";
  EXPECT_EQ(d.download(kDtCache), p.dtCache.bytes) << "dt_cache";
  EXPECT_EQ(d.download(kCached), p.cachedTokens.bytes) << "cached_tokens";
  const std::vector<uint8_t> arr = d.download(kArrivals);
  EXPECT_TRUE(std::all_of(arr.begin(), arr.end(), [](uint8_t v) { return v == 0; })) << "arrivals not left zero";
}

}  // namespace
