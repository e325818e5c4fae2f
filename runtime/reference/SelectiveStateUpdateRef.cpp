// The float64 CPU reference of the selective-state-update ops (see ssmjit/reference.h).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/ops/SelectiveStateUpdateCheck.h"
#include "runtime/reference/ElementAccess.h"
#include "ssmjit/error.h"
#include "ssmjit/reference.h"

namespace ssmjit::reference {
namespace {

// ----- 16-bit floats: `mant` fraction bits, `expo` exponent bits (fp16 10/5, bf16 7/8).

uint16_t encode16(double v, int mant, int expo) {
  const int bias = (1 << (expo - 1)) - 1;
  const uint32_t infBits = ((1u << expo) - 1u) << mant;
  const uint32_t sign = std::signbit(v) ? 0x8000u : 0u;
  if (std::isnan(v)) return static_cast<uint16_t>(sign | infBits | (1u << (mant - 1)));
  const double a = std::fabs(v);
  if (std::isinf(a)) return static_cast<uint16_t>(sign | infBits);
  if (a == 0) return static_cast<uint16_t>(sign);
  int e = 0;
  std::frexp(a, &e);
  e -= 1;  // a in [2^e, 2^(e+1))
  if (e > bias) return static_cast<uint16_t>(sign | infBits);
  const int emin = 1 - bias;
  // Scale so that one unit is the target's quantum at this exponent (exact: a power of two),
  // then round to an integer with ties to even.
  const int quantumExp = std::max(e, emin) - mant;
  const auto r = static_cast<uint32_t>(std::nearbyint(std::ldexp(a, -quantumExp)));
  uint32_t bits;
  if (e < emin)
    bits = r;  // subnormal; r == 2^mant is the smallest normal, which has the same bits
  else
    bits = (static_cast<uint32_t>(e + bias) << mant) + (r - (1u << mant));  // carry may reach inf
  return static_cast<uint16_t>(sign | bits);
}

double decode16(uint16_t h, int mant, int expo) {
  const int bias = (1 << (expo - 1)) - 1;
  const bool neg = h & 0x8000u;
  const uint32_t e = (h >> mant) & ((1u << expo) - 1u);
  const uint32_t m = h & ((1u << mant) - 1u);
  double v;
  if (e == (1u << expo) - 1u)
    v = m ? std::nan("") : INFINITY;
  else if (e == 0)
    v = std::ldexp(static_cast<double>(m), 1 - bias - mant);
  else
    v = std::ldexp(static_cast<double>(m | (1u << mant)), static_cast<int>(e) - bias - mant);
  return neg ? -v : v;
}

// Every 16-bit pattern decoded once: the reference reads millions of elements.
const double* decodeTable(bool bf16) {
  static const std::vector<double> half = [] {
    std::vector<double> t(65536);
    for (uint32_t i = 0; i < 65536; ++i) t[i] = decode16(static_cast<uint16_t>(i), 10, 5);
    return t;
  }();
  static const std::vector<double> bfloat = [] {
    std::vector<double> t(65536);
    for (uint32_t i = 0; i < 65536; ++i) t[i] = decode16(static_cast<uint16_t>(i), 7, 8);
    return t;
  }();
  return bf16 ? bfloat.data() : half.data();
}

// ----- elements as double: loadElement (ElementAccess.h), store and loadIndex

// Only state and out are written, and the check makes them floats.
void store(const TensorView& t, int64_t off, double v) {
  if (t.dtype != DType::F32 && t.dtype != DType::F16 && t.dtype != DType::BF16)
    throw Error(Error::Kind::Internal, "reference: store to a non-float tensor");
  storeElement(t, off, v);
}

// ----- the update

void run(const SelectiveStateUpdateArgs& a, bool tokens) {
  const char* op = tokens ? "reference::selective_state_update_tokens" : "reference::selective_state_update";
  const detail::SsuDims d = detail::checkSsuArgs(a, tokens, DeviceKind::CPU, op);
  const bool m2 = d.mamba2;
  const bool perToken = a.state_write == StateWrite::PerToken;

  // Offsets by the documented layouts (ops.h): [b][t] lead where present, then per form.
  // x, z, out: [b][t][h][p] (Mamba-1: [b][t][p]); B, C: [b][t][g][n] (Mamba-1: [b][t][n]).
  auto leadOff = [&](const TensorView& t, int64_t b, int64_t tok, int64_t mid, int64_t inner) {
    int k = 0;
    int64_t o = b * t.strides[k++];
    if (tokens) o += tok * t.strides[k++];
    if (m2) o += mid * t.strides[k++];
    return o + inner * t.strides[k];
  };
  auto dtOff = [&](int64_t b, int64_t tok, int64_t h, int64_t p) {
    const TensorView& t = a.dt;
    int k = 0;
    int64_t o = b * t.strides[k++];
    if (tokens) o += tok * t.strides[k++];
    return o + (m2 ? h : p) * t.strides[k];
  };
  auto stOff = [&](int64_t slot, int64_t h, int64_t p, int64_t n) {
    const TensorView& t = a.state;
    return m2 ? slot * t.strides[0] + h * t.strides[1] + p * t.strides[2] + n * t.strides[3]
              : slot * t.strides[0] + p * t.strides[1] + n * t.strides[2];
  };
  auto dstOff = [&](int64_t b, int64_t tok) {
    const TensorView& t = a.dst_state_indices;
    return b * t.strides[0] + (tokens ? tok * t.strides[1] : 0);
  };

  // Every index first, so that a bad one throws before anything is written.
  std::vector<int64_t> slots(static_cast<size_t>(d.batch));
  for (int64_t b = 0; b < d.batch; ++b) {
    const int64_t s =
        a.state_batch_indices.defined() ? loadIndex(a.state_batch_indices, b * a.state_batch_indices.strides[0]) : b;
    if (s != -1 && (s < 0 || s >= d.S))
      throw Error(Error::Kind::InvalidArgument,
                  std::string(op) + ": state_batch_indices[" + std::to_string(b) + "] = " + std::to_string(s) +
                      ", expected -1 (pad) or a slot in [0, " + std::to_string(d.S) + ")");
    slots[static_cast<size_t>(b)] = s;
    if (s == -1 || !perToken) continue;
    for (int64_t t = 0; t < d.L; ++t) {
      const int64_t ds = loadIndex(a.dst_state_indices, dstOff(b, t));
      if (ds != -1 && (ds < 0 || ds >= d.S))
        throw Error(Error::Kind::InvalidArgument,
                    std::string(op) + ": dst_state_indices[" + std::to_string(b) +
                        (tokens ? ", " + std::to_string(t) : std::string()) + "] = " + std::to_string(ds) +
                        ", expected -1 (skip) or a slot in [0, " + std::to_string(d.S) + ")");
    }
  }

  const bool clamp = a.dt_max > a.dt_min;
  const int64_t headsPerGroup = d.H / d.G;
  const size_t LN = static_cast<size_t>(d.L * d.N);
  // Per row: B and C of every token for the current group, read once (they do not depend on
  // the head within the group or on p); dt' per token for the current head or channel.
  std::vector<double> Bs(LN), Cs(LN), dts(static_cast<size_t>(d.L)), st(static_cast<size_t>(d.N));
  auto dtEff = [&](int64_t b, int64_t t, int64_t h, int64_t p) {
    const int64_t c = m2 ? h : p;  // per-head (Mamba-2) or per-channel (Mamba-1) parameters
    double dt = loadElement(a.dt, dtOff(b, t, h, p));
    if (a.dt_bias.defined()) dt += loadElement(a.dt_bias, c * a.dt_bias.strides[0]);
    if (a.dt_softplus) dt = dt > 20.0 ? dt : std::log1p(std::exp(dt));
    if (clamp) dt = std::min(std::max(dt, double{a.dt_min}), double{a.dt_max});
    return dt;
  };
  for (int64_t b = 0; b < d.batch; ++b) {
    const int64_t slot = slots[static_cast<size_t>(b)];
    if (slot == -1) continue;  // pad row: nothing read, nothing written
    int64_t loadedGroup = -1;
    for (int64_t h = 0; h < d.H; ++h) {
      const int64_t g = h / headsPerGroup;
      if (g != loadedGroup) {
        for (int64_t t = 0; t < d.L; ++t)
          for (int64_t n = 0; n < d.N; ++n) {
            Bs[t * d.N + n] = loadElement(a.B, leadOff(a.B, b, t, g, n));
            Cs[t * d.N + n] = loadElement(a.C, leadOff(a.C, b, t, g, n));
          }
        loadedGroup = g;
      }
      for (int64_t p = 0; p < d.P; ++p) {
        const int64_t c = m2 ? h : p;
        if (!m2 || p == 0)
          for (int64_t t = 0; t < d.L; ++t) dts[t] = dtEff(b, t, h, p);
        for (int64_t n = 0; n < d.N; ++n) st[n] = loadElement(a.state, stOff(slot, h, p, n));
        for (int64_t t = 0; t < d.L; ++t) {
          const double dt = dts[t];
          const double x = loadElement(a.x, leadOff(a.x, b, t, h, p));
          const double dAHead = m2 ? std::exp(loadElement(a.A, h * a.A.strides[0]) * dt) : 0.0;
          const double* Bt = &Bs[t * d.N];
          const double* Ct = &Cs[t * d.N];
          double y = 0;
          for (int64_t n = 0; n < d.N; ++n) {
            const double dA = m2 ? dAHead : std::exp(loadElement(a.A, p * a.A.strides[0] + n * a.A.strides[1]) * dt);
            st[n] = st[n] * dA + (Bt[n] * dt) * x;
            y += st[n] * Ct[n];
          }
          if (a.D.defined()) y += x * loadElement(a.D, c * a.D.strides[0]);
          if (a.z.defined()) {
            const double z = loadElement(a.z, leadOff(a.z, b, t, h, p));
            y *= z / (1.0 + std::exp(-z));  // z * sigmoid(z)
          }
          store(a.out, leadOff(a.out, b, t, h, p), y);
          if (perToken) {
            const int64_t ds = loadIndex(a.dst_state_indices, dstOff(b, t));
            if (ds != -1)
              for (int64_t n = 0; n < d.N; ++n) store(a.state, stOff(ds, h, p, n), st[n]);
          }
        }
        if (a.state_write == StateWrite::Final)
          for (int64_t n = 0; n < d.N; ++n) store(a.state, stOff(slot, h, p, n), st[n]);
      }
    }
  }
}

}  // namespace

uint16_t toHalfBits(double v) { return encode16(v, 10, 5); }
uint16_t toBFloat16Bits(double v) { return encode16(v, 7, 8); }
double fromHalfBits(uint16_t bits) { return decodeTable(false)[bits]; }
double fromBFloat16Bits(uint16_t bits) { return decodeTable(true)[bits]; }

void selective_state_update(const SelectiveStateUpdateArgs& args) { run(args, false); }
void selective_state_update_tokens(const SelectiveStateUpdateArgs& args) { run(args, true); }

}  // namespace ssmjit::reference
