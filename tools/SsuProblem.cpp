#include "tools/SsuProblem.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "kernels_dsl/Registry.h"
#include "kernels_dsl/SelectiveStateUpdate.h"
#include "runtime/ops/SelectiveStateUpdateCheck.h"
#include "ssmjit/error.h"
#include "ssmjit/reference.h"
#include "tools/ToolSupport.h"

namespace ssmjit::tool {

int64_t SsuShape::slots() const {
  if (!stateIdx) return batch;
  return batch + spareSlots + (write == StateWrite::PerToken ? batch * L : 0);
}

std::string SsuShape::label() const {
  std::string s = tokens ? strf("ssu-tokens L=%lld", static_cast<long long>(L)) : "ssu";
  s += strf(" b=%lld state %s in %s", static_cast<long long>(batch), shortDTypeName(stateT),
            shortDTypeName(inT));
  if (outT != inT) s += strf(" out %s", shortDTypeName(outT));
  if (write != StateWrite::Final) s += strf(" write %s", stateWriteName(write));
  if (pads) s += strf(" pads %lld", static_cast<long long>(pads));
  return s;
}

int64_t TensorDesc::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return present ? n : 0;
}

size_t TensorDesc::bytes() const {
  return static_cast<size_t>(numel()) * static_cast<size_t>(dtypeBytes(dtype));
}

std::array<TensorDesc, kNumTensors> ssuTensors(const SsuShape& s) {
  auto lead = [&](std::vector<int64_t> rest) {
    std::vector<int64_t> v{s.batch};
    if (s.tokens) v.push_back(s.L);
    v.insert(v.end(), rest.begin(), rest.end());
    return v;
  };
  std::array<TensorDesc, kNumTensors> t;
  t[kState] = {"state", true, s.stateT, {s.slots(), s.H, s.P, s.N}};
  t[kX] = {"x", true, s.inT, lead({s.H, s.P})};
  t[kDt] = {"dt", true, s.inT, lead({s.H})};
  t[kA] = {"A", true, DType::F32, {s.H}};
  t[kB] = {"B", true, s.inT, lead({s.G, s.N})};
  t[kC] = {"C", true, s.inT, lead({s.G, s.N})};
  t[kD] = {"D", s.hasD, DType::F32, {s.H}};
  t[kZ] = {"z", s.hasZ, s.inT, lead({s.H, s.P})};
  t[kDtBias] = {"dt_bias", s.hasDtBias, DType::F32, {s.H}};
  t[kOut] = {"out", true, s.outT, lead({s.H, s.P})};
  t[kStateIdx] = {"state_batch_indices", s.stateIdx, DType::I32, {s.batch}};
  t[kDstIdx] = {"dst_state_indices", s.write == StateWrite::PerToken, DType::I32,
                s.tokens ? std::vector<int64_t>{s.batch, s.L} : std::vector<int64_t>{s.batch}};
  return t;
}

namespace {

TensorView contiguousView(const TensorDesc& d, void* ptr, DeviceKind device) {
  TensorView v;
  if (!d.present) return v;
  v.data = ptr;
  v.dtype = d.dtype;
  v.ndim = static_cast<int>(d.shape.size());
  v.device = device;
  int64_t stride = 1;
  for (int i = v.ndim - 1; i >= 0; --i) {
    v.shape[i] = d.shape[i];
    v.strides[i] = stride;
    stride *= d.shape[i];
  }
  return v;
}

}  // namespace

SelectiveStateUpdateArgs ssuArgs(const SsuShape& s, const std::array<void*, kNumTensors>& p,
                                 DeviceKind device) {
  const auto t = ssuTensors(s);
  SelectiveStateUpdateArgs a;
  a.state = contiguousView(t[kState], p[kState], device);
  a.x = contiguousView(t[kX], p[kX], device);
  a.dt = contiguousView(t[kDt], p[kDt], device);
  a.A = contiguousView(t[kA], p[kA], device);
  a.B = contiguousView(t[kB], p[kB], device);
  a.C = contiguousView(t[kC], p[kC], device);
  a.D = contiguousView(t[kD], p[kD], device);
  a.z = contiguousView(t[kZ], p[kZ], device);
  a.dt_bias = contiguousView(t[kDtBias], p[kDtBias], device);
  a.out = contiguousView(t[kOut], p[kOut], device);
  a.state_batch_indices = contiguousView(t[kStateIdx], p[kStateIdx], device);
  a.dst_state_indices = contiguousView(t[kDstIdx], p[kDstIdx], device);
  a.dt_softplus = s.softplus;
  a.state_write = s.write;
  return a;
}

SelectiveStateUpdateArgs ssuArgsWithoutMemory(const SsuShape& s) {
  std::array<void*, kNumTensors> p;
  for (int i = 0; i < kNumTensors; ++i)
    p[i] = reinterpret_cast<void*>(static_cast<uintptr_t>(i + 1) << 20);
  return ssuArgs(s, p, DeviceKind::CUDA);
}

void checkSsuShape(const SsuShape& s) {
  const char* op = s.tokens ? "selective_state_update_tokens" : "selective_state_update";
  if (!s.tokens && s.L != 1)
    throw Error(Error::Kind::InvalidArgument,
                strf("%s: L is %lld, expected 1 (the one-token op)", op, static_cast<long long>(s.L)));
  if (s.pads > s.batch || (s.pads > 0 && !s.stateIdx))
    throw Error(Error::Kind::InvalidArgument,
                strf("%s: %lld pad rows need state_batch_indices and at most batch = %lld rows", op,
                     static_cast<long long>(s.pads), static_cast<long long>(s.batch)));
  detail::checkSsuArgs(ssuArgsWithoutMemory(s), s.tokens, DeviceKind::CUDA, op);
}

// ---------------------------------------------------------------------------------------------
// The specialisation mirror. Keep in step with launchSsu() in runtime/ops/SelectiveStateUpdate.cpp.
namespace {

int argIndex(const char* name) {
  for (int i = 0; i < kernels::kSsuNumArgs; ++i)
    if (std::strcmp(kernels::kSsuArgNames[i], name) == 0) return i;
  throw Error(Error::Kind::Internal,
              std::string("ssmjit tool: kernel argument '") + name +
                  "' is not in kSsuArgNames (the tool's specialisation mirror is out of date)");
}

int64_t alignClass(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  if (a % 16 == 0) return 16;
  if (a % 8 == 0) return 8;
  if (a % 4 == 0) return 4;
  if (a % 2 == 0) return 2;
  return 1;
}

int64_t nextPow2(int64_t n) {
  int64_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

// The kernel's axes for one argument (b batch, l token, h head, p head dim, n state, g group,
// s slot) and the name of its first stride argument; the rest follow in kSsuArgNames order.
struct Layout {
  const char* kernelAxes;
  const char* firstStride;
};

int64_t axisSize(char ax, const detail::SsuDims& d) {
  switch (ax) {
    case 'l': return d.L;
    case 'h': return d.H;
    case 'p': return d.P;
    case 'n': return d.N;
    case 'g': return d.G;
    default: return 0;  // b and s are dynamic
  }
}

void mapStrides(const TensorView& t, const char* tensorAxes, const Layout& lay,
                const detail::SsuDims& d, int64_t* v) {
  const int first = argIndex(lay.firstStride);
  for (int k = 0; lay.kernelAxes[k]; ++k) {
    const char ax = lay.kernelAxes[k];
    int64_t s = 0;
    if (t.defined()) {
      const char* hit = std::strchr(tensorAxes, ax);
      if (hit) s = t.strides[hit - tensorAxes];
    }
    // A static axis of size 1 is never stepped along: the op binds its stride to 0.
    if (axisSize(ax, d) == 1) s = 0;
    v[first + k] = s;
  }
}

bool offsetsFit32(const Layout& lay, const detail::SsuDims& d, const int64_t* v) {
  const int first = argIndex(lay.firstStride);
  __int128 reach = 0;
  for (int k = 0; lay.kernelAxes[k]; ++k) {
    int64_t size = 1;
    switch (lay.kernelAxes[k]) {
      case 'b': size = d.batch; break;
      case 'l': size = d.L; break;
      case 'h': size = d.H; break;
      case 'p': size = nextPow2(d.P); break;
      case 'n': size = std::max<int64_t>(4, nextPow2(d.N)); break;
      case 'g': size = d.G; break;
      case 's': size = d.S; break;
    }
    const int64_t stride = v[first + k];
    if (stride > INT32_MAX) return false;  // passed as an int32 parameter with 32-bit indexing
    if (size > 0) reach += static_cast<__int128>(size - 1) * stride;
  }
  return reach <= INT32_MAX;
}

}  // namespace

Specialization ssuSpecialization(const SelectiveStateUpdateArgs& a, bool tokens,
                                 const std::string& arch) {
  const char* op = tokens ? "selective_state_update_tokens" : "selective_state_update";
  const detail::SsuDims d = detail::checkSsuArgs(a, tokens, a.state.device, op);

  int64_t v[kernels::kSsuNumArgs] = {};
  v[argIndex("H")] = d.H;
  v[argIndex("P")] = d.P;
  v[argIndex("N")] = d.N;
  v[argIndex("G")] = d.G;
  v[argIndex("L")] = d.L;
  v[argIndex("has_D")] = a.D.defined();
  v[argIndex("has_z")] = a.z.defined();
  v[argIndex("has_dt_bias")] = a.dt_bias.defined();
  v[argIndex("dt_softplus")] = a.dt_softplus;
  v[argIndex("has_clamp")] = a.dt_max > a.dt_min;
  v[argIndex("has_state_idx")] = a.state_batch_indices.defined();
  v[argIndex("per_head")] = d.mamba2;
  v[argIndex("state_write")] = static_cast<int64_t>(a.state_write);

  const bool m2 = d.mamba2;
  const char* xAxes = m2 ? (tokens ? "blhp" : "bhp") : (tokens ? "blp" : "bp");
  const char* dtAxes = m2 ? (tokens ? "blh" : "bh") : xAxes;
  const char* bcAxes = m2 ? (tokens ? "blgn" : "bgn") : (tokens ? "bln" : "bn");
  const char* headAxes = m2 ? "h" : "p";
  const Layout kState{"shpn", "s_state_slot"}, kX{"blhp", "s_x_b"}, kDt{"blhp", "s_dt_b"},
      kA{"hpn", "s_A_h"}, kB{"blgn", "s_B_b"}, kC{"blgn", "s_C_b"}, kD{"hp", "s_D_h"},
      kZ{"blhp", "s_z_b"}, kDtb{"hp", "s_dtb_h"}, kOut{"blhp", "s_out_b"}, kIdx{"b", "s_idx_b"},
      kDst{"bl", "s_dst_b"};
  mapStrides(a.state, m2 ? "shpn" : "spn", kState, d, v);
  mapStrides(a.x, xAxes, kX, d, v);
  mapStrides(a.dt, dtAxes, kDt, d, v);
  mapStrides(a.A, m2 ? "h" : "pn", kA, d, v);
  mapStrides(a.B, bcAxes, kB, d, v);
  mapStrides(a.C, bcAxes, kC, d, v);
  mapStrides(a.D, headAxes, kD, d, v);
  mapStrides(a.z, xAxes, kZ, d, v);
  mapStrides(a.dt_bias, headAxes, kDtb, d, v);
  mapStrides(a.out, xAxes, kOut, d, v);
  mapStrides(a.state_batch_indices, "b", kIdx, d, v);
  mapStrides(a.dst_state_indices, tokens ? "bl" : "b", kDst, d, v);

  Specialization spec;
  spec.kernel = kernels::kSsuKernel;
  spec.arch = arch;
  for (const char* n : {"H", "P", "N", "G", "L", "has_D", "has_z", "has_dt_bias", "dt_softplus",
                        "has_clamp", "has_state_idx", "per_head", "state_write"})
    spec.set(n, v[argIndex(n)]);

  // Storage dtypes, in argument order; an absent tensor binds a fixed dtype.
  const TensorView* ptrs[] = {&a.state, &a.x, &a.dt, &a.A, &a.B, &a.C, &a.D, &a.z, &a.dt_bias,
                              &a.out, &a.state_batch_indices, &a.dst_state_indices};
  const int firstPtr = argIndex("state"), firstIdx = argIndex("state_idx"),
            lastPtr = argIndex("dst_idx"), lastData = argIndex("out");
  for (int i = firstPtr; i <= lastPtr; ++i) {
    const TensorView& t = *ptrs[i - firstPtr];
    const DType dflt = i >= firstIdx ? DType::I32 : DType::F32;
    spec.set(std::string("dtype:") + kernels::kSsuArgNames[i],
             static_cast<int64_t>(t.defined() ? t.dtype : dflt));  // DType == ScalarType numbering
  }
  // The device status record is int64[4] by contract (DeviceStatus.h).
  spec.set(std::string("dtype:") + kernels::kSsuArgNames[argIndex("err")],
           static_cast<int64_t>(ScalarType::I64));
  // Alignment classes of data pointers only (never of index arrays).
  for (int i = firstPtr; i <= lastData; ++i)
    spec.set(std::string("align:") + kernels::kSsuArgNames[i], alignClass(ptrs[i - firstPtr]->data));
  // Strides 0 and 1 bind; the rest stay dynamic with a divisibility class.
  for (int i = argIndex("s_state_slot"); i <= argIndex("s_dst_l"); ++i) {
    const int64_t s = v[i];
    if (s == 0 || s == 1)
      spec.set(kernels::kSsuArgNames[i], s);
    else
      spec.set(std::string("div:") + kernels::kSsuArgNames[i], s % 16 == 0 ? 16 : 1);
  }
  bool fits = true;
  for (const Layout* l : {&kState, &kX, &kDt, &kA, &kB, &kC, &kD, &kZ, &kDtb, &kOut, &kIdx, &kDst})
    fits = fits && offsetsFit32(*l, d, v);
  spec.set("meta:index_bits", fits ? 32 : 64);
  dsl::completeSpecialization(spec);
  return spec;
}

Traffic ssuTraffic(const SsuShape& s) {
  const int64_t rows = s.batch - s.pads;
  const int64_t sb = dtypeBytes(s.stateT), ib = dtypeBytes(s.inT), ob = dtypeBytes(s.outT);
  const int64_t stateRow = s.H * s.P * s.N * sb;
  Traffic t;
  t.stateRead = rows * stateRow;
  switch (s.write) {
    case StateWrite::Final: t.stateWritten = rows * stateRow; break;
    case StateWrite::None: t.stateWritten = 0; break;
    case StateWrite::PerToken: t.stateWritten = rows * s.L * stateRow; break;
  }
  const int64_t perToken = s.H * s.P * ib /*x*/ + s.H * ib /*dt*/ + 2 * s.G * s.N * ib /*B, C*/ +
                           (s.hasZ ? s.H * s.P * ib : 0);
  t.inputs = rows * s.L * perToken + s.H * 4 /*A*/ + (s.hasD ? s.H * 4 : 0) +
             (s.hasDtBias ? s.H * 4 : 0) + (s.stateIdx ? s.batch * 4 : 0) +
             (s.write == StateWrite::PerToken ? s.batch * s.L * 4 : 0);
  t.outputs = rows * s.L * s.H * s.P * ob;
  return t;
}

// ---------------------------------------------------------------------------------------------
// Host data.

double loadElement(DType dtype, const void* base, int64_t i) {
  const char* p = static_cast<const char*>(base) + i * dtypeBytes(dtype);
  switch (dtype) {
    case DType::F32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case DType::F16:
    case DType::BF16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return dtype == DType::F16 ? reference::fromHalfBits(h) : reference::fromBFloat16Bits(h);
    }
    case DType::I32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case DType::I64: {
      int64_t v;
      std::memcpy(&v, p, 8);
      return static_cast<double>(v);
    }
  }
  return NAN;
}

void storeElement(DType dtype, void* base, int64_t i, double v) {
  char* p = static_cast<char*>(base) + i * dtypeBytes(dtype);
  switch (dtype) {
    case DType::F32: {
      const auto f = static_cast<float>(v);
      std::memcpy(p, &f, 4);
      return;
    }
    case DType::F16:
    case DType::BF16: {
      const uint16_t h =
          dtype == DType::F16 ? reference::toHalfBits(v) : reference::toBFloat16Bits(v);
      std::memcpy(p, &h, 2);
      return;
    }
    case DType::I32: {
      const auto x = static_cast<int32_t>(v);
      std::memcpy(p, &x, 4);
      return;
    }
    case DType::I64: {
      const auto x = static_cast<int64_t>(v);
      std::memcpy(p, &x, 8);
      return;
    }
  }
}

void fillUniform(DType dtype, void* base, int64_t count, double lo, double hi,
                 std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(lo, hi);
  for (int64_t i = 0; i < count; ++i) storeElement(dtype, base, i, u(rng));
}

void valueRange(TensorId id, bool softplus, double* lo, double* hi) {
  double l = -1, h = 1;
  switch (id) {
    case kDt:  // softplus(dt + bias) stays small and positive; without softplus dt is used as is
      l = softplus ? -4 : 0.01;
      h = softplus ? 1 : 0.3;
      break;
    case kA: l = -4; h = -0.1; break;  // decays exp(A dt') in (0, 1): the state stays bounded
    case kZ: l = -3; h = 3; break;
    case kDtBias:
      l = softplus ? -1 : 0;
      h = softplus ? 0.5 : 0.1;
      break;
    default: break;
  }
  *lo = l;
  *hi = h;
}

std::array<void*, kNumTensors> HostProblem::ptrs() {
  std::array<void*, kNumTensors> p{};
  for (int i = 0; i < kNumTensors; ++i) p[i] = desc[i].present ? data[i].data() : nullptr;
  return p;
}

std::vector<char> HostProblem::stateSlotsWritten() const {
  std::vector<char> w(static_cast<size_t>(shape.slots()), 0);
  for (int64_t b = 0; b < shape.batch; ++b) {
    if (readSlot[b] < 0) continue;
    if (shape.write == StateWrite::Final) w[readSlot[b]] = 1;
    if (shape.write == StateWrite::PerToken)
      for (int64_t t = 0; t < shape.L; ++t)
        w[static_cast<size_t>(loadElement(DType::I32, data[kDstIdx].data(), b * shape.L + t))] = 1;
  }
  return w;
}

std::vector<char> HostProblem::outRowsWritten() const {
  std::vector<char> w(static_cast<size_t>(shape.batch), 0);
  for (int64_t b = 0; b < shape.batch; ++b) w[b] = readSlot[b] >= 0;
  return w;
}

HostProblem makeHostProblem(const SsuShape& s, std::mt19937_64& rng) {
  HostProblem p;
  p.shape = s;
  p.desc = ssuTensors(s);
  for (int i = 0; i < kNumTensors; ++i) {
    const TensorDesc& d = p.desc[i];
    if (!d.present) continue;
    p.data[i].assign(d.bytes(), kPoisonByte);
    if (i == kOut || i == kStateIdx || i == kDstIdx) continue;
    double lo, hi;
    valueRange(static_cast<TensorId>(i), s.softplus, &lo, &hi);
    fillUniform(d.dtype, p.data[i].data(), d.numel(), lo, hi, rng);
  }
  // Rows read a random permutation of the first batch + spare slots; pads are random rows.
  const int64_t readable = s.stateIdx ? s.batch + s.spareSlots : s.batch;
  std::vector<int64_t> slots(static_cast<size_t>(readable));
  std::iota(slots.begin(), slots.end(), 0);
  if (s.stateIdx) std::shuffle(slots.begin(), slots.end(), rng);
  p.readSlot.assign(slots.begin(), slots.begin() + s.batch);
  std::vector<int64_t> rows(static_cast<size_t>(s.batch));
  std::iota(rows.begin(), rows.end(), 0);
  std::shuffle(rows.begin(), rows.end(), rng);
  for (int64_t k = 0; k < s.pads; ++k) p.readSlot[rows[k]] = -1;
  if (s.stateIdx)
    for (int64_t b = 0; b < s.batch; ++b)
      storeElement(DType::I32, p.data[kStateIdx].data(), b, static_cast<double>(p.readSlot[b]));
  if (s.write == StateWrite::PerToken)  // snapshot slots follow the readable ones, one per token
    for (int64_t b = 0; b < s.batch; ++b)
      for (int64_t t = 0; t < s.L; ++t)
        storeElement(DType::I32, p.data[kDstIdx].data(), b * s.L + t,
                     static_cast<double>(readable + b * s.L + t));
  return p;
}

Comparison compareRows(DType dtype, const std::vector<uint8_t>& got, const std::vector<uint8_t>& ref,
                       const std::vector<uint8_t>& before, int64_t rowElems,
                       const std::vector<char>& rowWritten) {
  Comparison c;
  const int64_t eb = dtypeBytes(dtype);
  const int64_t rowBytes = rowElems * eb;
  double num = 0, den = 0;
  for (size_t r = 0; r < rowWritten.size(); ++r) {
    const int64_t first = static_cast<int64_t>(r) * rowElems;
    if (!rowWritten[r]) {
      for (int64_t k = first * eb; k < first * eb + rowBytes; ++k) {
        if (got[k] == before[k]) continue;
        if (c.strayBytes++ == 0)
          c.firstProblem = strf("row %zu is not to be written, but its byte %lld changed from 0x%02x to 0x%02x",
                                r, static_cast<long long>(k - first * eb), before[k], got[k]);
      }
      continue;
    }
    for (int64_t i = first; i < first + rowElems; ++i) {
      const double g = loadElement(dtype, got.data(), i), e = loadElement(dtype, ref.data(), i);
      ++c.compared;
      if (!std::isfinite(g) || !std::isfinite(e)) {
        if (c.nonFinite++ == 0)
          c.firstProblem = strf("row %zu element %lld is %g, reference %g", r,
                                static_cast<long long>(i - first), g, e);
        continue;
      }
      c.maxAbsErr = std::max(c.maxAbsErr, std::fabs(g - e));
      num += (g - e) * (g - e);
      den += e * e;
    }
  }
  c.relL2 = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  return c;
}

double tolerance(DType dtype) {
  switch (dtype) {
    case DType::F32: return 1e-4;
    case DType::F16: return 2e-3;  // fp16 keeps 11 bits: one rounding is 2^-11 relative
    case DType::BF16: return 1e-2; // bf16 keeps 8 bits: one rounding is 2^-8 relative
    default: return 0;
  }
}

}  // namespace ssmjit::tool
